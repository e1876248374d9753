"""The ``limits`` block: how many boxes and devices one person, or one group's members
together, may hold, how many GPU device-hours they may use over a rolling window of days
(budgets), and what a group's members may ask for; checked on create and start.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictInt, StrictStr, StringConstraints

from devboxes_sdk.models import Preset

from .auth import GroupName
from .base import Model, WholeNumber
from .usage import MAX_RETENTION_DAYS

MAX_LIMITED_BOXES = 100_000
MAX_LIMITED_DEVICES = 100_000
MAX_LIMITED_GROUPS = 256
LimitCount = Annotated[int, WholeNumber(0, MAX_LIMITED_BOXES)]
# A device limit is keyed by what profiles request: an extended resource name or a DRA
# device class name.
DeviceKey = Annotated[str, StringConstraints(min_length=1, max_length=253)]
MAX_BUDGET_HOURS = 10_000_000
MAX_BUDGETS = 16
BudgetHours = Annotated[int, WholeNumber(1, MAX_BUDGET_HOURS)]
# At most usage.retentionDays, checked with the usage block (settings.py).
BudgetDays = Annotated[int, WholeNumber(1, MAX_RETENTION_DAYS)]
ProfileName = Annotated[StrictStr, StringConstraints(min_length=1, max_length=63)]


class Budget(Model):
    """Device-hours of GPU boxes one person, or one group's members together, may use in
    the last ``days`` UTC days, today included."""

    # A configured GPU profile; None: every GPU profile together.
    profile: ProfileName | None = None
    # Allocated device-hours: a box of two devices uses two an hour.
    hours: BudgetHours
    days: BudgetDays


class Quota(Model):
    """How much one person, or one group's members together, may hold."""

    # Boxes that exist, running or stopped.
    boxes: LimitCount | None = None
    # Devices held by running boxes, by resource name or DRA device class name.
    devices: dict[DeviceKey, LimitCount] = Field(default_factory=dict, max_length=64)
    # Hours of bookings not yet over (the part of each window still ahead), all profiles.
    booked_hours: LimitCount | None = None
    # GPU device-hours over a rolling window of days; each must hold.
    budgets: list[Budget] = Field(default_factory=list, max_length=MAX_BUDGETS)


class GroupLimits(Quota):
    """A group's quota, and what its members may ask for."""

    # The presets members may create boxes with; None: any.
    presets: list[Preset] | None = Field(default=None, min_length=1)
    # The longest time to live members may ask for; None: ttl.maxHours.
    max_ttl_hours: Annotated[StrictInt, Field(ge=1)] | None = None
    # The longest window members may book; None: bookings.maxHours.
    max_booking_hours: Annotated[StrictInt, Field(ge=1)] | None = None


class LimitSettings(Model):
    """Per-person and per-group limits, checked on create and start. The operator token has
    none."""

    per_person: Quota = Field(default_factory=Quota)
    groups: dict[GroupName, GroupLimits] = Field(
        default_factory=dict, max_length=MAX_LIMITED_GROUPS
    )
    # A running box whose owner, or a group of theirs, has used up a budget of its
    # profile is stopped (its home volume kept); false: only an Event says so.
    stop_over_budget: StrictBool = False

    @property
    def enabled(self) -> bool:
        person = self.per_person
        return bool(self.groups or person.boxes is not None or person.devices or person.budgets)

    @property
    def has_budgets(self) -> bool:
        return bool(self.per_person.budgets or any(g.budgets for g in self.groups.values()))
