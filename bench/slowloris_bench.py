"""What clients see while a slowloris holds thousands of connections to the controller.

Starts a testbed of its own and this repository's controller on it, creates a few boxes,
then, once with the connection limits as configured (the defaults) and once with them
lifted to their maxima (as the controller was before it had any), on a fresh controller
each time:

- opens ``--connections`` connections from ``--sources`` addresses (127.0.0.2 and on),
  each sending a request head a few bytes at a time and never finishing it; a
  connection the controller closes is opened again after ``--reopen-after`` seconds;
- meanwhile, from 127.0.0.1, asks ``/health`` and an authenticated
  ``GET /api/v1/devboxes`` in turn, each on a new connection, for ``--seconds``, and
  counts the answers that were not 200 (or never came) and times the others.

The controller's open-file limit is set to ``--controller-open-files`` with prlimit, as
a container runtime would set it; this process raises its own to hold the connections
(it needs root beyond its hard limit).

    PYTHONPATH=testbed .venv/bin/python bench/slowloris_bench.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import record
import requests
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "slowloris"
# The limits at their maxima: no cap reached, no deadline before 300 s.
LIFTED = {
    "headerTimeoutSeconds": 300,
    "bodyTimeoutSeconds": 300,
    "maxTotal": 1_000_000,
    "maxPerClient": 1_000_000,
}
HEAD = b"GET /api/v1/devboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
# Per route: answer times of the 200s, and the other outcomes counted.
Results = dict[str, tuple[list[float], Counter[str]]]
# The measuring client waits this long for an answer before it counts a failure.
REQUEST_TIMEOUT = 10.0


def percentiles(samples: list[float]) -> str:
    if not samples:
        return "no answers"
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    return f"p50 {at(0.5) * 1000:.1f} / p95 {at(0.95) * 1000:.1f} / p99 {at(0.99) * 1000:.1f} ms"


@dataclass
class Attack:
    """The slow clients' side: how many are open now and how their connections ended."""

    port: int
    sources: list[str]
    interval: float
    reopen_after: float
    open_now: int = 0
    ended: Counter[str] = field(default_factory=Counter)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def hold(self, source: str) -> None:
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, local_addr=(source, 0)
                )
            except OSError as err:
                self.ended[f"connect failed ({type(err).__name__})"] += 1
                await self._pause()
                continue
            self.open_now += 1
            try:
                self.ended[await self._dribble(reader, writer)] += 1
            finally:
                self.open_now -= 1
                writer.close()
            await self._pause()

    async def _dribble(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        """Send the head a few bytes at a time until the controller ends the connection;
        how it ended."""
        try:
            writer.write(HEAD)
            while not self.stop.is_set():
                try:
                    data = await asyncio.wait_for(reader.read(4096), self.interval)
                except TimeoutError:
                    writer.write(b"X-Slow: a\r\n")
                    continue
                if not data:
                    return "closed without an answer"
                status = re.match(rb"HTTP/1\.1 (\d+)", data)
                return f"answered {status.group(1).decode()}" if status else "answered other"
        except OSError as err:
            return f"reset ({type(err).__name__})"
        return "still open at the end"

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), self.reopen_after)


def measure(base: str, token_headers: dict[str, str], seconds: float) -> Results:
    """``/health`` and the list in turn, each on a new connection, for ``seconds``."""
    calls = {
        "/health": (f"{base}/health", {}),
        "GET /api/v1/devboxes": (f"{base}/api/v1/devboxes", token_headers),
    }
    results: Results = {name: ([], Counter()) for name in calls}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name, (url, headers) in calls.items():
            samples, failures = results[name]
            started = time.monotonic()
            try:
                response = requests.get(url, headers=headers, timeout=REQUEST_TIMEOUT)
            except requests.RequestException as err:
                failures[type(err).__name__] += 1
                continue
            if response.status_code == 200:
                samples.append(time.monotonic() - started)
            else:
                failures[str(response.status_code)] += 1
    return results


def metrics(controller: Controller) -> str:
    """The controller's own connection figures, when it answers."""
    try:
        text = requests.get(
            f"{controller.url}/metrics", headers=controller.headers(), timeout=REQUEST_TIMEOUT
        ).text
    except requests.RequestException as err:
        return f"/metrics did not answer ({type(err).__name__})"
    found = re.findall(
        r"^(devboxes_http_connections(?:_closed_total\{[^}]*\})?) ([0-9.e+]+)$", text, re.M
    )
    return ", ".join(f"{name} {float(value):.0f}" for name, value in found) or "none"


def run_phase(
    label: str, controller: Controller, args: argparse.Namespace, sources: list[str]
) -> list[str]:
    attack = Attack(controller.port, sources, args.interval, args.reopen_after)
    rows = [
        f"{label}: {args.connections} slow connections from {len(sources)} addresses "
        f"({sources[0]}-{sources[-1]}), {args.seconds:.0f} s measured"
    ]
    held: list[int] = []
    # The measuring client is a process of its own, started before the slow connections
    # are opened: this one's event loop, busy with them, would delay its requests.
    with ProcessPoolExecutor(1) as pool:
        pool.submit(int).result()

        async def main() -> Results:
            async def slot(index: int) -> None:
                await asyncio.sleep(args.ramp * index / args.connections)
                await attack.hold(sources[index % len(sources)])

            slots = [asyncio.create_task(slot(index)) for index in range(args.connections)]
            await asyncio.sleep(args.ramp)
            measured = asyncio.get_running_loop().run_in_executor(
                pool, measure, controller.url, controller.headers(), args.seconds
            )
            while not measured.done():
                held.append(attack.open_now)
                await asyncio.sleep(1)
            rows.append(f"  controller's metrics at the end: {metrics(controller)}")
            rows.append(f"  controller RSS at the end: {controller.rss_kib() / 1024:.0f} MiB")
            attack.stop.set()
            await asyncio.gather(*slots)
            return await measured

        results = asyncio.run(main())
    for name, (samples, failures) in results.items():
        failed = sum(failures.values())
        total = len(samples) + failed
        reasons = ", ".join(f"{count} {reason}" for reason, count in failures.most_common())
        rows.append(
            f"  {name}: {total} requests, {failed} failed ({failed / max(total, 1):.1%})"
            f"{f' [{reasons}]' if reasons else ''}; answered {percentiles(samples)}"
        )
    rows.append(
        f"  slow connections open (client side, sampled each second): "
        f"median {statistics.median(held):.0f}, max {max(held)}"
    )
    ends = ", ".join(f"{count} {how}" for how, count in attack.ended.most_common())
    rows.append(f"  slow connections ended: {ends}")
    return rows


def open_files(pid: int) -> str:
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    return f"{soft}/{hard}"


def run(args: argparse.Namespace) -> None:
    # This process holds every slow connection, and the measuring ones.
    wanted = args.connections + 4096
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        hard = wanted
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    sources = [f"127.0.0.{2 + n}" for n in range(args.sources)]
    workdir = Path(tempfile.mkdtemp(prefix="devboxes-slowloris-"))
    bed = Testbed(workdir / "testbed", REPO / "testbed" / "nodes.yaml", log=lambda _: None)
    bed.start()
    rows: list[str] = []
    try:
        client.CoreV1Api(bed.api_client()).create_namespace({"metadata": {"name": NAMESPACE}})
        phases = [("limits as configured (defaults)", {}), ("limits lifted", LIFTED)]
        for index, (label, connections) in enumerate(phases):
            settings = {**example_settings(NAMESPACE), "connections": connections}
            controller = Controller(bed.kubeconfig, settings, workdir).start()
            try:
                # As a container runtime would set it; the controller raises its soft
                # limit at start, so this comes after.
                limit = args.controller_open_files
                resource.prlimit(controller.pid, resource.RLIMIT_NOFILE, (limit, limit))
                if index == 0:
                    for n in range(args.boxes):
                        requests.post(
                            f"{controller.url}/api/v1/devboxes",
                            json={"name": f"slow-{n}"},
                            headers=controller.headers(),
                            timeout=60,
                        ).raise_for_status()
                print(f"{label}: measuring", file=sys.stderr)
                rows += run_phase(label, controller, args, sources)
                rows.append(f"  controller open-file limit: {open_files(controller.pid)}")
            finally:
                controller.stop()
    finally:
        bed.stop()
    print("\n".join(rows))
    shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--ramp", type=float, default=15, help="seconds to open them in")
    parser.add_argument("--interval", type=float, default=5, help="seconds between dribbles")
    parser.add_argument("--reopen-after", type=float, default=5)
    parser.add_argument("--controller-open-files", type=int, default=20_000)
    parser.add_argument("--boxes", type=int, default=10)
    record.add_arguments(parser)
    args = parser.parse_args(argv)
    with record.recording("slowloris_bench", args):
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
