"""What checking limits costs a create or a start when many boxes exist.

Renders ``--boxes`` GPU boxes of ``--people`` people as the controller writes them, keeps
their Deployments as the controller's cache does (slim, with a resourceVersion each),
and times, ``--samples`` times each, what a create or start under limits does before its
quota check: reading every box's holding from its record, and the same through
``limits.Holdings``, which reads a record again only when its resourceVersion changed.
Between two of the latter, ``--changed`` boxes get a new resourceVersion, as boxes
started, stopped or extended in the meantime do. The figures are this process's CPU
work alone: no apiserver, no HTTP.

    PYTHONPATH=controller:testbed .venv/bin/python bench/limits_bench.py --results
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import record
from cpu_timing import percentiles, timed
from devboxes_controller.box import render
from devboxes_controller.box.spec import BoxSpec
from devboxes_controller.config.settings import Settings
from devboxes_controller.placement import limits
from devboxes_controller.state import slim
from devboxes_testbed.controller import example_settings


def deployments(boxes: int, people: int) -> list[dict[str, Any]]:
    settings = Settings.model_validate(example_settings("bench"))
    profile = settings.gpu.profiles[0]
    kept = []
    for index in range(boxes):
        spec = BoxSpec(
            name=f"box-{index}",
            preset="small",
            ttl_hours=2,
            repository=None,
            expires_at=datetime.now(UTC) + timedelta(hours=2),
            gpu=profile,
            owner=f"person-{index % people}",
        )
        written = render.render_deployment(spec, settings, replicas=index % 2)
        written["metadata"]["resourceVersion"] = str(index + 1)
        kept.append(slim.deployment(written))
    return kept


def measure(args: argparse.Namespace) -> None:
    kept = deployments(args.boxes, args.people)
    print(f"{args.boxes} boxes of {args.people} people rendered and kept")
    every = timed(args.samples, lambda _: [limits.holding(d) for d in kept])
    print(f"every record read: {percentiles(every)}")
    holdings = limits.Holdings()
    first = timed(1, lambda _: holdings.of(kept))[0]
    print(f"Holdings, first check (every record read once): {first * 1000:.2f} ms")
    version = args.boxes

    def check(sample: int) -> object:
        nonlocal version
        for offset in range(args.changed):
            version += 1
            changed = kept[(sample * args.changed + offset) % len(kept)]
            changed["metadata"]["resourceVersion"] = str(version)
        return holdings.of(kept)

    later = timed(args.samples, check)
    print(f"Holdings, {args.changed} boxes changed between checks: {percentiles(later)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=10_000)
    parser.add_argument("--people", type=int, default=100)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--changed", type=int, default=10, help="boxes changed between checks")
    return record.run("limits_bench", parser, measure)


if __name__ == "__main__":
    sys.exit(main())
