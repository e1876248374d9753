"""What the usage record costs: a month's report over 10,000 boxes' history, the memory the
record takes, and the apiserver writes of the recording.

Starts a testbed (testbed/nodes.yaml, whose simulated nodes have GPUs) and a controller
on it with ``usage.recordSeconds`` of ``--record-seconds``, reads its resident memory,
then writes ``--days`` days of usage rows (the days before today) for ``--boxes`` boxes of
``--people`` people and ``--profiles`` profiles into the box namespace's day ConfigMaps,
each box active on ``--days-per-box`` of them, as the leader writes them
(tests/usage_rows.py). Once the controller's watch has the whole record it times
``GET /api/v1/usage?since=<the first day>&all=true`` ``--samples`` times for each
grouping (person, profile, box), reads the memory again, and starts a second controller
beside the record to read what a fresh one takes with it.

Then it creates ``--running`` GPU boxes, waits until a pass has recorded them, and counts
for ``--passes`` passes every write of a usage ConfigMap (a watch of them: every new
resourceVersion) and the controller's own ``devboxes_kubernetes_writes_total``. A pass
writes one ConfigMap per shard that holds a running box's row (at most 8; twice that on
the pass across a UTC midnight), so the writes per hour are those per pass times
3600 / recordSeconds.

    PYTHONPATH=testbed:tests nice -n 5 .venv/bin/python bench/usage_bench.py --results
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import record
from api_bench import percentile
from devboxes_controller.placement import usage_ledger as ledger
from devboxes_testbed.api import Api
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client, watch
from scratch import scratch_rig
from usage_rows import row, seed

NAMESPACE = "devboxes-usage-bench"
GROUPINGS = ("person", "profile", "box")
GPU_PROFILES = ("nvidia-a100-mig-1g10gb", "nvidia-l4-shared", "nvidia-l4")
SETTLE_SECONDS = 10.0
LOAD_TIMEOUT = 300.0
READY_TIMEOUT = 300.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rss_mib(controller: Controller) -> float:
    return controller.rss_kib() / 1024


def settled_rss(controller: Controller) -> float:
    time.sleep(SETTLE_SECONDS)
    return rss_mib(controller)


def history(args: argparse.Namespace, today: date) -> list[tuple[date, str, ledger.Row]]:
    """Every box's rows: ``--days-per-box`` distinct days of the ``--days`` before today,
    of known seconds."""
    chance = random.Random(17)
    days = [today - timedelta(days=n) for n in range(1, args.days + 1)]
    rows = []
    for index in range(args.boxes):
        person = index % args.people
        profile = f"gpu-{chance.randrange(args.profiles):02d}"
        for day in chance.sample(days, args.days_per_box):
            busy, idle, unknown = (chance.randrange(0, 4 * 3600) for _ in range(3))
            rows.append(
                row(
                    f"box-{index:05d}",
                    f"person-{person:03d}",
                    profile,
                    day,
                    groups=(f"team-{person % 10}",),
                    busy=busy,
                    idle=idle,
                    unknown=unknown,
                    waiting=chance.randrange(0, 600),
                )
            )
    return rows


def report(api: Api, since: date, group_by: str) -> tuple[float, dict[str, Any], int]:
    """Seconds to the whole answer, the answer, and its size in bytes as sent."""
    started = time.perf_counter()
    response = api.ok(
        "GET", "/usage", params={"since": since.isoformat(), "all": "true", "group_by": group_by}
    )
    body = response.json()
    seconds = time.perf_counter() - started
    sent = int(response.headers.get("content-length") or len(response.content))
    return seconds, body, sent


def wait_loaded(api: Api, since: date, boxes: int, allocated: int) -> float:
    started = time.monotonic()
    while time.monotonic() - started < LOAD_TIMEOUT:
        _, body, _ = report(api, since, "profile")
        total = body["total"]
        if total["boxes"] == boxes and total["allocated_seconds"] == allocated:
            return time.monotonic() - started
        time.sleep(1)
    raise SystemExit(f"the controller's report has not the whole record after {LOAD_TIMEOUT} s")


def quantiles(samples: list[float]) -> str:
    return (
        f"p50 {statistics.median(samples):.3f} s, p95 {percentile(samples, 95):.3f} s, "
        f"p99 {percentile(samples, 99):.3f} s, max {max(samples):.3f} s (n={len(samples)})"
    )


def controller_writes(api: Api) -> Counter[str]:
    text = api.session.get(f"{api.url}/metrics", timeout=30).text
    found: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("devboxes_kubernetes_writes_total{"):
            verb = line.split('verb="', 1)[1].split('"', 1)[0]
            found[verb] = int(float(line.rsplit(" ", 1)[1]))
    return found


class UsageWrites:
    """Every change of the usage ConfigMaps from a resourceVersion on, from a watch."""

    def __init__(self, core: Any, namespace: str, resource_version: str) -> None:
        self.events: list[tuple[float, str, str, dict[str, ledger.Row]]] = []
        self._stop = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(
            target=self._run, args=(core, namespace, resource_version), daemon=True
        )
        self._thread.start()

    def _run(self, core: Any, namespace: str, resource_version: str) -> None:
        try:
            self._follow(core, namespace, resource_version)
        except Exception:
            # Ended by stop(), or by the testbed going away after it.
            if not self._stop.is_set():
                raise

    def _follow(self, core: Any, namespace: str, resource_version: str) -> None:
        for event in self._watch.stream(
            core.list_namespaced_config_map,
            namespace,
            label_selector=ledger.SELECTOR,
            resource_version=resource_version,
            timeout_seconds=3600,
        ):
            configmap = event["object"]
            self.events.append(
                (
                    time.monotonic(),
                    event["type"],
                    configmap.metadata.name,
                    ledger.rows_of({"data": configmap.data or {}}),
                )
            )
            if self._stop.is_set():
                return

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()


def wait_ready(api: Api, names: set[str]) -> float:
    started = time.monotonic()
    while time.monotonic() - started < READY_TIMEOUT:
        items = api.ok("GET", "/devboxes").json()["items"]
        if {box["name"] for box in items if box["state"] == "ready"} >= names:
            return time.monotonic() - started
        time.sleep(2)
    raise SystemExit(f"the GPU boxes were not ready after {READY_TIMEOUT} s")


def recorded_keys(core: Any, namespace: str, today: date, boxes: set[str]) -> dict[str, str]:
    """The running boxes' keys in today's record, by ConfigMap."""
    found: dict[str, str] = {}
    for configmap in core.list_namespaced_config_map(
        namespace, label_selector=ledger.SELECTOR
    ).items:
        if ledger.day_of_configmap(configmap.metadata.name) != today:
            continue
        for key, kept in ledger.rows_of({"data": configmap.data or {}}).items():
            if kept.box in boxes:
                found[key] = configmap.metadata.name
    return found


def measure_writes(
    args: argparse.Namespace, api: Api, core: Any, today: Callable[[], date]
) -> None:
    names = [f"gpu-{index:02d}" for index in range(args.running)]
    log(f"creating {args.running} GPU boxes ...")
    for index, name in enumerate(names):
        profile = GPU_PROFILES[index % len(GPU_PROFILES)]
        api.ok("POST", "/devboxes", json={"name": name, "gpu": {"profile": profile}})
    log(f"  ready after {wait_ready(api, set(names)):.1f} s")
    started = time.monotonic()
    while len(keys := recorded_keys(core, NAMESPACE, today(), set(names))) < len(names):
        if time.monotonic() - started > 10 * args.record_seconds + 60:
            raise SystemExit("the running boxes were not recorded")
        time.sleep(1)
    shards = sorted(set(keys.values()))
    print(
        f"\n{args.running} running GPU boxes ({', '.join(GPU_PROFILES)} in turn); their "
        f"keys fall in {len(shards)} of today's {ledger.SHARDS} shards: {', '.join(shards)}"
    )
    listed = core.list_namespaced_config_map(NAMESPACE, label_selector=ledger.SELECTOR)
    before = controller_writes(api)
    writes = UsageWrites(core, NAMESPACE, listed.metadata.resource_version)
    window = args.passes * args.record_seconds
    log(f"counting usage writes for {window} s ({args.passes} passes) ...")
    began = time.monotonic()
    time.sleep(window)
    seconds = time.monotonic() - began
    after = controller_writes(api)
    writes.stop()
    events = [e for e in writes.events if e[0] - began <= seconds]
    passes = {
        kept.until
        for _, _, _, rows in events
        for key, kept in rows.items()
        if key in keys and kept.held is not None
    }
    by_type = Counter(kind for _, kind, _, _ in events)
    by_day = Counter(str(ledger.day_of_configmap(name)) for _, _, name, _ in events)
    verbs = {verb: after[verb] - before.get(verb, 0) for verb in after}
    verbs = {verb: count for verb, count in verbs.items() if count}
    print(
        f"window {seconds:.0f} s: {len(events)} writes of usage ConfigMaps "
        f"({', '.join(f'{n} {kind}' for kind, n in sorted(by_type.items()))}), by day "
        f"{dict(sorted(by_day.items()))}"
    )
    print(f"passes seen in the window (distinct cursors of the running boxes): {len(passes)}")
    print(f"the controller's devboxes_kubernetes_writes_total in the window: {verbs}")
    if not passes:
        raise SystemExit("no pass recorded the running boxes in the window")
    per_pass = len(events) / len(passes)
    print(
        f"writes per pass: {len(events)} / {len(passes)} = {per_pass:.2f} "
        f"(shards touched: {len(shards)}; at most {ledger.SHARDS})"
    )
    for every in (args.record_seconds, 60):
        print(
            f"writes per hour at recordSeconds {every}: {per_pass:.2f} x 3600 / {every} "
            f"= {per_pass * 3600 / every:.0f} (at most {ledger.SHARDS * 3600 // every})"
        )


def measure(args: argparse.Namespace) -> None:
    with scratch_rig("devboxes-usage-") as rig:
        log("starting a testbed ...")
        rig.start_testbed(log=lambda message: None)
        rig.create_namespace(NAMESPACE)
        settings = {
            **example_settings(NAMESPACE),
            "usage": {"recordSeconds": args.record_seconds},
        }
        controller = rig.start_controller(settings, identity="bench")
        api = Api(controller.url, controller.token)
        today = datetime.now(UTC).date()
        first = today - timedelta(days=args.days)
        # Each report once on no record, so that what the first one loads is not counted
        # as the record's.
        for group_by in GROUPINGS:
            report(api, first, group_by)
        empty = settled_rss(controller)
        log(f"controller RSS with no record: {empty:.1f} MiB")

        rows = history(args, today)
        sizes = [len(kept.to_json()) for _, _, kept in rows]
        allocated = sum(kept.allocated for _, _, kept in rows)
        kube = rig.testbed.api_client()
        log(f"writing {len(rows)} rows ...")
        began = time.monotonic()
        names = seed(kube, NAMESPACE, rows)
        written = time.monotonic() - began
        core = client.CoreV1Api(kube)
        stored = [
            sum(len(k) + len(v) for k, v in (c.data or {}).items())
            for c in core.list_namespaced_config_map(
                NAMESPACE, label_selector=ledger.SELECTOR
            ).items
        ]
        print(
            f"record: {args.boxes} boxes of {args.people} people and {args.profiles} "
            f"profiles, each on {args.days_per_box} of the {args.days} days "
            f"{first} to {today - timedelta(days=1)}: {len(rows)} rows (box-days), "
            f"row p50 {statistics.median(sizes)} bytes, in {len(names)} ConfigMaps of "
            f"{min(stored) / 1024:.1f} to {max(stored) / 1024:.1f} KiB "
            f"({sum(stored) / 1024**2:.1f} MiB in all), written in {written:.1f} s"
        )
        loaded = wait_loaded(api, first, args.boxes, allocated)
        print(f"the controller's report had the whole record {loaded:.1f} s after the writes")
        watched = settled_rss(controller)

        print(f"\nGET /api/v1/usage?since={first}&all=true&group_by=..., {args.samples} each:")
        for group_by in GROUPINGS:
            cold, body, sent = report(api, first, group_by)
            samples = [report(api, first, group_by)[0] for _ in range(args.samples)]
            print(
                f"  {group_by}: {quantiles(samples)}; {len(body['lines'])} lines, "
                f"{len(body['days'])} day rows, {sent / 1024:.0f} KiB as sent; "
                f"the first {cold:.3f} s"
            )
        reported = settled_rss(controller)

        log("starting a second controller beside the record ...")
        fresh = rig.start_controller(settings, identity="fresh")
        fresh_api = Api(fresh.url, fresh.token)
        fresh_ready = settled_rss(fresh)
        fresh_first, _, _ = report(fresh_api, first, "person")
        fresh_reported = settled_rss(fresh)
        fresh.stop()

        per_row = (reported - empty) * 1024 / len(rows)
        print("\ncontroller RSS:")
        print(f"  running, no record: {empty:.1f} MiB")
        print(f"  the record in its watch: {watched:.1f} MiB (+{watched - empty:.1f})")
        print(
            f"  after the reports (every ConfigMap's rows parsed and kept): {reported:.1f} MiB "
            f"(+{reported - empty:.1f}); per box-day: ({reported:.1f} - {empty:.1f}) MiB x 1024 "
            f"/ {len(rows)} = {per_row:.2f} KiB"
        )
        print(
            f"  a second controller started beside the record: {fresh_ready:.1f} MiB at "
            f"ready, {fresh_reported:.1f} MiB after its first report ({fresh_first:.3f} s)"
        )

        measure_writes(args, api, core, lambda: datetime.now(UTC).date())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=10_000)
    parser.add_argument("--people", type=int, default=100)
    parser.add_argument("--profiles", type=int, default=20)
    parser.add_argument("--days", type=int, default=30, help="days of history before today")
    parser.add_argument("--days-per-box", type=int, default=3)
    parser.add_argument("--samples", type=int, default=30, help="reports timed per grouping")
    parser.add_argument("--running", type=int, default=8, help="GPU boxes running")
    parser.add_argument("--record-seconds", type=int, default=10, help="usage.recordSeconds")
    parser.add_argument("--passes", type=int, default=12, help="passes to count writes over")

    def check(args: argparse.Namespace) -> str | None:
        if not 0 < args.days_per_box <= args.days:
            return "--days-per-box must be between 1 and --days"
        if not 10 <= args.record_seconds <= 600:
            return "--record-seconds must be between 10 and 600"
        return None

    return record.run("usage_bench", parser, measure, check=check)


if __name__ == "__main__":
    sys.exit(main())
