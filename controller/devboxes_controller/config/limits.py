"""The ``limits`` block: how many boxes and devices one person, or one group's members
together, may hold, and what a group's members may ask for; checked on create and start.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt, StringConstraints

from devboxes_sdk.models import Preset

from .auth import GroupName
from .base import Model, WholeNumber

MAX_LIMITED_BOXES = 100_000
MAX_LIMITED_DEVICES = 100_000
MAX_LIMITED_GROUPS = 256
LimitCount = Annotated[int, WholeNumber(0, MAX_LIMITED_BOXES)]
# A device limit is keyed by what profiles request: an extended resource name or a DRA
# device class name.
DeviceKey = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class Quota(Model):
    """How much one person, or one group's members together, may hold."""

    # Boxes that exist, running or stopped.
    boxes: LimitCount | None = None
    # Devices held by running boxes, by resource name or DRA device class name.
    devices: dict[DeviceKey, LimitCount] = Field(default_factory=dict, max_length=64)
    # Hours of bookings not yet over (the part of each window still ahead), all profiles.
    booked_hours: LimitCount | None = None


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

    @property
    def enabled(self) -> bool:
        return bool(self.groups or self.per_person.boxes is not None or self.per_person.devices)
