"""Filtered and paged box lists at scale, beside the whole list.

It starts a testbed (testbed/nodes.yaml) and this checkout's controller, creates
``--running`` boxes through the API and waits until they are ready, then writes the
rest of ``--boxes`` straight to the apiserver as stopped boxes (their Deployments at zero
replicas, with their claims, rendered as the controller renders them; one in
ten of the nvidia-l4 profile):
thousands of boxes in minutes, with no pod to schedule. Then, with one client sending
``--samples`` sequential keep-alive requests per case, it measures:

- the whole list (no parameters), which the controller keeps made;
- ``state=ready`` (the running boxes) and ``profile=nvidia-l4``, answered from indexes;
- a 500-box page, the first and one from the middle of the list;
- a walk through every page of 500.

    PYTHONPATH=testbed .venv/bin/python bench/list_bench.py --results

Every request asks for gzip as clients do; latencies run until the last byte arrives and
do not include inflating it, except in the walk, which must read each page's token.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import record
import requests
from api_bench import create_boxes, percentile
from devboxes_testbed.api import Api
from stopped_boxes import log, staged, write_boxes

PAGE = 500
GPU_EVERY = 10


def timed(session: requests.Session, url: str, params: dict[str, Any]) -> tuple[float, bytes]:
    """Milliseconds until the last byte of the answer, and the bytes as sent."""
    started = time.perf_counter()
    response = session.get(url, params=params, stream=True, timeout=120)
    data = response.raw.read()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"GET {url} {params}: {response.status_code} {data[:200]!r}")
    return elapsed, data


def items_and_token(data: bytes) -> tuple[int, str | None]:
    body = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    return len(body["items"]), body.get("continue")


def counted(session: requests.Session, url: str, params: dict[str, Any]) -> int:
    try:
        return items_and_token(timed(session, url, params)[1])[0]
    except requests.ConnectionError:
        # The server closed the idle keep-alive connection as this request went.
        return items_and_token(timed(session, url, params)[1])[0]


def walk(session: requests.Session, url: str) -> tuple[float, int, int]:
    """Milliseconds to read every page of PAGE, the boxes read and the pages."""
    started = time.perf_counter()
    params: dict[str, Any] = {"limit": PAGE}
    boxes = pages = 0
    while True:
        _, data = timed(session, url, params)
        count, token = items_and_token(data)
        boxes, pages = boxes + count, pages + 1
        if token is None:
            return (time.perf_counter() - started) * 1000, boxes, pages
        params = {"limit": PAGE, "continue": token}


def measure(samples: int, call: Callable[[], tuple[float, bytes]]) -> tuple[list[float], int]:
    call()
    runs = [call() for _ in range(samples)]
    return [ms for ms, _ in runs], len(runs[-1][1])


def time_cases(
    session: requests.Session,
    url: str,
    boxes: int,
    samples: int,
    more: dict[str, dict[str, Any]],
    quantiles: tuple[int, ...],
) -> None:
    """Print each case's items, bytes and latency quantiles: the whole list, state=ready,
    profile=nvidia-l4, the ``more`` cases, and a page of PAGE, the first and one from the
    middle of ``boxes``."""
    middle: dict[str, Any] = {"limit": PAGE}
    for _ in range(boxes // PAGE // 2):
        middle = {"limit": PAGE, "continue": items_and_token(timed(session, url, middle)[1])[1]}
    cases: dict[str, dict[str, Any]] = {
        "whole list": {},
        "state=ready": {"state": "ready"},
        "profile=nvidia-l4": {"profile": "nvidia-l4"},
        **more,
        f"page of {PAGE}, first": {"limit": PAGE},
        f"page of {PAGE}, middle": middle,
    }
    heads = "".join(f" {f'p{q} ms':>8}" for q in quantiles)
    print(f"{'case':<24} {'items':>6} {'bytes':>9}{heads}")
    for label, params in cases.items():
        latencies, size = measure(samples, lambda p=params: timed(session, url, p))
        count = counted(session, url, params)
        figures = "".join(f" {percentile(latencies, q):>8.1f}" for q in quantiles)
        print(f"{label:<24} {count:>6} {size:>9}{figures}")


def run(args: argparse.Namespace) -> None:
    with staged("list", "nodes.yaml", args.namespace) as stage:
        controller = stage.controller
        api = Api(controller.url, controller.token)
        running = [f"run-{i:03d}" for i in range(args.running)]
        log(f"creating {len(running)} boxes through the API ...")
        create_boxes(api, running, 4)
        stopped = [f"box-{i:05d}" for i in range(args.boxes - args.running)]
        started = time.monotonic()
        write_boxes(stage, stopped, set(stopped[::GPU_EVERY]))
        session = requests.Session()
        session.headers.update({**controller.headers(), "Accept-Encoding": "gzip"})
        url = f"{controller.url}/api/v1/devboxes"

        deadline = time.monotonic() + args.settle_timeout
        while (
            counted(session, url, {}) < args.boxes
            or counted(session, url, {"state": "ready"}) < args.running
        ):
            if time.monotonic() > deadline:
                raise SystemExit("the controller did not list every box, ready, in time")
            time.sleep(5)
        log(f"all {args.boxes} boxes listed after {time.monotonic() - started:.0f}s")

        print(f"boxes: {args.boxes} ({args.running} ready), samples per case: {args.samples}")
        time_cases(session, url, args.boxes, args.samples, {}, (50, 90))
        walks = [walk(session, url) for _ in range(args.walks)]
        _, boxes, pages = walks[-1]
        p50 = percentile([ms for ms, _, _ in walks], 50)
        print(f"walk of {pages} pages ({boxes} boxes): p50 {p50:.0f} ms over {args.walks} walks")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=2500, help="boxes in all")
    parser.add_argument("--running", type=int, default=20, help="of them, created and ready")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--walks", type=int, default=5)
    parser.add_argument("--settle-timeout", type=float, default=900)
    parser.add_argument("--namespace", default="devboxes-list")
    return record.run("list_bench", parser, run, argv, check=record.running_within_boxes)


if __name__ == "__main__":
    sys.exit(main())
