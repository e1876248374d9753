"""Benchmark GPU availability at scale: its read latency, what it does to the box reads,
what its watches cost, and how soon a taken or freed GPU shows.

Starts a scale testbed (``--pool-file``, by default testbed/nodes-scale-10k.yaml: 12 CPU
nodes taking 1,000 pods each, 20 L4 nodes with 8 GPUs each), creates ``--boxes`` boxes,
then, before and after filling the cluster with ``--foreign-pods`` pods that are not
boxes (bare pods in a namespace of their own, placed by the scheduler):

- starts a fresh controller with availability on, times ``--reads`` sequential
  ``GET /api/v1/gpu/availability``, list and get requests, and reads its resident
  memory; then the same with availability off. The difference in memory is what the
  node and all-namespace pod watches add;
- at the end, ``--samples`` times: creates a pod taking one L4 and later deletes it, and
  measures from the moment this benchmark's own pod watch sees the pod bound (or gone)
  to the moment the availability event with the new count arrives on the dashboard's
  event stream. Both clocks are this process's monotonic clock.

Filling stops after ``--fill-minutes``; the figures then say how many pods ran.

With ``--churn``, it measures instead what availability costs while pods come and go: two
controllers on one scale testbed, this checkout's and ``--baseline``'s (checked out with
``git worktree`` into a temporary directory), both with availability on, while
``--foreign-pods`` bare pods that are not boxes are created and bound, and then for
``--churn-minutes`` replaced (deleted, a quarter of them first marked Succeeded) and
recreated. Throughout, one client reads ``GET /api/v1/gpu/availability`` from both
controllers in turn, and one after another sample pods take an L4 and give it back; each
controller's event-to-push time is from this benchmark's own pod watch seeing the sample
bound (or gone) to the availability event with the new count on that controller's
dashboard stream. Each controller's CPU time over the window is read from /proc.

    PYTHONPATH=testbed:controller .venv/bin/python bench/availability_bench.py
    PYTHONPATH=testbed:controller .venv/bin/python bench/availability_bench.py --churn
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import record
import requests
from api_bench import percentile, rss_mib
from devboxes_testbed import L4
from devboxes_testbed.api import Api
from devboxes_testbed.controller import example_settings
from devboxes_testbed.rig import Rig
from scratch import scratch_dir, scratch_rig

REPO = Path(__file__).resolve().parent.parent
BOXES = "bench-boxes"
FOREIGN = "bench-foreign"
# The commit before availability kept running totals: --churn's comparison by default.
BASELINE = "f6fb685"
# Of the pods --churn replaces, this share is first marked Succeeded, as a finished pod is.
COMPLETED_SHARE = 0.25
# Long enough for the availability thread, the garbage collector and the first bodies
# made for reads to settle before memory is read.
SETTLE_SECONDS = 10


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


class Served:
    """A fresh controller of the example settings on the boxes' namespace, availability on
    or off, and the keep-alive client that reads it."""

    def __init__(
        self,
        rig: Rig,
        availability: bool,
        source: Path | None = None,
        identity: str | None = None,
    ) -> None:
        settings = example_settings(BOXES)
        settings["availability"] = {"enabled": availability}
        self.controller = rig.start_controller(
            settings, timeout=300, lease_seconds=None, source=source, identity=identity
        )
        self.api = Api(self.controller.url, self.controller.token)
        # Ready means the box caches are loaded; the counts need the node and pod watches
        # loaded too.
        deadline = time.monotonic() + 300
        try:
            while availability and self.available() is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"availability never became known; see {self.controller.log}")
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise

    def get(self, path: str, **params: str) -> Any:
        return self.api.ok("GET", path, params=params).json()

    def available(self) -> int | None:
        body = self.get("/gpu/availability")
        value: int | None = next(p["available"] for p in body["profiles"] if p["name"] == L4)
        return value

    def timed(self, path: str) -> float:
        started = time.perf_counter()
        self.get(path)
        return (time.perf_counter() - started) * 1000

    def stop(self) -> None:
        # A watch blocked in a read can hold up a graceful stop; the numbers are in then.
        self.controller.stop(grace=30)


@dataclass
class Reading:
    """One fresh controller's figures: latencies in ms (p50, p99), memory in MiB."""

    availability: tuple[float, float] | None
    list: tuple[float, float]
    get: tuple[float, float]
    list_bytes: int
    rss: float


def read_figures(controller: Served, names: list[str], reads: int, on: bool) -> Reading:
    def p50_p99(samples: list[float]) -> tuple[float, float]:
        return statistics.median(samples), percentile(samples, 99)

    # One of each first, so no figure includes making a body for the first time.
    controller.get("/devboxes")
    availability = None
    if on:
        controller.get("/gpu/availability")
        availability = p50_p99([controller.timed("/gpu/availability") for _ in range(reads)])
    listed = p50_p99([controller.timed("/devboxes") for _ in range(reads)])
    got = p50_p99([controller.timed(f"/devboxes/{random.choice(names)}") for _ in range(reads)])
    size = len(controller.api.request("GET", "/devboxes").content)
    time.sleep(SETTLE_SECONDS)
    return Reading(availability, listed, got, size, rss_mib(controller.controller.pid))


def both_controllers(rig: Rig, names: list[str], reads: int) -> tuple[Reading, Reading]:
    """A fresh controller with availability on, then one with it off, on the same boxes."""
    found = []
    for on in (True, False):
        controller = Served(rig, availability=on)
        try:
            time.sleep(SETTLE_SECONDS)
            found.append(read_figures(controller, names, reads, on))
            log(f"  availability {'on' if on else 'off'}: {found[-1]}")
        finally:
            controller.stop()
    return found[0], found[1]


def create_boxes(controller: Served, count: int, workers: int) -> list[str]:
    names = [f"bench-{i:04d}-{secrets.token_hex(2)}" for i in range(count)]

    def create(name: str) -> None:
        # A busy apiserver makes the controller answer 503 with Retry-After: wait, retry.
        # A write that outlived the controller's deadline may still have landed, so a
        # retry can find the box there already.
        retried = False
        while True:
            try:
                response = controller.api.request("POST", "/devboxes", json={"name": name})
            except requests.ConnectionError:
                # The server closed a kept-alive connection as the request went out.
                retried = True
                continue
            if response.status_code == 201 or (retried and response.status_code == 409):
                return
            retried = True
            if response.status_code != 503:
                raise SystemExit(f"create {name}: {response.status_code} {response.text}")
            time.sleep(float(response.headers.get("Retry-After", "1")))

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, names))
    return names


def wait_boxes_ready(controller: Served, names: list[str]) -> None:
    wanted = set(names)
    while True:
        items = controller.get("/devboxes")["items"]
        ready = sum(1 for box in items if box["name"] in wanted and box["state"] == "ready")
        if ready == len(wanted):
            return
        log(f"  {ready}/{len(wanted)} boxes ready")
        time.sleep(15)


def foreign_pod(index: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"filler-{index:05d}", "labels": {"app": "filler"}},
        "spec": {
            "containers": [
                {
                    "name": "work",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ]
        },
    }


def fill_with_foreign_pods(bed: Any, count: int, workers: int, minutes: float) -> int:
    """Create ``count`` bare pods and wait until they run; the number running at the end."""
    from kubernetes import client

    core = client.CoreV1Api(bed.api_client())
    deadline = time.monotonic() + 60 * minutes
    stop = threading.Event()

    def create(index: int) -> None:
        while not stop.is_set():
            try:
                core.create_namespaced_pod(FOREIGN, foreign_pod(index))
                return
            except client.ApiException as error:
                if error.status == 409:
                    return
                if error.status not in (429, 500, 503, 504):
                    raise
                time.sleep(1)

    def running() -> int:
        pods = core.list_namespaced_pod(FOREIGN, label_selector="app=filler").items
        return sum(1 for p in pods if p.status.phase == "Running")

    with ThreadPoolExecutor(workers) as pool:
        pending = [pool.submit(create, i) for i in range(count)]
        while not all(f.done() for f in pending):
            if time.monotonic() > deadline:
                stop.set()
                break
            done = sum(1 for f in pending if f.done())
            log(f"  {done}/{count} foreign pods created")
            time.sleep(30)
    for future in pending:
        if future.done() and future.exception() is not None:
            raise SystemExit(f"creating a foreign pod failed: {future.exception()}")
    while True:
        now = running()
        created = len(core.list_namespaced_pod(FOREIGN, label_selector="app=filler").items)
        if now >= created or time.monotonic() > deadline:
            return now
        log(f"  {now}/{created} foreign pods running")
        time.sleep(20)


class EventLog:
    """The availability events of the dashboard stream, as (arrival, available) pairs."""

    def __init__(self, controller: Served) -> None:
        self.events: list[tuple[float, int | None]] = []
        self.condition = threading.Condition()
        self.closed = False
        self._response = controller.api.session.get(
            f"{controller.api.url}/dashboard/events", stream=True, timeout=(5, None)
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        kind = None
        try:
            for line in self._response.iter_lines(decode_unicode=True):
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: ") and kind == "availability":
                    body = json.loads(line.removeprefix("data: "))
                    value = next(p["available"] for p in body["profiles"] if p["name"] == L4)
                    with self.condition:
                        self.events.append((time.monotonic(), value))
                        self.condition.notify_all()
        except (AttributeError, OSError, requests.RequestException):
            # close() pulls the connection from under this reader; anything else is real.
            if not self.closed:
                raise

    def wait_for(self, value: int, after: int, timeout: float = 60) -> float:
        """Arrival time of the first event from index ``after`` on with this count."""
        deadline = time.monotonic() + timeout
        with self.condition:
            while True:
                for arrived, seen in self.events[after:]:
                    if seen == value:
                        return arrived
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SystemExit(f"no availability event with {value} free within {timeout}s")
                self.condition.wait(remaining)

    def close(self) -> None:
        self.closed = True
        self._response.close()


def gpu_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"sample": "yes"}},
        "spec": {
            "containers": [
                {
                    "name": "work",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "nodeSelector": {"accelerator": L4},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }


def time_changes(bed: Any, controller: Served, samples: int) -> list[float]:
    """Seconds from a pod's binding (or deletion) seen by our watch to the event's arrival."""
    from kubernetes import client, watch

    core = client.CoreV1Api(bed.api_client())
    stream = EventLog(controller)
    bound: dict[str, float] = {}
    gone: dict[str, float] = {}
    stop = threading.Event()

    def observe() -> None:
        watcher = watch.Watch()
        try:
            for event in watcher.stream(core.list_namespaced_pod, FOREIGN, label_selector="sample"):
                pod = event["object"]
                if event["type"] == "DELETED":
                    gone.setdefault(pod.metadata.name, time.monotonic())
                elif pod.spec.node_name:
                    bound.setdefault(pod.metadata.name, time.monotonic())
                if stop.is_set():
                    return
        except Exception:
            # The testbed stopping ends the watch; before that, a failure is real.
            if not stop.is_set():
                raise

    threading.Thread(target=observe, daemon=True).start()
    time.sleep(1)
    latencies = []
    base = controller.available()
    assert base is not None
    for index in range(samples):
        name = f"sample-{index}"
        mark = len(stream.events)
        core.create_namespaced_pod(FOREIGN, gpu_pod(name))
        arrived = stream.wait_for(base - 1, mark)
        while name not in bound:
            time.sleep(0.01)
        latencies.append(arrived - bound[name])
        mark = len(stream.events)
        core.delete_namespaced_pod(name, FOREIGN, grace_period_seconds=0)
        arrived = stream.wait_for(base, mark)
        while name not in gone:
            time.sleep(0.01)
        latencies.append(arrived - gone[name])
    stop.set()
    stream.close()
    return latencies


def print_report(
    args: argparse.Namespace,
    running: int,
    before: tuple[Reading, Reading],
    after: tuple[Reading, Reading],
) -> None:
    def ms(pair: tuple[float, float] | None) -> str:
        assert pair is not None
        return f"{pair[0]:.2f} / {pair[1]:.2f} ms"

    print(f"\n{args.boxes} boxes; {running} of {args.foreign_pods} foreign pods running")
    print(f"{'figure':<52} {'no foreign pods':>22} {'with foreign pods':>22}")
    rows = [
        ("GET /gpu/availability p50 / p99", ms(before[0].availability), ms(after[0].availability)),
        ("GET /devboxes (list) p50 / p99, availability on", ms(before[0].list), ms(after[0].list)),
        ("GET /devboxes/{name} p50 / p99, availability on", ms(before[0].get), ms(after[0].get)),
        ("GET /devboxes (list) p50 / p99, availability off", ms(before[1].list), ms(after[1].list)),
        ("GET /devboxes/{name} p50 / p99, availability off", ms(before[1].get), ms(after[1].get)),
        (
            "list body",
            f"{before[0].list_bytes / 1024:.0f} KiB",
            f"{after[0].list_bytes / 1024:.0f} KiB",
        ),
        ("controller RSS, availability on", f"{before[0].rss:.0f} MiB", f"{after[0].rss:.0f} MiB"),
        ("controller RSS, availability off", f"{before[1].rss:.0f} MiB", f"{after[1].rss:.0f} MiB"),
        (
            "RSS added by the node and pod watches",
            f"{before[0].rss - before[1].rss:.0f} MiB",
            f"{after[0].rss - after[1].rss:.0f} MiB",
        ),
    ]
    for name, first, second in rows:
        print(f"{name:<52} {first:>22} {second:>22}")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Churn:
    """Bare pods that are not boxes: ``count`` created by ``workers`` threads, then, until
    stopped, one at a time per thread replaced by a new one."""

    def __init__(self, core: Any, count: int, workers: int) -> None:
        self.core = core
        self.count = count
        self.workers = workers
        self.alive: list[str] = []
        self.lock = threading.Lock()
        self.filled = threading.Event()
        self.stop = threading.Event()
        self.created = self.deleted = self.completed = 0
        self._next = 0
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join()

    def _call(self, function: Any, *args: Any, **kwargs: Any) -> None:
        from kubernetes import client

        while True:
            try:
                function(*args, **kwargs)
                return
            except client.ApiException as error:
                if error.status in (404, 409):
                    return
                if error.status not in (429, 500, 503, 504):
                    raise
                time.sleep(1)

    def _create(self) -> None:
        with self.lock:
            index = self._next
            self._next += 1
        self._call(self.core.create_namespaced_pod, FOREIGN, foreign_pod(index))
        with self.lock:
            self.alive.append(f"filler-{index:05d}")
            self.created += 1
            if self.created >= self.count:
                self.filled.set()

    def _replace(self) -> None:
        with self.lock:
            if not self.alive:
                return
            name = self.alive.pop(random.randrange(len(self.alive)))
        if random.random() < COMPLETED_SHARE:
            self._call(
                self.core.patch_namespaced_pod_status,
                name,
                FOREIGN,
                {"status": {"phase": "Succeeded"}},
            )
            with self.lock:
                self.completed += 1
        self._call(self.core.delete_namespaced_pod, name, FOREIGN, grace_period_seconds=0)
        with self.lock:
            self.deleted += 1
        self._create()

    def _work(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                filling = self._next < self.count
            if filling:
                self._create()
            else:
                self._replace()


class SampleWatch:
    """This benchmark's own watch of the sample pods: when each was seen bound and gone."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.bound: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.stop = threading.Event()
        threading.Thread(target=self._observe, daemon=True).start()

    def _observe(self) -> None:
        from kubernetes import watch

        try:
            for event in watch.Watch().stream(
                self.core.list_namespaced_pod, FOREIGN, label_selector="sample"
            ):
                pod = event["object"]
                if event["type"] == "DELETED":
                    self.gone.setdefault(pod.metadata.name, time.monotonic())
                elif pod.spec.node_name:
                    self.bound.setdefault(pod.metadata.name, time.monotonic())
                if self.stop.is_set():
                    return
        except Exception:
            # The testbed stopping ends the watch; before that, a failure is real.
            if not self.stop.is_set():
                raise

    @staticmethod
    def seen(times: dict[str, float], name: str) -> float:
        while name not in times:
            time.sleep(0.01)
        return times[name]


def churn_window(
    core: Any, controllers: dict[str, Served], churn: Churn, minutes: float
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float]]:
    """Route latencies (ms), event-to-push times (ms) and CPU seconds per controller while
    the pods are created and then replaced for ``minutes``."""
    reads: dict[str, list[float]] = {label: [] for label in controllers}
    pushes: dict[str, list[float]] = {label: [] for label in controllers}
    streams = {label: EventLog(served) for label, served in controllers.items()}
    samples = SampleWatch(core)
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            for label, served in controllers.items():
                reads[label].append(served.timed("/gpu/availability"))
            time.sleep(0.02)

    def sample() -> None:
        bases = {label: served.available() for label, served in controllers.items()}
        index = 0
        while not done.is_set():
            name = f"sample-{index}"
            index += 1
            marks = {label: len(stream.events) for label, stream in streams.items()}
            core.create_namespaced_pod(FOREIGN, gpu_pod(name))
            for label, stream in streams.items():
                arrived = stream.wait_for(bases[label] - 1, marks[label], timeout=300)
                pushes[label].append(1000 * (arrived - SampleWatch.seen(samples.bound, name)))
            marks = {label: len(stream.events) for label, stream in streams.items()}
            core.delete_namespaced_pod(name, FOREIGN, grace_period_seconds=0)
            for label, stream in streams.items():
                arrived = stream.wait_for(bases[label], marks[label], timeout=300)
                pushes[label].append(1000 * (arrived - SampleWatch.seen(samples.gone, name)))

    cpu = {label: cpu_seconds(served.controller.pid) for label, served in controllers.items()}
    threads = [threading.Thread(target=read, daemon=True), threading.Thread(target=sample)]
    for thread in threads:
        thread.start()
    churn.start()
    while not churn.filled.wait(30):
        log(f"  {churn.created}/{churn.count} foreign pods created")
    log(f"  {churn.count} created; replacing pods for {minutes} min ...")
    time.sleep(60 * minutes)
    done.set()
    for thread in threads:
        thread.join()
    churn.join()
    cpu = {
        label: cpu_seconds(served.controller.pid) - cpu[label]
        for label, served in controllers.items()
    }
    samples.stop.set()
    for stream in streams.values():
        stream.close()
    return reads, pushes, cpu


def recount_figures(served: Served) -> str:
    """The running totals' recount counters, as the controller's /metrics says them."""
    response = served.api.session.get(f"{served.api.url}/metrics", timeout=30)
    response.raise_for_status()
    text = response.text
    lines = [
        line
        for line in text.splitlines()
        if line.startswith("devboxes_availability_recount") and not line.startswith("#")
    ]
    return "; ".join(lines) or "none (a controller without running totals)"


def run_churn(args: argparse.Namespace) -> None:
    with (
        scratch_dir("devboxes-availability-churn-") as workdir,
        record.checkout(args.baseline, workdir / "baseline") as baseline_tree,
    ):
        log(f"starting a scale testbed ({args.pool_file.name}) in {workdir} ...")
        with Rig(workdir) as rig:
            measure_churn(args, rig, baseline_tree)


def measure_churn(args: argparse.Namespace, rig: Rig, baseline_tree: Path) -> None:
    from kubernetes import client

    core = client.CoreV1Api(rig.start_testbed(args.pool_file).api_client())
    for namespace in (BOXES, FOREIGN):
        rig.create_namespace(namespace)
    controllers: dict[str, Served] = {}
    try:
        for label, source in ((args.baseline, baseline_tree), ("this", REPO)):
            controllers[label] = Served(rig, True, source=source, identity=label)
        churn = Churn(core, args.foreign_pods, args.workers)
        log(f"creating {args.foreign_pods} foreign pods, then replacing them ...")
        started = time.monotonic()
        reads, pushes, cpu = churn_window(core, controllers, churn, args.churn_minutes)
        window = time.monotonic() - started
        print(
            f"\n{churn.created} foreign pods created, {churn.deleted} deleted "
            f"({churn.completed} of them first marked Succeeded), {len(churn.alive)} left; "
            f"a window of {window:.0f} s"
        )
        print(
            f"{'controller':<10} {'reads':>6} {'route p50 / p95 / p99':>26} "
            f"{'pushes':>7} {'push p50 / p95 / max':>28} {'CPU':>8}"
        )
        for label in controllers:
            ms, pushed = reads[label], sorted(pushes[label])
            print(
                f"{label:<10} {len(ms):>6} "
                f"{statistics.median(ms):>7.2f} / {percentile(ms, 95):>6.2f} / "
                f"{percentile(ms, 99):>6.2f} ms {len(pushed):>7} "
                f"{statistics.median(pushed):>8.1f} / {percentile(pushed, 95):>7.1f} / "
                f"{pushed[-1]:>7.1f} ms {cpu[label]:>6.1f} s"
            )
        for label, served in controllers.items():
            print(f"{label}: {recount_figures(served)}")
    finally:
        for served in controllers.values():
            served.stop()


def run(args: argparse.Namespace) -> None:
    with scratch_rig("devboxes-availability-bench-") as rig:
        log(f"starting a scale testbed ({args.pool_file.name}) in {rig.workdir} ...")
        bed = rig.start_testbed(args.pool_file)
        for namespace in (BOXES, FOREIGN):
            rig.create_namespace(namespace)
        creator = Served(rig, availability=True)
        try:
            log(f"creating {args.boxes} boxes ...")
            names = create_boxes(creator, args.boxes, args.workers)
            wait_boxes_ready(creator, names)
        finally:
            creator.stop()
        log("reading without foreign pods ...")
        before = both_controllers(rig, names, args.reads)
        log(f"creating {args.foreign_pods} foreign pods (at most {args.fill_minutes} min) ...")
        started = time.monotonic()
        running = fill_with_foreign_pods(bed, args.foreign_pods, args.workers, args.fill_minutes)
        log(f"  {running} foreign pods running after {(time.monotonic() - started) / 60:.1f} min")
        log("reading with foreign pods ...")
        after = both_controllers(rig, names, args.reads)
        print_report(args, running, before, after)
        if args.samples:
            log(f"timing {args.samples} takes and {args.samples} releases of an L4 ...")
            controller = Served(rig, availability=True)
            try:
                ms = sorted(1000 * s for s in time_changes(bed, controller, args.samples))
            finally:
                controller.stop()
            print(
                f"{'availability event after a change p50 / p95 / max':<52} "
                f"{statistics.median(ms):.1f} / {percentile(ms, 95):.1f} / {ms[-1]:.1f} ms "
                f"({len(ms)} changes)"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=1000)
    parser.add_argument("--foreign-pods", type=int, default=10000)
    parser.add_argument("--fill-minutes", type=float, default=30)
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--pool-file", type=Path, default=REPO / "testbed" / "nodes-scale-10k.yaml")
    parser.add_argument(
        "--churn",
        action="store_true",
        help="measure while pods are created and replaced, this checkout against --baseline",
    )
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--churn-minutes", type=float, default=3)
    return record.run(
        "availability_bench",
        parser,
        lambda args: run_churn(args) if args.churn else run(args),
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
