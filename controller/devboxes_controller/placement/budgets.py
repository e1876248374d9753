"""GPU-hour budgets: whether a person, or a group's members together, used up the
device-hours a budget allows them of a profile over its window, and when enough come back.

Pure functions over the rows of :mod:`.usage_ledger`. The record is kept per UTC day, so
a budget of D days counts the allocated device-seconds of the last D UTC days, today
included; hours come back at UTC midnights, as the oldest days leave the window. A
person's budget counts the boxes they own; a group's counts the boxes whose owner was in
the group when the box was last created or started (the groups recorded in each row).
A budget is used up once the usage reaches it: a create or start of a box of its profile
is refused, and a running box of its profile crosses it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from ..config.limits import Budget, LimitSettings
from ..k8s.kube import Conflict
from ..k8s.timestamps import minute_label
from .limits import Asker, limited_groups
from .usage_ledger import day_start
from .usage_report import DayRows

HOUR = 3600


@dataclass(frozen=True)
class Applying:
    """A budget that holds for one box: the person's own (``group`` None) or a group's."""

    group: str | None
    budget: Budget


@dataclass(frozen=True)
class Spent:
    """A budget used up, and when its usage drops below it."""

    person: str
    group: str | None
    budget: Budget
    # Allocated device-seconds in the window.
    used: int
    # The first UTC midnight at which the usage drops below the budget as days leave the
    # window; None when it does not within the window.
    back_at: datetime | None
    # Device-seconds that have left the window by then.
    back: int

    @property
    def key(self) -> str:
        """Names the budget: another person, group, profile, size or window is another."""
        whose = "person" if self.group is None else f"group {self.group}"
        budget = self.budget
        return f"{whose} {budget.profile or '*'} {budget.hours}h/{budget.days}d"

    def _what(self) -> str:
        return f"{self.budget.hours} {self.budget.profile or 'GPU'} hours"

    def _window(self) -> str:
        return "today (UTC)" if self.budget.days == 1 else f"the last {self.budget.days} days"

    def _back(self) -> str:
        if self.back_at is None:
            return f"hours come back only as days leave the {self.budget.days}-day window"
        return f"{_hours(self.back, up=True)} hours come back at {minute_label(self.back_at)}"

    def sentence(self, own: bool = True) -> str:
        """Why a create or start is refused, to the asker (``own``), or of the box's owner,
        e.g. ``group ml's members used 401.5 of their 400 nvidia-l4 hours in the last 7
        days; 12.0 hours come back at 2026-12-09 00:00 UTC``."""
        if self.group is not None:
            who, whose = f"group {self.group}'s members", "their"
        else:
            who, whose = ("you", "your") if own else (self.person, "their")
        return (
            f"{who} used {_hours(self.used)} of {whose} {self._what()} in {self._window()}; "
            f"{self._back()}"
        )

    def stopped(self) -> str:
        """The status of a box the leader stopped for this budget."""
        who, whose = (
            (self.person, "their") if self.group is None else (f"group {self.group}", "its")
        )
        back = (
            f"hours come back at {minute_label(self.back_at)}"
            if self.back_at is not None
            else f"hours come back only as days leave the {self.budget.days}-day window"
        )
        return f"Stopped: {who} used {whose} {self._what()} of {self._window()}; {back}."


def _hours(seconds: int, up: bool = False) -> str:
    """Device-seconds as hours to a tenth; ``up`` rounds up, so that hours that come back
    are never said to be none."""
    tenths = math.ceil(seconds / 360) if up else round(seconds / 360)
    return f"{tenths / 10:.1f}"


def applying(
    limits: LimitSettings, person: str | None, groups: Iterable[str], profile: str | None
) -> list[Applying]:
    """The budgets that hold for a box of ``profile`` of ``person`` (None: the operator,
    who has none) in ``groups``: the person's own and their limited groups', of the
    profile or of every GPU profile. A box without a GPU has none."""
    if profile is None or person is None:
        return []
    found = [Applying(None, b) for b in limits.per_person.budgets if b.profile in (None, profile)]
    for group in limited_groups(limits, groups):
        found += [
            Applying(group, b) for b in limits.groups[group].budgets if b.profile in (None, profile)
        ]
    return found


def first_day(limits: LimitSettings, today: date) -> date:
    """The first day any budget's window holds: the rows a check needs start there."""
    budgets = [*limits.per_person.budgets, *(b for g in limits.groups.values() for b in g.budgets)]
    return today - timedelta(days=max((b.days for b in budgets), default=1) - 1)


class Tally:
    """Allocated device-seconds by day, of each person and each group, by profile: the
    rows read once for every budget a check or a pass asks about."""

    def __init__(self, rows: DayRows) -> None:
        self._people: dict[tuple[str, str, date], int] = {}
        self._groups: dict[tuple[str, str, date], int] = {}
        for day, day_rows in rows.items():
            for row in day_rows.values():
                if not row.allocated:
                    continue
                key = (row.owner, row.profile, day)
                self._people[key] = self._people.get(key, 0) + row.allocated
                for group in set(row.groups):
                    key = (group, row.profile, day)
                    self._groups[key] = self._groups.get(key, 0) + row.allocated

    def daily(self, person: str, group: str | None, profile: str | None) -> dict[date, int]:
        """Device-seconds by day of the person's boxes (``group`` None) or of the group's,
        of one profile or (None) of all."""
        found: dict[date, int] = {}
        source = self._people if group is None else self._groups
        whose = person if group is None else group
        for (name, of_profile, day), seconds in source.items():
            if name == whose and profile in (None, of_profile):
                found[day] = found.get(day, 0) + seconds
        return found


def spent(tally: Tally, person: str, applies: Applying, today: date) -> Spent | None:
    """The budget, when its window's usage has reached it; None while some is left."""
    budget = applies.budget
    start = today - timedelta(days=budget.days - 1)
    daily = {
        day: seconds
        for day, seconds in tally.daily(person, applies.group, budget.profile).items()
        if day >= start
    }
    used = sum(daily.values())
    allowed = budget.hours * HOUR
    if used < allowed:
        return None
    left, back_at = 0, None
    for k in range(1, budget.days + 1):
        # At the midnight that begins today + k, the days before start + k have left.
        left += daily.get(start + timedelta(days=k - 1), 0)
        if used - left < allowed:
            back_at = datetime.fromtimestamp(day_start(today + timedelta(days=k)), UTC)
            break
    return Spent(person, applies.group, budget, used, back_at, left if back_at else 0)


def used_up(
    limits: LimitSettings,
    tally: Tally,
    person: str | None,
    groups: Iterable[str],
    profile: str | None,
    today: date,
) -> list[Spent]:
    """Every budget holding for a box of ``profile`` that is used up: the person's own
    first, then their groups' in name order."""
    if person is None:
        return []
    found = (spent(tally, person, a, today) for a in applying(limits, person, groups, profile))
    return [s for s in found if s is not None]


def check(
    limits: LimitSettings, rows: DayRows, asker: Asker, profile: str | None, today: date
) -> None:
    """Conflict (409) naming the first budget the asker used up for a box of ``profile``."""
    found = used_up(limits, Tally(rows), asker.person, asker.groups, profile, today)
    if found:
        raise Conflict(found[0].sentence())
