"""Bookings made, cancelled and kept.

A booking is admitted only if, at every instant of its window, the bookings already made
plus the running boxes that may still run then (each until the end of its time to live,
which the controller enforces) leave a unit of the profile free; it is written over the
version of the bookings it was checked against, so two admissions at once cannot both
take the last unit. From then on the line (:mod:`.gates`), extend and the start of a box's
time to live keep it (:mod:`.promises`).

The keeper, on the Lease holder, cuts the time to live of a box one too many where a
booking opens (two writers at once, or lost devices, broke the promise), starts a booked
box that is stopped when its window opens, records which box used each open booking,
releases a booking none of whose boxes had its device within the grace time of its
window's opening, and forgets bookings a day after they ended.
"""

from __future__ import annotations

import logging
import secrets
import string
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from devboxes_sdk.models import Booking, BookingCreate, BookingList

from ..box import naming, ownership
from ..k8s import kube
from ..k8s.kube import ApiProblem, Conflict, NotFound, Obj, Unavailable, rule_broken
from ..k8s.lease import LeaderElector
from ..k8s.timestamps import format_timestamp, minute_label
from ..placement.limits import Asker, limited_groups
from ..state.bookings import (
    BOOKINGS_CONFIGMAP,
    KEPT_AFTER_END,
    MAX_BOOKINGS,
    Record,
    to_model,
    window,
)
from ..state.metrics import METRICS
from ..state.store import BoxStore
from .lifecycle import Lifecycle
from .promises import sittings, user_of

log = logging.getLogger(__name__)

# Two writes of the bookings at once: each is retried on the other's.
ATTEMPTS = 4
# A window may open this much before the request reaches the controller.
PAST_SLACK = timedelta(minutes=1)
KEEP_SECONDS = 5.0
_ALPHABET = string.ascii_lowercase + string.digits


def _hours(span: timedelta) -> float:
    return span.total_seconds() / 3600


def booked_hours(records: Sequence[Record], now: datetime) -> float:
    """Hours of the bookings still ahead: the part of each window after ``now``."""
    return sum(_hours(r.end - max(r.start, now)) for r in records if r.holds(now) and r.end > now)


class Desk:
    """Bookings asked for, listed and cancelled through the API."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self._store = lifecycle.store
        self.promises = lifecycle.promises
        self._core = kube.apis(lifecycle.api).core
        self._namespace = lifecycle.store.settings.namespace

    @property
    def _grace(self) -> timedelta:
        return timedelta(minutes=self._store.settings.bookings.grace_minutes)

    def read(self) -> Obj | None:
        try:
            found: Obj = kube.call(
                self._core.read_namespaced_config_map, BOOKINGS_CONFIGMAP, self._namespace
            )
        except NotFound:
            return None
        return found

    def records(self, found: Obj | None) -> list[Record]:
        return self._store.bookings.parse(found)

    def write(self, found: Obj | None, records: Sequence[Record]) -> None:
        """Replace the bookings, over the version read; Conflict when it moved."""
        body: Obj = {
            "metadata": {"name": BOOKINGS_CONFIGMAP, "namespace": self._namespace},
            "data": {r.name: r.to_json() for r in records},
        }
        if found is None:
            written = kube.write(self._core.create_namespaced_config_map, self._namespace, body)
        else:
            body["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
            body["metadata"]["labels"] = found["metadata"].get("labels") or {}
            written = kube.write(
                self._core.replace_namespaced_config_map,
                BOOKINGS_CONFIGMAP,
                self._namespace,
                body,
            )
        self._store.bookings.has_seen(written)

    def listing(self, scope: str | None, profile: str | None) -> BookingList:
        """Bookings not yet forgotten: ``scope``'s own, every one's for None."""
        now = self._store.clock()
        return BookingList(
            items=[
                to_model(r, now, self._grace)
                for r in self._store.bookings.all()
                if scope in (None, r.owner) and profile in (None, r.profile)
            ]
        )

    def _checked(self, request: BookingCreate, asker: Asker, now: datetime) -> None:
        settings = self._store.settings
        why = self.promises.why_not(request.profile)
        if why is not None:
            offered = ", ".join(p.name for p in settings.gpu.profiles) or "none"
            if self.promises.profile(request.profile) is None:
                raise NotFound(
                    f"no GPU profile '{request.profile}' is offered; the profiles: {offered}"
                )
            raise rule_broken(["body", "profile"], why)
        if request.starts_at < now - PAST_SLACK:
            raise rule_broken(
                ["body", "starts_at"], f"is in the past; it is {minute_label(now)} now"
            )
        latest = now + timedelta(days=settings.bookings.days_ahead)
        if request.starts_at > latest:
            raise rule_broken(
                ["body", "starts_at"],
                f"must be at most {settings.bookings.days_ahead} days ahead, "
                f"by {minute_label(latest)}",
            )
        longest = settings.bookings.max_hours
        groups = settings.limits.groups
        bounded = [
            (g, groups[g].max_booking_hours)
            for g in limited_groups(settings.limits, asker.groups)
            if groups[g].max_booking_hours is not None
        ]
        if bounded:
            longest = max(h for _, h in bounded if h is not None)
        if request.hours > longest:
            whose = f" for your groups ({', '.join(g for g, _ in bounded)})" if bounded else ""
            raise rule_broken(
                ["body", "hours"], f"must be at most {longest}{whose}", "less_than_equal"
            )
        if request.box is not None:
            try:
                box = self._store.get(request.box, asker.person)
            except NotFound:
                box = None
            if box is None or box.gpu is None or box.gpu.profile != request.profile:
                raise rule_broken(
                    ["body", "box"], f"must be one of your boxes of {request.profile}"
                )

    def _limits(self, records: Sequence[Record], asker: Asker, hours: int, now: datetime) -> None:
        limits = self._store.settings.limits
        quotas = [("you have", limits.per_person, [r for r in records if r.owner == asker.person])]
        for group in limited_groups(limits, asker.groups):
            members = [r for r in records if group in r.groups]
            quotas.append((f"group {group}'s members have", limits.groups[group], members))
        for whose, quota, held in quotas:
            if quota.booked_hours is None:
                continue
            ahead = booked_hours(held, now)
            if ahead + hours > quota.booked_hours:
                raise Conflict(
                    f"{whose} {ahead:g} hours booked ahead, this booking asks for {hours}, and "
                    f"the limit is {quota.booked_hours}; cancel a booking first"
                )

    def book(self, request: BookingCreate, asker: Asker | None) -> Booking:
        if asker is None:
            raise Conflict("the operator token books nothing of its own; log in as yourself")
        now = self._store.clock()
        self._checked(request, asker, now)
        start = max(request.starts_at, now)
        length = timedelta(hours=request.hours)
        for _ in range(ATTEMPTS):
            found = self.read()
            everything = self.records(found)
            if len(everything) >= MAX_BOOKINGS:
                raise Conflict(
                    f"the cluster holds {len(everything)} bookings, the most it keeps; "
                    "try again once some have ended"
                )
            self._limits(everything, asker, request.hours, now)
            kept = [r for r in everything if r.profile == request.profile and r.holds(now)]
            ledger = self.promises.ledger(request.profile, now, records=kept)
            if ledger is None:
                raise Unavailable(
                    f"the controller cannot count {request.profile}'s devices right now; retry"
                )
            full = ledger.first_full(start, start + length)
            if full is not None:
                latest = now + timedelta(days=self._store.settings.bookings.days_ahead)
                fits = ledger.earliest(start, length, latest)
                later = (
                    f"the earliest window of {request.hours} h that fits starts at "
                    f"{minute_label(fits)}"
                    if fits is not None
                    else f"no window of {request.hours} h fits before {minute_label(latest)}"
                )
                raise Conflict(
                    f"{request.profile} has no device left to promise at {minute_label(full)}: "
                    f"bookings and the running boxes that may still run then take all "
                    f"{ledger.capacity}; {later}"
                )
            record = Record(
                name="bk-" + "".join(secrets.choice(_ALPHABET) for _ in range(8)),
                owner=asker.person,
                groups=tuple(sorted(asker.groups)),
                profile=request.profile,
                starts_at=format_timestamp(start),
                ends_at=format_timestamp(start + length),
                box=request.box,
                created_at=format_timestamp(now),
            )
            try:
                self.write(found, [*everything, record])
            except Conflict:
                continue
            METRICS.bookings.labels("booked").inc()
            log.info(
                "booking made",
                extra={"booking": record.name, "owner": record.owner, "window": window(record)},
            )
            return to_model(record, now, self._grace)
        raise Unavailable("the bookings changed under several tries in a row; retry")

    def cancel(self, name: str, scope: str | None) -> Booking:
        """Forget a booking of ``scope`` (anyone's for None): it keeps nothing from now."""
        now = self._store.clock()
        for _ in range(ATTEMPTS):
            found = self.read()
            everything = self.records(found)
            record = next(
                (r for r in everything if r.name == name and scope in (None, r.owner)), None
            )
            if record is None:
                raise NotFound(f"booking '{name}' not found")
            try:
                self.write(found, [r for r in everything if r.name != name])
            except Conflict:
                continue
            METRICS.bookings.labels("cancelled").inc()
            log.info("booking cancelled", extra={"booking": name, "owner": record.owner})
            released = replace(record, released_at=format_timestamp(now), released_why="cancelled")
            return to_model(released, now, self._grace)
        raise Unavailable("the bookings changed under several tries in a row; retry")


def settle(
    records: Sequence[Record],
    users: Callable[[Record], str | None],
    now: datetime,
    grace: timedelta,
) -> list[Record]:
    """The bookings after one pass of the keeper: each open one's box that used it
    recorded, the unused past the grace time released, the long ended forgotten. Pure.

    A box uses one booking at a time: one recorded for another open booking is not given
    a second, and a booking that names the box is given it before one for any box."""
    taken = {r.used_by for r in records if r.used_by is not None and r.is_open(now)}
    settled: dict[str, Record] = {}
    for record in sorted(records, key=lambda r: r.box is None):
        if now >= max(record.end, record.start) + KEPT_AFTER_END:
            continue
        if record.is_open(now):
            user = users(record)
            if user is not None and user != record.used_by and user not in taken:
                taken.add(user)
                record = replace(record, used_by=user)
            elif record.used_by is None and now >= record.start + grace:
                record = replace(
                    record,
                    released_at=format_timestamp(now),
                    released_why=(
                        f"no box of it had the device within {int(grace.total_seconds() // 60)}"
                        " min of the window's opening"
                    ),
                )
        settled[record.name] = record
    return [settled[r.name] for r in records if r.name in settled]


def to_start(
    records: Sequence[Record], stopped: Callable[[Record], bool], now: datetime, grace: timedelta
) -> list[Record]:
    """The open bookings of a named box that is ``stopped``, not started for them yet, up
    to their release: the leader starts each once, so a box its person stops in the
    window stays stopped. Pure."""
    return [
        r
        for r in records
        if r.box is not None
        and r.released_at is None
        and r.used_by is None
        and r.started_at is None
        and r.start <= now < min(r.end, r.start + grace)
        and stopped(r)
    ]


class Keeper:
    """On the Lease holder, every few seconds: :func:`settle` written back, and each
    booked box that is stopped when its window opens started (:func:`to_start`)."""

    def __init__(
        self, store: BoxStore, desk: Desk, elector: LeaderElector, lifecycle: Lifecycle
    ) -> None:
        self._store = store
        self._desk = desk
        self._elector = elector
        self._lifecycle = lifecycle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bookings", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(KEEP_SECONDS):
            if not self._elector.is_leading():
                continue
            try:
                self.pass_once()
            except ApiProblem as err:
                log.warning("bookings not kept", extra={"error": err.detail})
            except Exception:
                log.exception("bookings pass failed")

    def pass_once(self) -> list[Record]:
        """One pass; the bookings released by it."""
        records = self._store.bookings.all()
        if not records:
            return []
        now = self._store.clock()
        self._keep_windows(records, now)
        holds = self._desk.promises.holds
        holding = {p: sittings(self._store, holds, p, now) for p in {r.profile for r in records}}

        def users(record: Record) -> str | None:
            user = user_of(record, holding[record.profile], now)
            return None if user is None else user.name

        grace = timedelta(minutes=self._store.settings.bookings.grace_minutes)
        settled = settle(records, users, now, grace)
        started = {
            r.name: self._start(r, now) for r in to_start(settled, self._stopped, now, grace)
        }
        settled = [started.get(r.name) or r for r in settled]
        if settled == records:
            return []
        found = self._desk.read()
        if self._desk.records(found) != records:
            return []  # changed since the cache saw it: the next pass reads it again
        try:
            self._desk.write(found, settled)
        except Conflict:
            return []
        before = {r.name: r for r in records}
        released = [
            r for r in settled if r.released_at is not None and before[r.name].released_at is None
        ]
        for record in released:
            METRICS.bookings.labels("released").inc()
            log.info("booking released", extra={"booking": record.name, "why": record.released_why})
        for record in settled:
            if record.used_by is not None and before[record.name].used_by != record.used_by:
                METRICS.bookings.labels("used").inc()
        return released

    def _keep_windows(self, records: Sequence[Record], now: datetime) -> None:
        """Cut the time to live of the boxes one too many where a booking opens (see
        :meth:`Promises.broken`), so a promise two writers broke together is kept."""
        for profile in sorted({r.profile for r in records if r.holds(now)}):
            found = self._desk.promises.broken(profile, now)
            if found is None:
                continue
            clash, boxes = found
            for box in boxes:
                if self._lifecycle.keep_booking(box.name, clash):
                    METRICS.bookings.labels("kept").inc()

    def _stopped(self, record: Record) -> bool:
        assert record.box is not None
        deployment = self._store.deployment(naming.object_names(record.box))
        return (
            deployment is not None
            and ownership.owner_of(deployment) == record.owner
            and naming.is_stopped(deployment)
        )

    def _start(self, record: Record, now: datetime) -> Record:
        """Start the booked box for its owner, within their limits; the record marked
        started either way, so a box that cannot start is not tried on every pass."""
        assert record.box is not None
        asker = Asker(record.owner, frozenset(record.groups))
        try:
            self._lifecycle.start_box(record.box, scope=record.owner, asker=asker)
        except ApiProblem as err:
            log.warning(
                "booked box not started",
                extra={"booking": record.name, "box": record.box, "error": err.detail},
            )
        else:
            METRICS.bookings.labels("started").inc()
            log.info("booked box started", extra={"booking": record.name, "box": record.box})
            deployment = self._store.deployment(naming.object_names(record.box))
            if deployment is not None:
                self._lifecycle.record(
                    deployment,
                    "BookingStarted",
                    f"Started for booking {record.name}: {window(record)}",
                )
        return replace(record, started_at=format_timestamp(now))
