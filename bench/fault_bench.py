"""How the controller rides out control-plane failures, in counts and percentiles.

Starts a testbed of its own and this repository's controller on it, then:

- freezes the kube-apiserver (SIGSTOP) and sends concurrent creates: how soon each is
  answered 503, and how reads and /health answer meanwhile;
- kills the leading replica of two (SIGKILL, no Lease hand-back): how soon the other
  holds the Lease;
- restarts the kube-apiserver and etcd: how soon /ready is 200 again after the
  component is back.

    PYTHONPATH=testbed .venv/bin/python bench/fault_bench.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import record
import requests
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.rig import Rig
from kubernetes import client
from scratch import scratch_rig


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    return f"p50 {at(0.5) * 1000:.0f} / p95 {at(0.95) * 1000:.0f} / max {ordered[-1] * 1000:.0f} ms"


def timed(call: Callable[[], requests.Response]) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def frozen_apiserver(bed: Testbed, controller: Controller, creates: int) -> list[str]:
    headers = controller.headers()
    base = f"{controller.url}/api/v1"
    requests.post(f"{base}/devboxes", json={"name": "reader"}, headers=headers, timeout=30)
    reads: dict[str, list[float]] = {"/health": [], "list": [], "get": []}
    failed: Counter[str] = Counter()
    stop = threading.Event()

    def read_loop() -> None:
        calls = {
            "/health": lambda: requests.get(f"{controller.url}/health", timeout=30),
            "list": lambda: requests.get(f"{base}/devboxes", headers=headers, timeout=30),
            "get": lambda: requests.get(f"{base}/devboxes/reader", headers=headers, timeout=30),
        }
        while not stop.is_set():
            for name, call in calls.items():
                response, seconds = timed(call)
                if response.status_code == 200:
                    reads[name].append(seconds)
                else:
                    failed[name] += 1

    bed.freeze("kube-apiserver")
    try:
        reader = threading.Thread(target=read_loop)
        reader.start()
        with ThreadPoolExecutor(creates) as pool:
            answers = list(
                pool.map(
                    lambda i: timed(
                        lambda: requests.post(
                            f"{base}/devboxes",
                            json={"name": f"frozen-{i}"},
                            headers=headers,
                            timeout=60,
                        )
                    ),
                    range(creates),
                )
            )
        stop.set()
        reader.join()
    finally:
        bed.thaw("kube-apiserver")
    statuses = Counter(response.status_code for response, _ in answers)
    retry_after = sum(1 for response, _ in answers if "Retry-After" in response.headers)
    rows = [
        f"frozen apiserver, {creates} concurrent creates: statuses {dict(sorted(statuses.items()))}"
        f", {retry_after} with Retry-After, answered in {percentiles([s for _, s in answers])}"
    ]
    for name, samples in reads.items():
        rows.append(
            f"  {name} during the freeze: {len(samples)} answered 200, {failed[name]} not, "
            f"{percentiles(samples)}"
        )
    return rows


def lease_holder(kube: Any, namespace: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(kube).read_namespaced_lease(
            "devboxes-controller", namespace, _request_timeout=2
        )
    except Exception:  # noqa: BLE001 - not there yet, or the apiserver is busy
        return None
    holder: str | None = lease.spec.holder_identity
    return holder


def failover(rig: Rig, namespace: str, rounds: int) -> list[str]:
    """Replicas of one namespace, the leader killed each round; the rig stops the rest."""
    kube = rig.testbed.api_client()
    settings = example_settings(namespace)
    replicas = [rig.start_controller(settings) for _ in range(2)]
    takeovers: list[float] = []
    for _ in range(rounds):
        by_identity = {r.identity: r for r in replicas}
        deadline = time.monotonic() + 60
        while lease_holder(kube, namespace) not in by_identity:
            if time.monotonic() > deadline:
                raise SystemExit("no replica took the Lease")
            time.sleep(0.05)
        leader = by_identity[str(lease_holder(kube, namespace))]
        survivor = next(r for r in replicas if r is not leader)
        killed = time.monotonic()
        leader.stop(kill=True)
        while lease_holder(kube, namespace) != survivor.identity:
            time.sleep(0.05)
        takeovers.append(time.monotonic() - killed)
        replicas = [survivor, rig.start_controller(settings)]
    return [
        f"leader killed (lease 3 s): survivor holds the Lease after "
        f"{percentiles(takeovers)} ({len(takeovers)} rounds, "
        f"mean {statistics.mean(takeovers):.2f} s)"
    ]


def restarts(bed: Testbed, controller: Controller, component: str, rounds: int) -> str:
    recovered: list[float] = []
    for _ in range(rounds):
        bed.component(component).stop()
        deadline = time.monotonic() + 60
        while requests.get(f"{controller.url}/ready", timeout=10).status_code == 200:
            if time.monotonic() > deadline:
                raise SystemExit(f"/ready stayed 200 with {component} down")
            time.sleep(0.1)
        bed.restart(component)
        back = time.monotonic()
        while requests.get(f"{controller.url}/ready", timeout=10).status_code != 200:
            if time.monotonic() - back > 180:
                raise SystemExit(f"/ready never returned after {component} restarted")
            time.sleep(0.05)
        recovered.append(time.monotonic() - back)
    return (
        f"{component} restarted: /ready 200 again {percentiles(recovered)} after it was "
        f"healthy ({rounds} rounds)"
    )


def run(args: argparse.Namespace) -> None:
    rows: list[str] = []
    with scratch_rig("devboxes-faults-") as rig:
        bed = rig.start_testbed(log=lambda _: None)
        for namespace in ("faults", "failover"):
            rig.create_namespace(namespace)
        controller = rig.start_controller(example_settings("faults"))
        rows += frozen_apiserver(bed, controller, args.creates)
        while requests.get(f"{controller.url}/ready", timeout=10).status_code != 200:
            time.sleep(0.1)
        rows.append(restarts(bed, controller, "kube-apiserver", args.rounds))
        rows.append(restarts(bed, controller, "etcd", args.rounds))
        controller.stop()
        rows += failover(rig, "failover", args.rounds)
    print("\n".join(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    return record.run("fault_bench", parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
