"""Timing work done in this process alone, for the benches of CPU work with no apiserver
and no HTTP."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed(samples: int, work: Callable[[int], object]) -> list[float]:
    """The seconds each of ``samples`` calls of ``work``, given the sample's number, took."""
    taken = []
    for sample in range(samples):
        began = time.perf_counter()
        work(sample)
        taken.append(time.perf_counter() - began)
    return taken


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms / p99 {p99 * 1000:.2f} ms"
