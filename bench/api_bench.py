"""Benchmark a Devboxes-compatible controller: read latency, apiserver load, ready notification.

Point it at any controller with ``--url``/``--token`` (or DEVBOX_URL/DEVBOX_TOKEN), or let
it start a scale testbed and the controller itself with ``--start-testbed``. With
``--kubeconfig`` it also reads the apiserver's ``apiserver_request_total`` to count the
Kubernetes requests the API causes, and watches pods to time the ready notification.

    PYTHONPATH=testbed .venv/bin/python bench/api_bench.py --start-testbed --boxes 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import record
import requests
from devboxes_testbed.api import Api
from devboxes_testbed.controller import example_settings
from scratch import scratch_rig

REPO = Path(__file__).resolve().parent.parent
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
READ_VERBS = frozenset({"GET", "LIST"})
BOX_RESOURCES = frozenset(
    {"deployments", "replicasets", "pods", "services", "persistentvolumeclaims", "events"}
)
# The objects a create itself writes; everything else is other controllers reacting.
CREATE_RESOURCES = ("deployments", "persistentvolumeclaims", "services")

RequestKey = tuple[str, str, str]  # verb, resource, subresource


@dataclass
class Report:
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, metric: str, value: str, target: str = "") -> None:
        self.rows.append((metric, value, target))

    def print(self) -> None:
        width = max(len(r[0]) for r in self.rows)
        vwidth = max(len(r[1]) for r in self.rows)
        print(f"\n{'metric':<{width}}  {'value':>{vwidth}}  target")
        for metric, value, target in self.rows:
            print(f"{metric:<{width}}  {value:>{vwidth}}  {target}")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


class Apiserver:
    """The apiserver's own request counters, read from its /metrics with a kubeconfig."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(kubeconfig, client_configuration=configuration)
        self.client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.client)

    def requests(self) -> Counter[RequestKey]:
        from prometheus_client.parser import text_string_to_metric_families

        request = self.client.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
        text = self.client.call_api(*request).read().decode()
        counts: Counter[RequestKey] = Counter()
        for family in text_string_to_metric_families(text):
            if family.name != "apiserver_request":
                continue
            for sample in family.samples:
                if not sample.name.endswith("_total"):
                    continue
                labels = sample.labels
                key = (
                    labels.get("verb", ""),
                    labels.get("resource", ""),
                    labels.get("subresource", ""),
                )
                counts[key] += int(sample.value)
        return counts

    @contextmanager
    def delta(self) -> Iterator[Counter[RequestKey]]:
        before = self.requests()
        result: Counter[RequestKey] = Counter()
        yield result
        after = self.requests()
        result.update(
            {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
        )


def reads_to_box_resources(counts: Counter[RequestKey]) -> int:
    return sum(
        v
        for (verb, resource, _), v in counts.items()
        if verb in READ_VERBS and resource in BOX_RESOURCES
    )


def create_box(api: Api, name: str, attempts: int = 20) -> None:
    """Create a box, riding out the 503s of an apiserver slowed by the machine's load and
    keep-alive connections the server closed while this client waited: a create that
    timed out may still have been applied, so a 409 after it is success."""
    for _ in range(attempts):
        try:
            response = api.request("POST", "/devboxes", json={"name": name})
        except requests.ConnectionError:
            continue
        if response.status_code in (201, 409):
            return
        if response.status_code != 503:
            raise SystemExit(f"create {name}: {response.status_code} {response.text}")
        time.sleep(float(response.headers.get("Retry-After", "5")))
    raise SystemExit(f"create {name}: still 503 after {attempts} attempts")


def create_boxes(api: Api, names: list[str], workers: int) -> list[float]:
    """Create the boxes; the milliseconds each took, retries after a 503 included."""

    def create(name: str) -> float:
        started = time.perf_counter()
        create_box(api, name)
        return (time.perf_counter() - started) * 1000

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(create, names))


def wait_all_ready(api: Api, names: set[str], timeout: float) -> float | None:
    """Seconds until every named box is ready, or None at the timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        items = api.ok("GET", "/devboxes").json()["items"]
        if sum(1 for box in items if box["name"] in names and box["state"] == "ready") == len(
            names
        ):
            return time.monotonic() - started
        time.sleep(2)
    return None


def ready_notification(api: Api, apiserver: Apiserver, namespace: str, samples: int) -> list[float]:
    """Milliseconds from the pod turning Ready (as a watch sees it) to a waiter's answer."""
    from kubernetes import watch

    latencies = []
    for _ in range(samples):
        name = f"bench-ready-{uuid.uuid4().hex[:6]}"
        seen: dict[str, float] = {}
        stop = threading.Event()

        def watch_pods(
            prefix: str = f"devbox-{name}-",
            found: dict[str, float] = seen,
            done: threading.Event = stop,
        ) -> None:
            watcher = watch.Watch()
            for event in watcher.stream(
                apiserver.core.list_namespaced_pod, namespace, timeout_seconds=120
            ):
                pod = event["object"]
                conditions = pod.status.conditions or []
                if pod.metadata.name.startswith(prefix) and any(
                    c.type == "Ready" and c.status == "True" for c in conditions
                ):
                    found["ready"] = time.monotonic()
                    watcher.stop()
                if done.is_set():
                    watcher.stop()

        watcher_thread = threading.Thread(target=watch_pods, daemon=True)
        watcher_thread.start()
        time.sleep(0.5)  # the watch must be open before the pod can turn Ready
        create_box(api, name)
        box = api.ok(
            "GET", f"/devboxes/{name}", timeout=330, params={"wait": "ready", "timeout": 120}
        ).json()
        answered = time.monotonic()
        watcher_thread.join(10)
        stop.set()
        if box["state"] == "ready" and "ready" in seen:
            latencies.append((answered - seen["ready"]) * 1000)
        # A purge refused by a slow apiserver leaves one box behind, not a wrong figure.
        api.request("DELETE", f"/devboxes/{name}", params={"purge": "true"})
    return latencies


def deployment_events(apiserver: Apiserver, namespace: str, names: list[str]) -> Counter[str]:
    """Events about the boxes' Deployments by the component that recorded them."""
    deployments = {f"devbox-{name}" for name in names}
    counts: Counter[str] = Counter()
    for event in apiserver.core.list_namespaced_event(namespace).items:
        involved = event.involved_object
        if involved.kind == "Deployment" and involved.name in deployments:
            source = event.source.component if event.source else None
            counts[source or event.reporting_component or "unknown"] += 1
    return counts


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for pid {pid}")


def controller_writes(api: Api) -> float | None:
    """Sum of the controller's own write counter, if it exposes one at /metrics."""
    response = api.session.get(f"{api.url}/metrics", timeout=30)
    if response.status_code != 200:
        return None
    total = None
    for line in response.text.splitlines():
        if line.startswith("devboxes_kubernetes_writes_total{"):
            total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


def measure(
    args: argparse.Namespace,
    api: Api,
    apiserver: Apiserver | None,
    pid: int | None,
    log: Callable[[str], None],
) -> Report:
    report = Report()
    names = [f"bench-{i:04d}-{uuid.uuid4().hex[:4]}" for i in range(args.boxes)]
    log(f"creating {args.boxes} boxes with {args.workers} concurrent clients ...")
    started = time.monotonic()
    if apiserver is not None:
        with apiserver.delta() as created:
            create_ms = create_boxes(api, names, args.workers)
            # The Events a create records are sent after its response; let them land.
            time.sleep(2)
    else:
        create_ms = create_boxes(api, names, args.workers)
    log(f"  done in {time.monotonic() - started:.0f}s")
    report.add("boxes", str(args.boxes))
    report.add(
        "create p50 / p95 (ms)",
        f"{percentile(create_ms, 50):.1f} / {percentile(create_ms, 95):.1f}",
    )

    # Time reads at steady state, not while the cluster is still placing the new pods.
    settled = wait_all_ready(api, set(names), args.settle_timeout)
    report.add(
        "all boxes ready after creating them (s)",
        f"{settled:.0f}" if settled is not None else f"not within {args.settle_timeout}",
    )
    log("timing reads ...")
    list_ms = [api.timed("/devboxes") for _ in range(args.reads)]
    get_ms = [api.timed(f"/devboxes/{names[i % len(names)]}") for i in range(args.reads)]
    report.add(
        "list p50 / p95 / p99 (ms)",
        " / ".join(f"{percentile(list_ms, q):.1f}" for q in (50, 95, 99)),
        "p50 ≤ 20",
    )
    report.add(
        "get p50 / p95 / p99 (ms)",
        " / ".join(f"{percentile(get_ms, q):.2f}" for q in (50, 95, 99)),
        "p50 ≤ 3",
    )
    report.add(
        "list response size (KiB)",
        f"{len(api.ok('GET', '/devboxes').content) / 1024:.0f}",
    )

    if apiserver is not None:
        with apiserver.delta() as during_reads:
            for i in range(args.reads // 2):
                api.ok("GET", "/devboxes")
                api.ok("GET", f"/devboxes/{names[i % len(names)]}")
        report.add(
            "apiserver GET/LIST of box objects per API read",
            f"{reads_to_box_resources(during_reads) / args.reads:.3f}",
            "0",
        )
        report.add(
            "apiserver requests of any kind per API read (all clients)",
            f"{sum(during_reads.values()) / args.reads:.3f}",
        )
        writes = {k: v for k, v in created.items() if k[0] in WRITE_VERBS}
        own = sum(
            v
            for (verb, resource, sub), v in writes.items()
            if verb == "POST" and resource in CREATE_RESOURCES and not sub
        )
        report.add(
            "apiserver object creates per box (deployment, claim, service)",
            f"{own / args.boxes:.2f}",
            "≤ 3",
        )
        events = sum(
            v
            for (verb, resource, _), v in writes.items()
            if verb == "POST" and resource == "events"
        )
        report.add("apiserver event POSTs per box (all components)", f"{events / args.boxes:.2f}")
        for (verb, resource, sub), value in sorted(writes.items()):
            if resource in CREATE_RESOURCES or resource == "events":
                label = f"{resource}/{sub}" if sub else resource
                report.add(f"  apiserver {verb} {label} per box", f"{value / args.boxes:.2f}")
        by_component = deployment_events(apiserver, args.namespace, names)
        for component, count in sorted(by_component.items()):
            report.add(
                f"  Events on box Deployments from {component} per box", f"{count / args.boxes:.2f}"
            )
        own_counter = controller_writes(api)
        if own_counter is not None:
            report.add(
                "controller's own write counter (all writes since start)", f"{own_counter:.0f}"
            )
        latencies = ready_notification(api, apiserver, args.namespace, args.ready_samples)
        if latencies:
            report.add(
                f"ready notification p50 / max (ms, {len(latencies)} boxes)",
                f"{statistics.median(latencies):.0f} / {max(latencies):.0f}",
                "≤ 100",
            )
    if pid is not None:
        report.add("controller RSS (MiB)", f"{rss_mib(pid):.0f}")

    if args.cleanup:
        log("deleting the benchmark boxes ...")
        with ThreadPoolExecutor(args.workers) as pool:
            list(
                pool.map(
                    lambda name: api.ok("DELETE", f"/devboxes/{name}", params={"purge": "true"}),
                    names,
                )
            )
    return report


def run(args: argparse.Namespace) -> None:
    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def measure_and_print() -> None:
        apiserver = Apiserver(args.kubeconfig) if args.kubeconfig else None
        report = measure(args, Api(args.url, args.token), apiserver, args.controller_pid, log)
        report.print()

    if not args.start_testbed:
        measure_and_print()
        return
    with scratch_rig("devboxes-bench-") as rig:
        log(f"starting a scale testbed in {rig.workdir} ...")
        bed = rig.start_testbed(REPO / "testbed" / "nodes-scale.yaml")
        rig.create_namespace(args.namespace)
        controller = rig.start_controller(example_settings(args.namespace), lease_seconds=None)
        args.url, args.token = controller.url, controller.token
        args.kubeconfig = str(bed.kubeconfig)
        args.controller_pid = controller.pid
        measure_and_print()
        controller.stop(grace=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("DEVBOX_URL"))
    parser.add_argument(
        "--token",
        default=os.environ.get("DEVBOX_TOKEN"),
        help="the bearer token (default: $DEVBOX_TOKEN)",
    )
    parser.add_argument("--kubeconfig", help="admin kubeconfig to read apiserver metrics")
    parser.add_argument(
        "--namespace",
        default="devboxes-bench",
        help="the controller's namespace, for the ready-notification watch",
    )
    parser.add_argument("--controller-pid", type=int, help="report this process's RSS")
    parser.add_argument("--boxes", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--ready-samples", type=int, default=10)
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=900,
        help="seconds to wait for every box to be ready before timing reads",
    )
    parser.add_argument("--no-cleanup", dest="cleanup", action="store_false")
    parser.add_argument(
        "--start-testbed",
        action="store_true",
        help="start a scale testbed and a controller in a temporary directory",
    )
    return record.run("api_bench", parser, run, argv, check=_check)


def _check(args: argparse.Namespace) -> str | None:
    if not args.start_testbed and (not args.url or not args.token):
        return "give --url and --token (or DEVBOX_URL/DEVBOX_TOKEN), or --start-testbed"
    return None


if __name__ == "__main__":
    sys.exit(main())
