"""A profile's next hours as lanes, one per unit of it: what the dashboard draws. Pure.

Each segment (a running box until its time to live ends, a booking's window, or pods that
are not boxes for good) is clipped to the hours shown and laid, earliest first, into the
first lane free when it starts; laying intervals so never uses more lanes than the most
that overlap, which admission and the line keep within the profile's units. Should they
not be (a device gone from the cluster), the extra lanes are drawn too: a broken promise
is shown, not hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from devboxes_sdk.models import TimelineSegment


def lanes(
    units: int, segments: Sequence[TimelineSegment], start: datetime, end: datetime
) -> list[list[TimelineSegment]]:
    shown = sorted(
        (
            s.model_copy(
                update={"starts_at": max(s.starts_at, start), "ends_at": min(s.ends_at, end)}
            )
            for s in segments
            if s.starts_at < end and s.ends_at > start
        ),
        key=lambda s: (s.starts_at, s.ends_at, s.label),
    )
    laid: list[list[TimelineSegment]] = [[] for _ in range(units)]
    for segment in shown:
        lane = next((row for row in laid if not row or row[-1].ends_at <= segment.starts_at), None)
        if lane is None:
            lane = []
            laid.append(lane)
        lane.append(segment)
    return laid
