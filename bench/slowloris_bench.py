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

The slow connections are held by ``--processes`` processes, so that each stays below
its open-file limit. The controller keeps the limit it inherits from this process (the
report states it): with the limits lifted, the controller runs out of open files when
the slow connections reach that limit, and a limit above ``--connections`` would
measure something else.

    PYTHONPATH=testbed .venv/bin/python bench/slowloris_bench.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import re
import resource
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as EventType

import record
import requests
from devboxes_testbed.controller import Controller, example_settings
from scratch import scratch_rig

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
    """One process's share of the slow clients: how they ended, and how many are open
    now (``open_now``, shared with the parent)."""

    port: int
    sources: list[str]
    interval: float
    reopen_after: float
    open_now: Synchronized[int]
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
            self._count(1)
            try:
                self.ended[await self._dribble(reader, writer)] += 1
            finally:
                self._count(-1)
                writer.close()
            await self._pause()

    def _count(self, change: int) -> None:
        with self.open_now.get_lock():
            self.open_now.value += change

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

    async def run(self, count: int, ramp: float, stop: EventType) -> None:
        async def slot(index: int) -> None:
            await asyncio.sleep(ramp * index / count)
            await self.hold(self.sources[index % len(self.sources)])

        slots = [asyncio.create_task(slot(index)) for index in range(count)]
        while not stop.is_set():
            await asyncio.sleep(0.5)
        self.stop.set()
        await asyncio.gather(*slots)


def attacker(
    attack: Attack, count: int, ramp: float, stop: EventType, ended: Queue[Counter[str]]
) -> None:
    """A process holding ``count`` slow connections until ``stop``."""
    asyncio.run(attack.run(count, ramp, stop))
    ended.put(attack.ended)


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
    rows = [
        f"{label}: {args.connections} slow connections from {len(sources)} addresses "
        f"({sources[0]}-{sources[-1]}) in {args.processes} processes, "
        f"{args.seconds:.0f} s measured"
    ]
    context = multiprocessing.get_context("fork")
    open_now = context.Value("i", 0)
    stop = context.Event()
    ended: Queue[Counter[str]] = context.Queue()
    # Each process holds a share; the open-file limit of one may be below them all.
    workers = [
        context.Process(
            target=attacker,
            args=(
                Attack(controller.port, sources, args.interval, args.reopen_after, open_now),
                args.connections // args.processes,
                args.ramp,
                stop,
                ended,
            ),
        )
        for _ in range(args.processes)
    ]
    for worker in workers:
        worker.start()
    held: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(1):
            held.append(open_now.value)

    try:
        time.sleep(args.ramp)
        sampler = threading.Thread(target=sample)
        sampler.start()
        results = measure(controller.url, controller.headers(), args.seconds)
        sampling.set()
        sampler.join()
        rows.append(f"  controller's metrics at the end: {metrics(controller)}")
        rows.append(f"  controller RSS at the end: {controller.rss_kib() / 1024:.0f} MiB")
    finally:
        stop.set()
        endings: Counter[str] = Counter()
        for _ in workers:
            endings.update(ended.get(timeout=120))
        for worker in workers:
            worker.join()
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
    rows.append(
        "  slow connections ended: "
        + ", ".join(f"{count} {how}" for how, count in endings.most_common())
    )
    return rows


def open_files(pid: int) -> str:
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    return f"{soft}/{hard}"


def run(args: argparse.Namespace) -> None:
    sources = [f"127.0.0.{2 + n}" for n in range(args.sources)]
    rows: list[str] = []
    with scratch_rig("devboxes-slowloris-") as rig:
        rig.start_testbed(log=lambda _: None)
        rig.create_namespace(NAMESPACE)
        phases = [("limits as configured (defaults)", {}), ("limits lifted", LIFTED)]
        for index, (label, connections) in enumerate(phases):
            settings = {**example_settings(NAMESPACE), "connections": connections}
            controller = rig.start_controller(settings)
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
            soft, hard = resource.prlimit(controller.pid, resource.RLIMIT_NOFILE)
            rows.append(f"  controller's open-file limit: {soft} (hard {hard})")
            controller.stop()
    print("\n".join(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--ramp", type=float, default=15, help="seconds to open them in")
    parser.add_argument("--interval", type=float, default=5, help="seconds between dribbles")
    parser.add_argument("--reopen-after", type=float, default=5)
    parser.add_argument("--processes", type=int, default=4, help="processes holding them")
    parser.add_argument("--boxes", type=int, default=10)
    return record.run("slowloris_bench", parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
