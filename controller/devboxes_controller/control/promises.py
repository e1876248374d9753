"""What the controller has promised of each GPU profile's devices over time, read from the
caches: the bookings, and every running box until the end of its time to live. The line,
extend and the start of a box's time to live ask here whether holding a device until some
moment breaks a booking; a new booking asks whether it fits.

Only profiles of an extended resource whose devices the controller counts can be booked:
the controller then decides which box gets a device (:mod:`.gates`) and enforces every
box's stop. A DRA profile's devices are placed by the scheduler, which knows nothing of
bookings.

A box that holds a device in the window of its owner's booking uses that booking: its
device is the booked one until the window closes, and counts as its own only after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..box import naming, ownership, stop_warning
from ..config.gpu import GpuProfileConfig
from ..k8s.kube import Obj
from ..k8s.timestamps import parse_timestamp
from ..placement.ledger import Ledger, Span
from ..state.bookings import Record, window
from ..state.store import BoxStore

# A box is let through before a booking only if it may run this long before it.
MIN_RUN = timedelta(minutes=15)


def unbookable(settings_profile: GpuProfileConfig | None, counted: bool) -> str | None:
    """Why a profile cannot be booked; None when it can."""
    if settings_profile is None:
        return "no such GPU profile is offered"
    if settings_profile.resource_name is None:
        return (
            f"{settings_profile.name} is a DRA profile: the scheduler places its devices, so "
            "the controller could not keep a booking of it"
        )
    if not counted:
        return (
            "the controller does not count devices (availability is off), so it could not "
            "keep a booking"
        )
    return None


@dataclass(frozen=True)
class Sitting:
    """A running box of the profile that holds a device (``placed``) or is let through to
    take one, until ``until``."""

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


def sittings(store: BoxStore, profile: str, now: datetime) -> list[Sitting]:
    waiters, _ = store.line()
    let_through = {w.box for w in waiters if not w.gated}
    found: list[Sitting] = []
    for deployment in store.boxes_of_profile(profile):
        name = naming.box_name_of(deployment)
        if name is None:
            continue
        owner = ownership.owner_of(deployment)
        ends = stop_warning.time_to_live_end(deployment)
        if ends is not None:
            found.append(Sitting(name, owner, ends, True))
        elif name in let_through:
            found.append(Sitting(name, owner, now + time_to_live(deployment), False))
    return found


def user_of(record: Record, holding: Sequence[Sitting], now: datetime) -> Sitting | None:
    """The box that uses an open booking: the one recorded, else the booked box or any of
    the owner's boxes that holds a device, by name."""
    if record.released_at is not None or not record.start <= now < record.end:
        return None
    fits = [
        s for s in holding if s.placed and s.owner == record.owner and record.box in (None, s.name)
    ]
    recorded = next((s for s in fits if s.name == record.used_by), None)
    return recorded or (min(fits, key=lambda s: s.name) if fits else None)


def spans(records: Sequence[Record], holding: Sequence[Sitting], now: datetime) -> list[Span]:
    """The bookings' windows, and each box's hold: from now, or from the end of the
    booking it uses."""
    found = [Span(r.start, r.end, r.name) for r in records if r.holds(now)]
    using = {u.name: r for r in records if (u := user_of(r, holding, now)) is not None}
    for sitting in holding:
        used = using.get(sitting.name)
        found.append(Span(used.end if used is not None else now, sitting.until))
    return found


def booked_for(records: Sequence[Record], owner: str, box: str, now: datetime) -> Record | None:
    """The open booking of ``owner`` that ``box`` would use if given a device now."""
    return next(
        (
            r
            for r in records
            if r.released_at is None
            and r.start <= now < r.end
            and r.owner == owner
            and r.box in (None, box)
            and r.used_by in (None, box)
        ),
        None,
    )


@dataclass(frozen=True)
class Clash:
    """The first moment a hold would break bookings, and those bookings."""

    at: datetime
    bookings: tuple[Record, ...]

    def sentence(self) -> str:
        return "; ".join(f"{r.owner} booked {window(r)} ({r.name})" for r in self.bookings)


class Promises:
    def __init__(self, store: BoxStore) -> None:
        self._store = store

    def profile(self, name: str) -> GpuProfileConfig | None:
        settings = self._store.settings
        if not settings.gpu.enabled:
            return None
        return next((p for p in settings.gpu.profiles if p.name == name), None)

    def why_not(self, name: str) -> str | None:
        """Why the profile cannot be booked; None when it can."""
        return unbookable(self.profile(name), self._store.settings.counts_devices)

    def records(self, profile: str, now: datetime) -> list[Record]:
        return self._store.bookings.of_profile(profile, now)

    def ledger(
        self,
        profile: str,
        now: datetime,
        leaving_out: str | None = None,
        records: Sequence[Record] | None = None,
    ) -> Ledger | None:
        """The profile's promises from ``now``, but those of the box ``leaving_out``; None
        when its devices are not counted now. Units held by pods that are not boxes are
        taken as held for ever."""
        counts = self._store.availability.current().profile(profile)
        if counts is None or counts.capacity is None or counts.available is None:
            return None
        holding = sittings(self._store, profile, now)
        in_use = counts.capacity - counts.available
        others = max(in_use - sum(1 for s in holding if s.placed), 0)
        kept = self.records(profile, now) if records is None else list(records)
        return Ledger(
            counts.capacity - others,
            spans(kept, [s for s in holding if s.name != leaving_out], now),
        )

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
        if at is None:
            return None
        names = {s.booking for s in ledger.bookings_at(at)}
        return Clash(at, tuple(r for r in records if r.name in names))
