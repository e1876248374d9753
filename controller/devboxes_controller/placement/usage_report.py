"""Usage reports: the day rows of a span added up by person, group, profile or box.

Pure functions over the rows of :mod:`.usage_ledger`. Reports cover whole UTC days, the unit of
the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from devboxes_sdk.models import UsageDay, UsageGroupBy, UsageLine, UsageReport

from .usage_ledger import Row, day_start


@dataclass
class _Sum:
    allocated: int = 0
    busy: int = 0
    idle: int = 0
    unknown: int = 0
    waiting: int = 0
    people: set[str] = field(default_factory=set)
    boxes: set[str] = field(default_factory=set)

    def add(self, key: str, row: Row) -> None:
        self.allocated += row.allocated
        self.busy += row.busy
        self.idle += row.idle
        self.unknown += row.unknown
        self.waiting += row.waiting
        self.people.add(row.owner)
        self.boxes.add(key)

    def line(self, key: str, box: Row | None = None) -> UsageLine:
        return UsageLine(
            owner=None if box is None else box.owner,
            profile=None if box is None else box.profile,
            key=key,
            allocated_seconds=self.allocated,
            busy_seconds=self.busy,
            idle_seconds=self.idle,
            unknown_seconds=self.unknown,
            waiting_seconds=self.waiting,
            people=len(self.people),
            boxes=len(self.boxes),
        )


def keys_of(row: Row, group_by: UsageGroupBy) -> tuple[str, ...]:
    """What a row counts towards: a box's usage counts for each of its owner's groups."""
    if group_by == "person":
        return (row.owner,)
    if group_by == "profile":
        return (row.profile,)
    if group_by == "box":
        return (row.box,)
    return row.groups or ("(none)",)


DayRows = Mapping[date, Mapping[str, Row]]


def report(
    rows: DayRows,
    since: date,
    until: date,
    group_by: UsageGroupBy,
    scope: str | None,
    bound_seconds: int,
) -> UsageReport:
    """Usage over the days ``since`` to ``until`` (both included), of ``scope``'s boxes
    only when it is given."""
    lines: dict[str, _Sum] = {}
    # A box's latest row, for the owner and profile of its line.
    latest: dict[str, Row] = {}
    days: dict[tuple[str, str], _Sum] = {}
    total = _Sum()
    recorded = 0
    for day, day_rows in rows.items():
        if not since <= day <= until:
            continue
        for key, row in day_rows.items():
            recorded = max(recorded, row.until)
            if scope is not None and row.owner != scope:
                continue
            total.add(key, row)
            for line_key in keys_of(row, group_by):
                lines.setdefault(line_key, _Sum()).add(key, row)
            if group_by == "box" and row.until >= latest.get(row.box, row).until:
                latest[row.box] = row
            days.setdefault((day.isoformat(), row.profile), _Sum()).add(key, row)
    ordered = sorted(lines.items(), key=lambda item: (-item[1].allocated, item[0]))
    return UsageReport(
        since=datetime.fromtimestamp(day_start(since), UTC),
        until=datetime.fromtimestamp(day_start(until + timedelta(days=1)), UTC),
        group_by=group_by,
        scope=scope,
        lines=[s.line(k, latest.get(k)) for k, s in ordered],
        days=[
            UsageDay(
                day=day,
                profile=profile,
                allocated_seconds=s.allocated,
                busy_seconds=s.busy,
                idle_seconds=s.idle,
                unknown_seconds=s.unknown,
                waiting_seconds=s.waiting,
            )
            for (day, profile), s in sorted(days.items())
        ],
        total=total.line("total"),
        recorded_until=datetime.fromtimestamp(recorded, UTC) if recorded else None,
        bound_seconds=bound_seconds,
    )


def device_seconds_of(
    rows: DayRows, since: date, person: str | None, group: str | None, profile: str | None
) -> int:
    """Allocated device-seconds from ``since`` on, of one person's or one group's boxes,
    of one profile or of all."""
    used = 0
    for day, day_rows in rows.items():
        if day < since:
            continue
        for row in day_rows.values():
            if person is not None and row.owner != person:
                continue
            if group is not None and group not in row.groups:
                continue
            if profile is None or row.profile == profile:
                used += row.allocated
    return used


def by_day(rows: Iterable[tuple[date, str, Row]]) -> dict[date, dict[str, Row]]:
    found: dict[date, dict[str, Row]] = {}
    for day, key, row in rows:
        found.setdefault(day, {})[key] = row
    return found
