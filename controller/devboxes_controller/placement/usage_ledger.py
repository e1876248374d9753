"""What GPU boxes hold, second by second, as rows of a day's record.

Pure functions. At each pass the leader sees every running GPU box in one of four ways
(:class:`Held`): waiting for its device, or holding it busy, idle or with no fresh
reading. A box's row for a UTC day adds up the seconds of each, and carries a cursor: the
second it was last counted to (``until``), how it was held then (``held``) and the pod
that held its device (``pod``). A pass counts, for each box, the seconds from its cursor
to now as it was held at the cursor, then moves the cursor to now. Because every pass
starts from the written cursor, never from what a process remembers, a pass that is
repeated or run by a new leader never counts a second twice.

A span longer than :data:`GAP_SECONDS` (a leader change, a controller that was down)
is counted in full only when the box still holds it as it did: the same pod still has
its device (the device was allocated all along; the busy or idle split past the first
:data:`GAP_SECONDS` is unknown), or the box still waits. Otherwise only the first
:data:`GAP_SECONDS` count.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any

from ..box import activity, naming, ownership
from ..k8s.kube import Obj

# ConfigMaps of one day: a row lands in the shard its key hashes to, so that a day with
# many boxes stays within the apiserver's object size.
SHARDS = 8
CONFIGMAP_PREFIX = "devboxes-usage-"
COMPONENT = "usage"
LABEL_DAY = naming.ANNOTATION_PREFIX + "usage-day"
LABELS = {
    "app.kubernetes.io/managed-by": "devboxes-controller",
    "app.kubernetes.io/component": COMPONENT,
}
SELECTOR = f"app.kubernetes.io/component={COMPONENT}"
# The longest span a pass counts on the word of the cursor alone.
GAP_SECONDS = 300
_ENDED_PHASES = ("Succeeded", "Failed")


class Held(StrEnum):
    WAITING = "waiting"
    BUSY = "busy"
    IDLE = "idle"
    UNKNOWN = "unknown"


ALLOCATED = (Held.BUSY, Held.IDLE, Held.UNKNOWN)


@dataclass(frozen=True)
class Seen:
    """One running GPU box at a pass."""

    key: str
    box: str
    owner: str
    groups: tuple[str, ...]
    profile: str
    count: int
    held: Held
    # The pod that has the box's device; None while the box waits.
    pod: str | None


@dataclass(frozen=True)
class Row:
    """One box's usage within one UTC day, and its cursor."""

    box: str
    owner: str
    groups: tuple[str, ...]
    profile: str
    count: int
    # How the box was held at ``until``; None: stopped (or gone) by then.
    held: Held | None
    until: int
    pod: str | None = None
    allocated: int = 0
    busy: int = 0
    idle: int = 0
    unknown: int = 0
    waiting: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "box": self.box,
                "owner": self.owner,
                "groups": list(self.groups),
                "profile": self.profile,
                "count": self.count,
                "held": None if self.held is None else str(self.held),
                "until": self.until,
                "pod": self.pod,
                "allocated": self.allocated,
                "busy": self.busy,
                "idle": self.idle,
                "unknown": self.unknown,
                "waiting": self.waiting,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )


def row_of(text: str) -> Row | None:
    """A row as written, or None when it cannot be read."""
    try:
        data: Any = json.loads(text)
        held = data.get("held")
        numbers = {k: int(data.get(k) or 0) for k in ("allocated", "busy", "idle", "unknown")}
        return Row(
            box=str(data["box"]),
            owner=str(data["owner"]),
            groups=tuple(str(g) for g in data.get("groups") or ()),
            profile=str(data["profile"]),
            count=int(data.get("count") or 0),
            held=None if held is None else Held(held),
            until=int(data["until"]),
            pod=data.get("pod") if isinstance(data.get("pod"), str) else None,
            waiting=int(data.get("waiting") or 0),
            **numbers,
        )
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def key_of(box: str, uid: str) -> str:
    """A box's key: its name and the start of its Deployment's uid, so that a box made
    again under the same name the same day has a row of its own."""
    return f"{box}.{uid[:8]}"


def shard_of(key: str) -> int:
    return zlib.crc32(key.encode()) % SHARDS


def day_of(second: int) -> date:
    return datetime.fromtimestamp(second, UTC).date()


def day_start(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


def configmap_name(day: date, shard: int) -> str:
    return f"{CONFIGMAP_PREFIX}{day.isoformat()}-{shard}"


def day_of_configmap(name: str) -> date | None:
    """The day a usage ConfigMap's name gives, or None for any other name."""
    if not name.startswith(CONFIGMAP_PREFIX):
        return None
    try:
        return date.fromisoformat(name[len(CONFIGMAP_PREFIX) :][:10])
    except ValueError:
        return None


def rows_of(configmap: Mapping[str, Any]) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    for key, text in (configmap.get("data") or {}).items():
        row = row_of(text) if isinstance(text, str) else None
        if row is not None:
            rows[key] = row
    return rows


def seen(deployment: Obj, pods: Sequence[Obj], threshold: int, now: datetime) -> Seen | None:
    """How a GPU box is held now; None for a CPU box or a stopped one."""
    metadata = deployment.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    profile = annotations.get(naming.ANNOTATION_GPU_PROFILE)
    box = naming.box_name_of(deployment)
    uid = metadata.get("uid")
    if not profile or box is None or not isinstance(uid, str) or naming.is_stopped(deployment):
        return None
    bound = [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") not in _ENDED_PHASES
    ]
    pod = (bound[0].get("metadata") or {}).get("uid") if bound else None
    held = Held.WAITING if pod is None else _allocated(deployment, threshold, now)
    count_text = annotations.get(naming.ANNOTATION_GPU_COUNT) or "0"
    return Seen(
        key=key_of(box, uid),
        box=box,
        owner=ownership.owner_of(dict(deployment)),
        groups=ownership.groups_of(deployment),
        profile=profile,
        count=int(count_text) if count_text.isdigit() else 0,
        held=held,
        pod=pod if isinstance(pod, str) else None,
    )


def _allocated(deployment: Obj, threshold: int, now: datetime) -> Held:
    """Busy at or above the idle threshold, the idle stop's own line; unknown without a
    fresh reading."""
    record = activity.recorded(deployment)
    if record is None or now - record.reported_at > activity.REPORT_STALE:
        return Held.UNKNOWN
    busy = activity.gpu_busy(record, threshold)
    return Held.UNKNOWN if busy is None else Held.BUSY if busy else Held.IDLE


def _add(row: Row, held: Held, seconds: int) -> Row:
    if seconds <= 0:
        return row
    if held is Held.WAITING:
        return replace(row, waiting=row.waiting + seconds)
    device_seconds = seconds * row.count
    field = {Held.BUSY: "busy", Held.IDLE: "idle", Held.UNKNOWN: "unknown"}[held]
    return replace(
        row,
        allocated=row.allocated + device_seconds,
        **{field: getattr(row, field) + device_seconds},
    )


def _spans(start: int, end: int) -> list[tuple[date, int, int]]:
    """``[start, end)`` cut at UTC midnights: (day, from, to) for each day it touches."""
    spans: list[tuple[date, int, int]] = []
    while start < end:
        day = day_of(start)
        midnight = day_start(day + timedelta(days=1))
        spans.append((day, start, min(end, midnight)))
        start = midnight
    return spans


def advance(
    cursor: Row | None, rows: Mapping[date, Row], now_seen: Seen | None, now: int
) -> dict[date, Row]:
    """The rows one box's pass writes, by day.

    ``cursor`` is the box's latest row (the one with the latest ``until``), ``rows`` its
    rows of the days the span may touch, ``now_seen`` how it is held now (None: stopped
    or gone). Nothing is written for a box that was stopped at its cursor and still is.
    """
    written: dict[date, Row] = {}
    if cursor is None:
        if now_seen is None:
            return written
        written[day_of(now)] = Row(
            box=now_seen.box,
            owner=now_seen.owner,
            groups=now_seen.groups,
            profile=now_seen.profile,
            count=now_seen.count,
            held=now_seen.held,
            until=now,
            pod=now_seen.pod,
        )
        return written
    if now <= cursor.until or (cursor.held is None and now_seen is None):
        return written
    held = cursor.held
    span = now - cursor.until
    kept_on = now_seen is not None and (
        (held is Held.WAITING and now_seen.held is Held.WAITING)
        or (held in ALLOCATED and now_seen.pod is not None and now_seen.pod == cursor.pod)
    )
    counted_end = now if span <= GAP_SECONDS or kept_on else cursor.until + GAP_SECONDS
    for day, start, end in _spans(cursor.until, now):
        row = written.get(day) or rows.get(day) or _fresh(cursor, day)
        if held is not None:
            # Past the gap, an allocated device was held all along but how busy is unknown.
            known_end = min(end, cursor.until + GAP_SECONDS)
            within = max(0, min(end, counted_end) - start)
            known = max(0, known_end - start) if held in ALLOCATED else within
            known = min(known, within)
            row = _add(row, held, known)
            row = _add(row, Held.UNKNOWN if held in ALLOCATED else held, within - known)
        written[day] = replace(row, held=None, until=end)
    last = day_of(now - 1) if now > cursor.until else day_of(now)
    final = written[last]
    if now_seen is None:
        written[last] = replace(final, held=None, until=now, pod=None)
    else:
        written[last] = replace(
            final,
            held=now_seen.held,
            until=now,
            pod=now_seen.pod,
            owner=now_seen.owner,
            groups=now_seen.groups,
            count=now_seen.count,
        )
    return written


def _fresh(cursor: Row, day: date) -> Row:
    return Row(
        box=cursor.box,
        owner=cursor.owner,
        groups=cursor.groups,
        profile=cursor.profile,
        count=cursor.count,
        held=None,
        until=day_start(day),
    )


def cursors(configmaps: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Row, dict[date, Row]]]:
    """Each box's latest row and its rows by day, from the ConfigMaps given."""
    found: dict[str, tuple[Row, dict[date, Row]]] = {}
    for configmap in configmaps:
        day = day_of_configmap(str((configmap.get("metadata") or {}).get("name") or ""))
        if day is None:
            continue
        for key, row in rows_of(configmap).items():
            latest, by_day = found.get(key) or (row, {})
            by_day[day] = row
            found[key] = (row if row.until > latest.until else latest, by_day)
    return found
