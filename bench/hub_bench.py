"""What checking a JupyterHub token costs the controller, and what the cache saves the hub.

Starts the testbed's real JupyterHub (no cluster) and times ``HubVerifier.identify`` in
this process, sequentially:

- ``--reads`` identifies of one person's token that the hub is asked about every time
  (each after the cached answer has expired): the cost of a cold token;
- ``--reads`` identifies of that token within its cache time: the cost of a warm one;
- then ``--people`` fresh tokens, each presented ``--burst`` times at once, as a Lab's
  first requests arrive: how many questions the hub gets for them.

The hub's questions are counted twice, by the verifier and from the hub's own log.

    PYTHONPATH=testbed:controller .venv/bin/python bench/hub_bench.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import record
from devboxes_controller.web.identity.hub import HubVerifier
from devboxes_testbed.hub import PEOPLE, Hub


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"p50 {statistics.median(ordered):.3f} ms, p99 {p99:.3f} ms, "
        f"max {ordered[-1]:.3f} ms (n={len(ordered)})"
    )


def hub_questions(hub: Hub) -> int:
    """``GET /user`` answers in the hub's log, for anyone."""
    lines = hub.log.read_text(errors="replace").splitlines()
    return sum(" GET /hub/api/user " in line for line in lines)


async def measure(hub: Hub, args: argparse.Namespace) -> None:
    clock = Clock()
    verifier = HubVerifier(hub.api_url, 30, clock=clock)
    token = hub.token_for("alice")
    try:
        cold: list[float] = []
        for _ in range(args.reads):
            clock.now += 31
            started = time.perf_counter()
            assert await verifier.identify(token) is not None
            cold.append((time.perf_counter() - started) * 1000)
        warm: list[float] = []
        for _ in range(args.reads):
            started = time.perf_counter()
            assert await verifier.identify(token) is not None
            warm.append((time.perf_counter() - started) * 1000)
        print(f"cold token (the hub asked each time): {percentiles(cold)}")
        print(f"warm token (from the cache):          {percentiles(warm)}")
        print(f"hub questions for alice's {2 * args.reads} identifies: {verifier.hub_requests}")

        names = list(PEOPLE)
        tokens = [hub.token_for(names[i % len(names)]) for i in range(args.people)]
        asked_before = verifier.hub_requests
        started = time.perf_counter()
        for fresh in tokens:
            await asyncio.gather(*(verifier.identify(fresh) for _ in range(args.burst)))
        elapsed = time.perf_counter() - started
        print(
            f"{args.people} fresh tokens x {args.burst} requests at once: "
            f"{verifier.hub_requests - asked_before} hub questions, {elapsed:.2f} s"
        )
    finally:
        await verifier.aclose()


def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="hub-bench-") as workdir:
        hub = Hub(Path(workdir))
        hub.start(log=lambda message: print(message, file=sys.stderr))
        try:
            before = hub_questions(hub)
            asyncio.run(measure(hub, args))
            # The hub logs a request after answering it.
            time.sleep(1)
            print(f"GET /user answers in the hub's log: {hub_questions(hub) - before}")
        finally:
            hub.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--people", type=int, default=30)
    parser.add_argument("--burst", type=int, default=8)
    return record.run("hub_bench", parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
