"""Benchmark GPU availability: how soon a taken or freed GPU shows, and what the watches cost.

Starts a scale testbed (testbed/nodes-scale.yaml: 12 CPU nodes, 20 L4 nodes with 8 GPUs
each) and two controllers on it, one with availability on and one with it off, then:

- fills the CPU nodes with ``--foreign-pods`` pods that are not boxes (one Deployment in
  a namespace of its own) and reports both controllers' resident memory; the difference
  is what the node and all-namespace pod watches add;
- ``--samples`` times: creates a pod taking one L4 and later deletes it, and measures
  from the moment this benchmark's own pod watch sees the pod bound (or gone) to the
  moment the availability event with the new count arrives on the dashboard's event
  stream. Both clocks are this process's monotonic clock.

    PYTHONPATH=testbed:controller .venv/bin/python bench/availability_bench.py
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests
import yaml
from devboxes_testbed import L4

REPO = Path(__file__).resolve().parent.parent
FOREIGN = "bench-foreign"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for pid {pid}")


class Controller:
    def __init__(self, bed: Any, workdir: Path, namespace: str, availability: bool) -> None:
        from devboxes_testbed.cluster import free_port, wait_healthy
        from kubernetes import client

        client.CoreV1Api(bed.api_client()).create_namespace({"metadata": {"name": namespace}})
        settings = yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
        settings["namespace"] = namespace
        settings["availability"] = {"enabled": availability}
        path = workdir / f"settings-{namespace}.yaml"
        path.write_text(yaml.safe_dump(settings))
        self.token = secrets.token_urlsafe(32)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = workdir / f"controller-{namespace}.log"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "devboxes_controller",
                    "serve",
                    "--settings",
                    str(path),
                    "--kubeconfig",
                    str(bed.kubeconfig),
                    "--listen",
                    self.url.removeprefix("http://"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "DEVBOXES_TOKEN": self.token},
                start_new_session=True,
            )
        failure = wait_healthy(self.process, f"{self.url}/ready", 120)
        if failure is not None:
            raise SystemExit(f"the controller {failure}; see {self.log}")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def available(self) -> int | None:
        body = requests.get(
            f"{self.url}/api/v1/gpu/availability", headers=self.headers(), timeout=30
        ).json()
        return next(p["available"] for p in body["profiles"] if p["name"] == L4)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            # A watch blocked in a read can hold up a graceful stop; the numbers are in.
            self.process.kill()
            self.process.wait()


class EventLog:
    """The availability events of the dashboard stream, as (arrival, available) pairs."""

    def __init__(self, controller: Controller) -> None:
        self.events: list[tuple[float, int | None]] = []
        self.condition = threading.Condition()
        self._response = requests.get(
            f"{controller.url}/dashboard/events",
            headers=controller.headers(),
            stream=True,
            timeout=(5, None),
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        kind = None
        for line in self._response.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "availability":
                body = json.loads(line.removeprefix("data: "))
                value = next(p["available"] for p in body["profiles"] if p["name"] == L4)
                with self.condition:
                    self.events.append((time.monotonic(), value))
                    self.condition.notify_all()

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
        self._response.close()


def gpu_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
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


def fill_with_foreign_pods(bed: Any, count: int) -> None:
    from kubernetes import client

    api = bed.api_client()
    client.AppsV1Api(api).create_namespaced_deployment(
        FOREIGN,
        {
            "metadata": {"name": "filler"},
            "spec": {
                "replicas": count,
                "selector": {"matchLabels": {"app": "filler"}},
                "template": {
                    "metadata": {"labels": {"app": "filler"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "work",
                                "image": "busybox",
                                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                            }
                        ]
                    },
                },
            },
        },
    )
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(FOREIGN, label_selector="app=filler").items
        running = sum(1 for p in pods if p.status.phase == "Running")
        if running >= count:
            return
        log(f"  {running}/{count} foreign pods running")
        time.sleep(10)
    raise SystemExit("the foreign pods never all ran")


def time_changes(bed: Any, controller: Controller, samples: int) -> list[float]:
    """Seconds from a pod's binding (or deletion) seen by our watch to the event's arrival."""
    from kubernetes import client, watch

    core = client.CoreV1Api(bed.api_client())
    stream = EventLog(controller)
    bound: dict[str, float] = {}
    gone: dict[str, float] = {}
    stop = threading.Event()

    def observe() -> None:
        watcher = watch.Watch()
        for event in watcher.stream(core.list_namespaced_pod, FOREIGN, label_selector="sample"):
            pod = event["object"]
            if event["type"] == "DELETED":
                gone.setdefault(pod.metadata.name, time.monotonic())
            elif pod.spec.node_name:
                bound.setdefault(pod.metadata.name, time.monotonic())
            if stop.is_set():
                return

    threading.Thread(target=observe, daemon=True).start()
    time.sleep(1)
    latencies = []
    base = controller.available()
    assert base is not None
    for index in range(samples):
        name = f"sample-{index}"
        body = gpu_pod(name)
        body["metadata"]["labels"] = {"sample": "yes"}
        mark = len(stream.events)
        core.create_namespaced_pod(FOREIGN, body)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--foreign-pods", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args(argv)
    from devboxes_testbed.cluster import Testbed
    from kubernetes import client

    workdir = Path(tempfile.mkdtemp(prefix="devboxes-availability-bench-"))
    log(f"starting a scale testbed in {workdir} ...")
    bed = Testbed(state_dir=workdir / "testbed", pool_file=REPO / "testbed" / "nodes-scale.yaml")
    bed.start()
    controllers: list[Controller] = []
    succeeded = False
    try:
        client.CoreV1Api(bed.api_client()).create_namespace({"metadata": {"name": FOREIGN}})
        on = Controller(bed, workdir, "bench-on", availability=True)
        off = Controller(bed, workdir, "bench-off", availability=False)
        controllers += [on, off]
        time.sleep(5)
        idle = (rss_mib(on.process.pid), rss_mib(off.process.pid))
        log(f"filling the CPU nodes with {args.foreign_pods} foreign pods ...")
        fill_with_foreign_pods(bed, args.foreign_pods)
        time.sleep(10)
        full = (rss_mib(on.process.pid), rss_mib(off.process.pid))
        log(f"timing {args.samples} takes and {args.samples} releases of an L4 ...")
        latencies = sorted(time_changes(bed, on, args.samples))
        ms = [1000 * s for s in latencies]
        print("\nfigure                                      value")
        print(f"controllers' RSS, no foreign pods, on/off   {idle[0]:.0f} / {idle[1]:.0f} MiB")
        print(
            f"controllers' RSS, {args.foreign_pods} foreign pods, on/off "
            f"{full[0]:.0f} / {full[1]:.0f} MiB (added by the watches: {full[0] - full[1]:.0f} MiB)"
        )
        print(
            f"availability latency p50 / p95 / max      {statistics.median(ms):.1f} / "
            f"{ms[int(0.95 * (len(ms) - 1))]:.1f} / {ms[-1]:.1f} ms ({len(ms)} changes)"
        )
        succeeded = True
    finally:
        try:
            for controller in controllers:
                controller.stop()
        finally:
            bed.stop()
        if succeeded:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
