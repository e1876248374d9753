"""What the controller has promised of each GPU profile's devices over time, read from the
caches: the bookings, and every running box until the end of its time to live. The line,
extend and the start of a box's time to live ask here whether holding a device until some
moment breaks a booking; a new booking asks whether it fits.

Only profiles of an extended resource whose devices the controller counts, and that no
other profile's boxes may take, can be booked: the controller then decides which box
gets a device (:mod:`.gates`) and enforces every box's stop. A DRA profile's devices are
placed by the scheduler, which knows nothing of bookings.

A box that holds a device in the window of its owner's booking uses that booking: its
device is the booked one until the window closes, and counts as its own only after.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from devboxes_sdk.models import ProfileTimeline, TimelineSegment

from ..box import naming, ownership, stop_warning
from ..config.gpu import GpuProfileConfig
from ..k8s.kube import Obj
from ..k8s.timestamps import parse_timestamp
from ..placement import timeline
from ..placement.ledger import Ledger, Span
from ..state.bookings import Record, window
from ..state.store import BoxStore


def unbookable(
    settings_profile: GpuProfileConfig | None, counted: bool, sharing: Sequence[str] = ()
) -> str | None:
    """Why a profile cannot be booked; None when it can. ``sharing``: the other profiles
    whose boxes may take its devices."""
    if settings_profile is None:
        return "no such GPU profile is offered"
    if settings_profile.resource_name is None:
        return (
            f"{settings_profile.name} is a DRA profile: the scheduler places its devices, so "
            "the controller could not keep a booking of it"
        )
    if sharing:
        return (
            f"{settings_profile.name} shares its devices ({settings_profile.resource_name}) "
            f"with {', '.join(sharing)}: a box of either may take the booked device, so the "
            "controller could not keep a booking of it"
        )
    if not counted:
        return (
            "the controller does not count devices (availability is off), so it could not "
            "keep a booking"
        )
    return None


class Sitting(NamedTuple):
    """A running box of the profile that holds a device (``placed``) or is let through to
    take one, until ``until``. A tuple: a profile of ten thousand boxes makes as many."""

    name: str
    owner: str
    until: datetime
    placed: bool


def time_to_live(deployment: Obj) -> timedelta:
    """How long a box waiting in line runs once given its device."""
    annotations = deployment["metadata"].get("annotations") or {}
    try:
        expires = parse_timestamp(annotations[naming.ANNOTATION_EXPIRES_AT])
        since = parse_timestamp(annotations[naming.ANNOTATION_WAITING_SINCE])
    except (KeyError, ValueError):
        return timedelta(0)
    return max(expires - since, timedelta(0))


class _Waiting(NamedTuple):
    """A box that waits in line or is stopped: it holds nothing until let through, and
    then for ``lasts``."""

    name: str
    owner: str
    lasts: timedelta


def _read(deployment: Obj) -> Sitting | _Waiting | None:
    name = naming.box_name_of(deployment)
    if name is None:
        return None
    owner = ownership.owner_of(deployment)
    ends = stop_warning.time_to_live_end(deployment)
    if ends is not None:
        return Sitting(name, owner, ends, True)
    return _Waiting(name, owner, time_to_live(deployment))


def sittings_of(
    reads: Iterable[Sitting | _Waiting | None], let_through: Collection[str], now: datetime
) -> list[Sitting]:
    """The boxes that hold a device or are let through to take one."""
    found: list[Sitting] = []
    for read in reads:
        if isinstance(read, Sitting):
            found.append(read)
        elif read is not None and read.name in let_through:
            found.append(Sitting(read.name, read.owner, now + read.lasts, False))
    return found


class Holds:
    """Each box's hold, read from its Deployment once per resourceVersion: a booking, an
    extend and every pass of the line ask for all the boxes of a profile, which at
    10,000 boxes took tens of milliseconds to read again each time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[str, dict[str, tuple[object, Sitting | _Waiting | None]]] = {}

    def of(self, profile: str, deployments: Sequence[Obj]) -> list[Sitting | _Waiting | None]:
        with self._lock:
            kept = self._read.setdefault(profile, {})
            found: list[Sitting | _Waiting | None] = []
            for deployment in deployments:
                metadata = deployment.get("metadata") or {}
                name, version = str(metadata.get("name")), metadata.get("resourceVersion")
                entry = kept.get(name)
                if entry is None or entry[0] != version or version is None:
                    entry = kept[name] = (version, _read(deployment))
                found.append(entry[1])
            if len(kept) > len(deployments):
                present = {str((d.get("metadata") or {}).get("name")) for d in deployments}
                self._read[profile] = {n: e for n, e in kept.items() if n in present}
            return found


def sittings(store: BoxStore, holds: Holds, profile: str, now: datetime) -> list[Sitting]:
    waiters, _ = store.line()
    let_through = {w.box for w in waiters if not w.gated}
    return sittings_of(holds.of(profile, store.running_boxes_of(profile)), let_through, now)


def _may_use(record: Record, owner: str, box: str, now: datetime) -> bool:
    """Whether ``owner``'s ``box`` is one the booking is for, while it is open."""
    return record.is_open(now) and record.owner == owner and record.box in (None, box)


def user_of(record: Record, holding: Sequence[Sitting], now: datetime) -> Sitting | None:
    """The box that uses an open booking: the one recorded, else the booked box or any of
    the owner's boxes that holds a device, by name."""
    if not record.is_open(now):
        return None  # before reading every box: most bookings are not open now
    fits = [s for s in holding if s.placed and _may_use(record, s.owner, s.name, now)]
    recorded = next((s for s in fits if s.name == record.used_by), None)
    return recorded or (min(fits, key=lambda s: s.name) if fits else None)


def uses(records: Sequence[Record], holding: Sequence[Sitting], now: datetime) -> dict[str, Record]:
    """The open booking each box that uses one uses, by box name."""
    return {u.name: r for r in records if (u := user_of(r, holding, now)) is not None}


def held_by_others(capacity: int, available: int, holding: Sequence[Sitting]) -> int:
    """The units that pods other than the profile's boxes hold now."""
    return max(capacity - available - sum(1 for s in holding if s.placed), 0)


def promised(
    records: Sequence[Record], holding: Sequence[Sitting], now: datetime
) -> tuple[list[Span], list[datetime]]:
    """The bookings' windows, and when each box's hold ends: a hold runs from now, or,
    for a box using an open booking, from that booking's end."""
    windows = [Span(r.start, r.end, r.name) for r in records if r.holds(now)]
    using = uses(records, holding, now)
    ends: list[datetime] = []
    for sitting in holding:
        used = using.get(sitting.name)
        if used is None:
            ends.append(sitting.until)
        else:
            windows.append(Span(used.end, sitting.until))
    return windows, ends


def ledger_of(
    capacity: int,
    available: int,
    records: Sequence[Record],
    holding: Sequence[Sitting],
    now: datetime,
    leaving_out: str | None = None,
) -> Ledger:
    """The profile's promises from ``now``, but those of the box ``leaving_out``. Units
    held by pods that are not boxes are taken as held for ever."""
    others = held_by_others(capacity, available, holding)
    windows, ends = promised(records, [s for s in holding if s.name != leaving_out], now)
    return Ledger(capacity - others, windows, ends)


def booked_for(records: Sequence[Record], owner: str, box: str, now: datetime) -> Record | None:
    """The open booking of ``owner`` that ``box`` would use if given a device now."""
    return next(
        (r for r in records if _may_use(r, owner, box, now) and r.used_by in (None, box)),
        None,
    )


@dataclass(frozen=True)
class Clash:
    """The first moment a hold would break bookings, and those bookings."""

    at: datetime
    bookings: tuple[Record, ...]

    def sentence(self) -> str:
        return "; ".join(f"{r.owner} booked {window(r)} ({r.name})" for r in self.bookings)


def _clash(ledger: Ledger, records: Sequence[Record], at: datetime) -> Clash:
    """The bookings whose windows make ``at`` full."""
    names = {s.booking for s in ledger.bookings_at(at)}
    return Clash(at, tuple(r for r in records if r.name in names))


def overrunning(
    ledger: Ledger, holding: Sequence[Sitting], using: Mapping[str, Record], at: datetime
) -> list[Sitting]:
    """The boxes to stop at ``at``, where more units are promised than there are: as many
    as are too many, those that would run longest past it first, never one that uses a
    booking open then. Pure."""
    excess = ledger.promised(at) - ledger.capacity
    kept = {name for name, r in using.items() if r.start <= at < r.end}
    running_on = [s for s in holding if s.placed and s.until > at and s.name not in kept]
    return sorted(running_on, key=lambda s: (-s.until.timestamp(), s.name))[: max(excess, 0)]


class Promises:
    def __init__(self, store: BoxStore) -> None:
        self._store = store
        self.holds = Holds()

    def profile(self, name: str) -> GpuProfileConfig | None:
        settings = self._store.settings
        if not settings.gpu.enabled:
            return None
        return next((p for p in settings.gpu.profiles if p.name == name), None)

    def why_not(self, name: str) -> str | None:
        """Why the profile cannot be booked; None when it can."""
        profile = self.profile(name)
        sharing = () if profile is None else self._store.settings.gpu.sharing_devices(profile)
        return unbookable(profile, self._store.settings.counts_devices, sharing)

    def records(self, profile: str, now: datetime) -> list[Record]:
        return self._store.bookings.of_profile(profile, now)

    def _holding(self, profile: str, now: datetime) -> tuple[int, int, list[Sitting]] | None:
        """The profile's capacity, its free units and the holds of its boxes, as the
        caches have them; None when its devices are not counted now."""
        counts = self._store.availability.current().profile(profile)
        if counts is None or counts.capacity is None or counts.available is None:
            return None
        return counts.capacity, counts.available, sittings(self._store, self.holds, profile, now)

    def ledger(
        self,
        profile: str,
        now: datetime,
        leaving_out: str | None = None,
        records: Sequence[Record] | None = None,
    ) -> Ledger | None:
        """:func:`ledger_of` the profile as the caches have it; None when its devices are
        not counted now."""
        found = self._holding(profile, now)
        if found is None:
            return None
        capacity, available, holding = found
        kept = self.records(profile, now) if records is None else records
        return ledger_of(capacity, available, kept, holding, now, leaving_out)

    def clash(
        self,
        profile: str,
        box: str,
        owner: str,
        until: datetime,
        now: datetime,
        since: datetime | None = None,
    ) -> Clash | None:
        """Whether ``box`` holding a device of ``profile`` from ``since`` (now) until
        ``until`` breaks a booking; the box's own open booking is its own."""
        records = self.records(profile, now)
        if not records:
            return None
        ledger = self.ledger(profile, now, leaving_out=box, records=records)
        if ledger is None:
            return None
        own = booked_for(records, owner, box, now)
        start = max(since or now, own.end if own is not None else now)
        at = ledger.first_full(start, until, booked_only=True)
        return None if at is None else _clash(ledger, records, at)

    def broken(self, profile: str, now: datetime) -> tuple[Clash, list[Sitting]] | None:
        """The first booking window still to open whose promises no longer add up, and
        the boxes whose time to live is to end at its opening to keep it; None while they
        add up. A window already open is not kept this way: its owner's box goes first in
        line, and no running box is stopped for it."""
        records = self.records(profile, now)
        found = self._holding(profile, now) if records else None
        if found is None:
            return None
        capacity, available, holding = found
        ledger = ledger_of(capacity, available, records, holding, now)
        at = ledger.first_broken(now)
        if at is None:
            return None
        using = uses(records, holding, now)
        return _clash(ledger, records, at), overrunning(ledger, holding, using, at)

    def timeline(
        self, profile: str, scope: str | None, viewer: str, now: datetime, end: datetime
    ) -> ProfileTimeline:
        """The profile's units from ``now`` to ``end``, as lanes. ``scope``: whose boxes
        the viewer may see by name (everyone's for None)."""
        why = self.why_not(profile)
        counts = self._store.availability.current().profile(profile)
        if why is None and (counts is None or counts.capacity is None):
            why = (counts.reason if counts is not None else None) or "not counted yet"
        if why is not None or counts is None or counts.capacity is None:
            return ProfileTimeline(name=profile, note=why)
        holding = sittings(self._store, self.holds, profile, now)
        records = self.records(profile, now)
        others = held_by_others(counts.capacity, counts.available or 0, holding)
        segments = [
            TimelineSegment(
                kind="other", starts_at=now, ends_at=end, label="pods that are not boxes"
            )
            for _ in range(others)
        ]
        for record in records:
            mine = record.owner == viewer
            segments.append(
                TimelineSegment(
                    kind="booking",
                    starts_at=record.start,
                    ends_at=record.end,
                    label=f"{'your' if mine else record.owner + chr(39) + 's'} booking",
                    mine=mine,
                )
            )
        using = uses(records, holding, now)
        for sitting in holding:
            used = using.get(sitting.name)
            seen = scope in (None, sitting.owner)
            label = sitting.name if sitting.owner == viewer else "a box"
            if seen and sitting.owner != viewer:
                label = f"{sitting.name} ({sitting.owner})"
            segments.append(
                TimelineSegment(
                    kind="box",
                    starts_at=used.end if used is not None else now,
                    ends_at=sitting.until,
                    label=label,
                    mine=sitting.owner == viewer,
                )
            )
        return ProfileTimeline(
            name=profile,
            lanes=timeline.lanes(counts.capacity, segments, now, end),
            waiting=counts.waiting,
        )
