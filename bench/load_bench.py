"""Load the read routes with many concurrent clients, beside the previous release.

With ``--start-testbed`` it starts a scale testbed (testbed/nodes-scale.yaml), this
checkout's controller and the previous release's (checked out with ``git worktree`` into a
temporary directory and run from its own sources) on the same namespace, measures both
controllers' memory with 0 boxes and after each count of ``--boxes``, then loads get,
list and capabilities on each in turn and reports the figures side by side, as ratios:
absolute numbers on a shared machine drift between runs, ratios taken in one run hold.

    PYTHONPATH=testbed .venv/bin/python bench/load_bench.py --start-testbed --boxes 1000

With ``--url`` (and ``DEVBOX_TOKEN``) it only loads a running controller's read routes,
using the boxes it already has.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import record
from api_bench import create_boxes, percentile, rss_mib
from devboxes_testbed.api import Api, bearer
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.process import free_port
from devboxes_testbed.rig import Rig
from scratch import scratch_dir

REPO = Path(__file__).resolve().parent.parent
BASELINE = "943705e"
ROUTES = ("get", "list", "capabilities")
# Clients ask for gzip as requests, browsers and aiohttp do by default. The load client
# reads every byte but does not decompress: inflating a 1,000-box list 50 times over
# would measure this client's zlib, on the cores the controllers need.
CLIENT_HEADERS = {"Accept-Encoding": "gzip"}


@dataclass
class Load:
    requests: int
    seconds: float
    latencies_ms: list[float]
    failures: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def quantile(self, q: float) -> float:
        return percentile(self.latencies_ms, q) if self.latencies_ms else float("nan")


async def _load(
    url: str, token: str, paths: list[str], clients: int, seconds: float, warmup: float
) -> Load:
    """``clients`` keep-alive connections, each sending its next request when the last one
    has been read; requests that finish within ``warmup`` of the start are not counted."""
    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=clients)
    headers = {**CLIENT_HEADERS, **bearer(token)}
    latencies: list[float] = []
    failures = 0
    measure_from = loop.time() + warmup
    stop_at = measure_from + seconds

    async def client(index: int, session: aiohttp.ClientSession) -> None:
        nonlocal failures
        n = index
        while loop.time() < stop_at:
            path = paths[n % len(paths)]
            n += clients
            started = loop.time()
            async with session.get(url + path) as response:
                await response.read()
                ok = response.status == 200
            finished = loop.time()
            if finished >= measure_from and finished < stop_at:
                if ok:
                    latencies.append((finished - started) * 1000)
                else:
                    failures += 1

    async with aiohttp.ClientSession(
        headers=headers, connector=connector, auto_decompress=False
    ) as session:
        await asyncio.gather(*(client(i, session) for i in range(clients)))
    return Load(len(latencies) + failures, seconds, latencies, failures)


def format_load(result: Load) -> str:
    return (
        f"{result.rate:.0f} req/s, p50 {result.quantile(50):.1f} ms, "
        f"p99 {result.quantile(99):.1f} ms, {result.failures} not 200"
    )


def load(
    url: str, token: str, paths: list[str], clients: int, seconds: float, warmup: float = 2.0
) -> Load:
    return asyncio.run(_load(url.rstrip("/"), token, paths, clients, seconds, warmup))


def load_floor(paths: list[str], clients: int, seconds: float) -> Load:
    """The get load on bench/bare_server.py: the most one process of this machine serves
    to the same clients."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "bare_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("bench/bare_server.py did not start")
            time.sleep(0.1)
        return load(f"http://127.0.0.1:{port}", "", paths, clients, seconds)
    finally:
        server.terminate()
        server.wait(10)


def route_paths(api: Api) -> dict[str, list[str]]:
    names = [box["name"] for box in api.ok("GET", "/devboxes").json()["items"]]
    if not names:
        raise SystemExit("the controller has no boxes to get; create some or use --boxes")
    return {
        "get": [f"/api/v1/devboxes/{name}" for name in names],
        "list": ["/api/v1/devboxes"],
        "capabilities": ["/api/v1/capabilities"],
    }


def stop(controller: Controller, log: Any, grace: float = 30) -> None:
    """Stop the controller and say how long it took; one that outlives the grace period
    is aborted, and its log then shows what every thread was doing."""
    seconds = controller.stop(grace)
    if seconds is not None:
        log(f"{controller.identity} exited {seconds:.1f} s after SIGTERM")
        return
    log(f"{controller.identity} still running {grace:.0f} s after SIGTERM; its threads:")
    log(controller.log.read_text(errors="replace")[-20000:])


def api_of(controller: Controller) -> Api:
    return Api(controller.url, controller.token)


def wait_boxes(controllers: list[Controller], names: set[str], timeout: float) -> float | None:
    """Seconds until every controller lists every named box as ready, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        done = True
        for controller in controllers:
            items = api_of(controller).ok("GET", "/devboxes").json()["items"]
            ready = {box["name"] for box in items if box["state"] == "ready"}
            done = done and names <= ready
        if done:
            return time.monotonic() - started
        time.sleep(3)
    return None


def settled_rss(pid: int, seconds: float = 5.0) -> float:
    """Resident memory once the process has been idle for a moment (MiB)."""
    time.sleep(seconds)
    return rss_mib(pid)


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    print()


def load_rows(results: dict[str, dict[str, Load]], labels: list[str]) -> list[tuple[str, ...]]:
    rows = []
    for route in ROUTES:
        row = [route]
        for label in labels:
            result = results[label][route]
            row += [
                f"{result.rate:.0f}",
                f"{result.quantile(50):.1f}",
                f"{result.quantile(99):.1f}",
                str(result.failures),
            ]
        if len(labels) == 2:
            new, old = (results[label][route] for label in labels)
            row += [
                f"{new.rate / old.rate:.2f}",
                f"{old.quantile(50) / new.quantile(50):.2f}",
                f"{old.quantile(99) / new.quantile(99):.2f}",
            ]
        rows.append(tuple(row))
    return rows


def load_header(labels: list[str]) -> tuple[str, ...]:
    header = ["route"]
    for label in labels:
        header += [f"{label} req/s", "p50 ms", "p99 ms", "non-200"]
    if len(labels) == 2:
        header += ["req/s ×", "p50 ÷", "p99 ÷"]
    return tuple(header)


def run_testbed(args: argparse.Namespace, log: Any) -> None:
    with scratch_dir("devboxes-load-") as workdir, contextlib.ExitStack() as stack:
        sources = {"this": REPO}
        if args.baseline:
            where = workdir / "baseline"
            sources[args.baseline] = stack.enter_context(record.checkout(args.baseline, where))
        log(f"starting a scale testbed in {workdir} ...")
        rig = stack.enter_context(Rig(workdir))
        rig.start_testbed(REPO / "testbed" / "nodes-scale.yaml")
        rig.create_namespace(args.namespace)
        controllers: list[Controller] = []
        try:
            for label, source in sources.items():
                # The controller of the checkout at ``source``, imported from there and
                # nowhere else.
                controllers.append(
                    rig.start_controller(
                        example_settings(args.namespace),
                        identity=label,
                        lease_seconds=None,
                        source=source,
                    )
                )
            measure_testbed(args, controllers, log)
        finally:
            for controller in controllers:
                stop(controller, log)


def measure_testbed(args: argparse.Namespace, controllers: list[Controller], log: Any) -> None:
    """Load each controller in turn at each box count; print the tables."""
    labels = [c.identity for c in controllers]

    memory: dict[int, dict[str, float]] = {0: {}}
    for controller in controllers:
        memory[0][controller.identity] = settled_rss(controller.pid)
    names: list[str] = []
    results: dict[str, dict[str, Load]] = {label: {} for label in labels}
    load_at = args.load_at if args.load_at is not None else args.boxes[-1]
    for count in args.boxes:
        more = [f"load-{i:05d}-{uuid.uuid4().hex[:4]}" for i in range(len(names), count)]
        log(f"creating {len(more)} boxes ({count} in all) ...")
        create_boxes(api_of(controllers[0]), more, args.workers)
        names += more
        settled = wait_boxes(controllers, set(names), args.settle_timeout)
        log(f"  all ready on every controller after {settled}s")
        memory[count] = {c.identity: settled_rss(c.pid) for c in controllers}
        log(f"  RSS MiB: {', '.join(f'{k} {v:.0f}' for k, v in memory[count].items())}")
        if count != load_at:
            continue
        paths = route_paths(api_of(controllers[0]))
        for route in ROUTES:
            for controller in controllers:
                log(f"loading {route} on {controller.identity} ...")
                results[controller.identity][route] = load(
                    controller.url, controller.token, paths[route], args.clients, args.seconds
                )
                log(f"  {format_load(results[controller.identity][route])}")

    log("loading get on a bare server of one fixed answer ...")
    floor = load_floor(paths["get"], args.clients, args.seconds)
    log(f"  {format_load(floor)}")

    print(
        f"\n{args.clients} concurrent clients, {args.seconds:.0f} s per route and controller, "
        f"{load_at} boxes\n"
    )
    print_table(load_header(labels), load_rows(results, labels))
    print(
        f"the floor, get on bench/bare_server.py (one process, one fixed answer, the "
        f"controller's protocol, no authentication or store): {format_load(floor)}"
    )
    for label in labels:
        print(f"  {label}'s get: {results[label]['get'].rate / floor.rate:.0%} of its rate")
    print()
    memory_rows = []
    for count, by_label in memory.items():
        row = [str(count)]
        for label in labels:
            row.append(f"{by_label[label]:.0f}")
            if count:
                per_box = (by_label[label] - memory[0][label]) * 1024 / count
                row.append(f"{per_box:.1f}")
            else:
                row.append("")
        memory_rows.append(tuple(row))
    header = ["boxes"]
    for label in labels:
        header += [f"{label} RSS MiB", "KiB per box"]
    print_table(tuple(header), memory_rows)
    if len(labels) == 2 and len(memory) > 1:
        last = max(memory)
        new, old = (memory[last][label] for label in labels)
        slopes = [(memory[last][label] - memory[0][label]) / last for label in labels]
        print(
            f"at {last} boxes: RSS {old / new:.2f}× smaller, "
            f"memory per box {slopes[1] / slopes[0]:.2f}× smaller than {labels[1]}"
        )
    if len(memory) > 2:
        counts = sorted(memory)
        for label in labels:
            first, last = counts[1], counts[-1]
            slope = (memory[last][label] - memory[first][label]) * 1024 / (last - first)
            print(f"{label}: {slope:.1f} KiB per box from {first} to {last} boxes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("DEVBOX_URL"))
    parser.add_argument("--token", default=os.environ.get("DEVBOX_TOKEN"))
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument(
        "--boxes",
        type=lambda text: sorted(int(n) for n in text.split(",")),
        default=[1000],
        help="box counts to measure memory at, comma-separated; the load runs at the last",
    )
    parser.add_argument(
        "--load-at",
        type=int,
        help="the box count (one of --boxes) to load the routes at; default the last",
    )
    parser.add_argument("--workers", type=int, default=8, help="concurrent creating clients")
    parser.add_argument("--settle-timeout", type=float, default=900)
    parser.add_argument("--namespace", default="devboxes-load")
    parser.add_argument(
        "--baseline",
        default=BASELINE,
        help="the release to compare with (a git revision; '' for none)",
    )
    parser.add_argument("--start-testbed", action="store_true")
    record.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.load_at is not None and args.load_at not in args.boxes:
        parser.error(f"--load-at {args.load_at} is not one of --boxes")
    if not args.start_testbed and (not args.url or not args.token):
        parser.error("give --url and DEVBOX_TOKEN, or --start-testbed")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with record.recording("load_bench", args):
        if args.start_testbed:
            run_testbed(args, log)
        else:
            paths = route_paths(Api(args.url, args.token))
            results = {
                "this": {
                    route: load(args.url, args.token, paths[route], args.clients, args.seconds)
                    for route in ROUTES
                }
            }
            print_table(load_header(["this"]), load_rows(results, ["this"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
