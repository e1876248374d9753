"""Bookings as the cluster keeps them: one ConfigMap, ``devboxes-bookings`` in the box
namespace, one data entry per booking (its name) holding its record as JSON. One object,
so that every booking is admitted against all the others by a write over the version it
was checked against: two replicas admitting at once cannot both promise the same device.

A record is what was asked and what became of it; its state and sentence are derived
from the record and the clock (:func:`state`, :func:`message`), with no I/O.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from functools import cached_property

from devboxes_sdk.models import Booking, BookingState

from ..k8s.kube import Obj, resource_version
from ..k8s.timestamps import minute_label, parse_timestamp
from .cache import Informer

BOOKINGS_CONFIGMAP = "devboxes-bookings"
# A ConfigMap holds at most 1 MiB; a record takes under 400 bytes.
MAX_BOOKINGS = 2000
# How long an ended or released booking is still listed.
KEPT_AFTER_END = timedelta(days=1)


@dataclass(frozen=True)
class Record:
    name: str
    owner: str
    groups: tuple[str, ...]
    profile: str
    starts_at: str
    ends_at: str
    box: str | None
    created_at: str
    used_by: str | None = None
    released_at: str | None = None
    released_why: str | None = None
    # When the leader started the booked box, stopped at the window's opening.
    started_at: str | None = None

    # Read once: a ledger asks each record for its times many times.
    @cached_property
    def start(self) -> datetime:
        return parse_timestamp(self.starts_at)

    @cached_property
    def end(self) -> datetime:
        return parse_timestamp(self.ends_at)

    def to_json(self) -> str:
        kept = {f.name: getattr(self, f.name) for f in fields(self)}
        return json.dumps(kept, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Record | None:
        """The record, or None for an entry that is not one (edited by hand)."""
        try:
            raw = json.loads(text)
            record = cls(**{**raw, "groups": tuple(raw.get("groups") or ())})
            record.start, record.end  # noqa: B018 - both times must parse
        except (ValueError, TypeError):
            return None
        return record

    def is_open(self, now: datetime) -> bool:
        """Whether its window is open at ``now`` and it was not released."""
        return self.released_at is None and self.start <= now < self.end

    def holds(self, now: datetime) -> bool:
        """Whether it still keeps a device from ``now`` on: not released, not over."""
        return self.released_at is None and self.end > now


def read_entries(
    config_map: Obj | None, known: Mapping[str, Record | None]
) -> dict[str, Record | None]:
    """Each entry's text and its record (None: not one); a text in ``known`` (read
    before) is not parsed again."""
    data: Mapping[str, str] = (config_map or {}).get("data") or {}
    return {
        text: known[text] if text in known else Record.from_json(text) for text in data.values()
    }


def earliest_first(records: Iterable[Record | None]) -> list[Record]:
    return sorted((r for r in records if r is not None), key=lambda r: (r.start, r.name))


def records_of(config_map: Obj | None) -> list[Record]:
    """Every readable booking of the ConfigMap, earliest window first."""
    return earliest_first(read_entries(config_map, {}).values())


def state(record: Record, now: datetime) -> BookingState:
    if record.released_at is not None:
        return BookingState.RELEASED
    if now >= record.end:
        return BookingState.ENDED
    if record.used_by is not None:
        return BookingState.USED
    return BookingState.OPEN if now >= record.start else BookingState.BOOKED


def window(record: Record) -> str:
    return f"{record.profile} from {minute_label(record.start)} to {minute_label(record.end)}"


def message(record: Record, now: datetime, grace: timedelta) -> str:
    which = f"{record.box}" if record.box else f"any of {record.owner}'s boxes of it"
    current = state(record, now)
    if current is BookingState.RELEASED:
        return f"Released: {window(record)}; {record.released_why or 'cancelled'}."
    if current is BookingState.ENDED:
        return f"Ended: {window(record)}."
    if current is BookingState.USED:
        return f"In use by {record.used_by}: {window(record)}."
    if current is BookingState.OPEN:
        started = (
            f"{record.box} was started at {minute_label(parse_timestamp(record.started_at))}; "
            if record.box and record.started_at
            else ""
        )
        return (
            f"Open: {window(record)}; {started}{which} gets the device ahead of the line if "
            f"started by {minute_label(record.start + grace)}, else the booking is released."
        )
    if record.box:
        return (
            f"Booked: {window(record)}; {record.box} is started then if it is stopped, and "
            "gets the device ahead of the line."
        )
    return f"Booked: {window(record)}; {which} gets the device ahead of the line then."


def to_model(record: Record, now: datetime, grace: timedelta) -> Booking:
    return Booking(
        name=record.name,
        owner=record.owner,
        profile=record.profile,
        starts_at=record.start,
        ends_at=record.end,
        box=record.box,
        state=state(record, now),
        used_by=record.used_by,
        created_at=parse_timestamp(record.created_at),
        message=message(record, now, grace),
    )


class Reader:
    """Records read from versions of the ConfigMap: each version once, and of a new version
    only the entries that changed (an admission at a thousand bookings would otherwise
    spend most of its time reading the ones it did not touch)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: tuple[object, list[Record]] = (None, [])
        self._texts: dict[str, Record | None] = {}

    def parse(self, config_map: Obj | None) -> list[Record]:
        """The records of this version of the ConfigMap, earliest window first."""
        version = ((config_map or {}).get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if version is None or self._read[0] != version:
                self._texts = read_entries(config_map, self._texts)
                self._read = (version, earliest_first(self._texts.values()))
            return self._read[1]


class Bookings(Reader):
    """The bookings as the shared watch of their ConfigMap last saw them; a read of the
    ConfigMap from the apiserver is parsed here too."""

    def __init__(self, informer: Informer) -> None:
        super().__init__()
        self._informer = informer

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._informer.subscribe(on_update=listener)

    def all(self) -> list[Record]:
        return self.parse(self._informer.get(BOOKINGS_CONFIGMAP))

    def has_seen(self, written: Obj) -> bool:
        """Wait briefly until the cache holds this version of the written ConfigMap, so
        a listing right after a booking or a cancel shows it."""
        return self._informer.wait_for_version(BOOKINGS_CONFIGMAP, resource_version(written))

    def of_profile(self, profile: str, now: datetime) -> list[Record]:
        """The profile's bookings that still keep a device from ``now`` on."""
        return [r for r in self.all() if r.profile == profile and r.holds(now)]
