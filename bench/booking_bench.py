"""What admitting a booking costs when many boxes and bookings exist.

Renders ``--boxes`` boxes of one GPU profile as the controller writes them (every other
one running, its time to live ending within a week), keeps their Deployments as the
controller's cache does, and writes ``--bookings`` bookings of the profile, spread over
the next two weeks, into the bookings' ConfigMap as the controller does. Then times,
``--samples`` times, what an admission does between reading that ConfigMap and writing
it back: reading every record (the ConfigMap changed since the last admission), the
boxes' holds (each Deployment read again only when its resourceVersion changed;
``--changed`` boxes change between two admissions), the profile's ledger, whether the
asked window fits and, when it does not, the earliest that does. The figures are this
process's CPU work alone: no apiserver, no HTTP.

    PYTHONPATH=controller:testbed .venv/bin/python bench/booking_bench.py --results
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import record
from cpu_timing import percentiles, timed
from devboxes_controller.box import naming, render
from devboxes_controller.box.spec import BoxSpec
from devboxes_controller.config.settings import Settings
from devboxes_controller.control.promises import Holds, ledger_of, sittings_of
from devboxes_controller.k8s.timestamps import format_timestamp
from devboxes_controller.state import slim
from devboxes_controller.state.bookings import Reader, Record, records_of
from devboxes_testbed.controller import example_settings

NOW = datetime.now(UTC).replace(microsecond=0)


def deployments(boxes: int) -> tuple[list[dict[str, Any]], str]:
    settings = Settings.model_validate(example_settings("bench"))
    profile = settings.gpu.profiles[0]
    chance = random.Random(7)
    kept = []
    for index in range(boxes):
        spec = BoxSpec(
            name=f"box-{index}",
            preset="small",
            ttl_hours=24,
            repository=None,
            expires_at=NOW + timedelta(minutes=chance.randrange(10, 7 * 24 * 60)),
            gpu=profile,
            owner=f"person-{index % 100}",
        )
        written = render.render_deployment(spec, settings, replicas=index % 2)
        # A running box past the line: its time to live runs.
        written["metadata"]["annotations"].pop(naming.ANNOTATION_WAITING_SINCE, None)
        written["metadata"]["resourceVersion"] = str(index + 1)
        kept.append(slim.deployment(written))
    return kept, profile.name


def bookings(count: int, profile: str) -> dict[str, Any]:
    chance = random.Random(11)
    data = {}
    for index in range(count):
        start = NOW + timedelta(minutes=chance.randrange(0, 14 * 24 * 60))
        found = Record(
            name=f"bk-{index:08d}",
            owner=f"person-{index % 100}",
            groups=("ml",),
            profile=profile,
            starts_at=format_timestamp(start),
            ends_at=format_timestamp(start + timedelta(hours=chance.randrange(1, 5))),
            box=None,
            created_at=format_timestamp(NOW),
        )
        data[found.name] = found.to_json()
    return {"metadata": {"name": "devboxes-bookings"}, "data": data}


def added(profile: str, sample: int) -> Record:
    start = NOW + timedelta(days=13, minutes=sample)
    return Record(
        name=f"bk-new{sample:05d}",
        owner="person-0",
        groups=(),
        profile=profile,
        starts_at=format_timestamp(start),
        ends_at=format_timestamp(start + timedelta(hours=1)),
        box=None,
        created_at=format_timestamp(NOW),
    )


def measure(args: argparse.Namespace) -> None:
    kept, profile = deployments(args.boxes)
    config_map = bookings(args.bookings, profile)
    # The store's index hands out the boxes of a profile that are not stopped.
    running_boxes = [d for d in kept if (d.get("spec") or {}).get("replicas", 1)]
    running = len(running_boxes)
    # Room for the running boxes: an asked window fits once enough of them have
    # stopped; the others get the earliest window that does.
    capacity = running // 4 + 8
    print(
        f"{args.boxes} boxes ({running} running) and {args.bookings} bookings of "
        f"{profile}; capacity {capacity}"
    )
    chance = random.Random(3)
    holds = Holds()
    reader = Reader()
    reader.parse(config_map)
    taken: list[float] = []
    fitted = 0
    for sample in range(args.samples):
        start = NOW + timedelta(minutes=chance.randrange(0, 14 * 24 * 60))
        length = timedelta(hours=chance.randrange(1, 5))
        # Boxes started, stopped or extended since the last admission.
        for offset in range(args.changed):
            changed = running_boxes[(sample * args.changed + offset) % running]
            changed["metadata"]["resourceVersion"] += "-"
        began = time.perf_counter()
        # A new version each time: the last admission wrote one more booking.
        config_map["metadata"]["resourceVersion"] = str(sample)
        config_map["data"][f"bk-new{sample:05d}"] = added(profile, sample).to_json()
        kept_records = [r for r in reader.parse(config_map) if r.holds(NOW)]
        holding = sittings_of(holds.of(profile, running_boxes), (), NOW)
        # Every unit in use is held by a box: none by other pods.
        ledger = ledger_of(capacity, capacity - len(holding), kept_records, holding, NOW)
        if ledger.first_full(start, start + length) is None:
            fitted += 1
        else:
            ledger.earliest(start, length, NOW + timedelta(days=14))
        taken.append(time.perf_counter() - began)
    print(f"admissions timed: {args.samples}, of which fitted: {fitted}")
    print(f"admission (records, holds, ledger, fit or earliest): {percentiles(taken)}")
    parts: dict[str, Callable[[int], object]] = {
        "records read, every one": lambda _: records_of(config_map),
        "holds read, every box": lambda _: sittings_of(Holds().of(profile, running_boxes), (), NOW),
        "holds read, as kept": lambda _: sittings_of(holds.of(profile, running_boxes), (), NOW),
    }
    for label, work in parts.items():
        print(f"  of which {label}: {percentiles(timed(20, work))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=10_000)
    parser.add_argument("--bookings", type=int, default=1_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--changed", type=int, default=10, help="boxes changed between two")
    return record.run("booking_bench", parser, measure)


if __name__ == "__main__":
    sys.exit(main())
