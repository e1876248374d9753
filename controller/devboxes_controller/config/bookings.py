"""The ``bookings`` block: how far ahead and for how long a person may book a GPU profile,
and how long a booking waits for its box once its window opens. How many hours one
person or group may hold booked is in the ``limits`` block.
"""

from __future__ import annotations

from typing import Annotated

from devboxes_sdk.models import MAX_BOOKING_HOURS

from .base import Model, WholeNumber

MAX_DAYS_AHEAD = 366
MAX_GRACE_MINUTES = 1440

BookingHours = Annotated[int, WholeNumber(1, MAX_BOOKING_HOURS)]
DaysAhead = Annotated[int, WholeNumber(1, MAX_DAYS_AHEAD)]
GraceMinutes = Annotated[int, WholeNumber(1, MAX_GRACE_MINUTES)]


class BookingSettings(Model):
    """Bookings of a profile's devices for a window; see docs/operator-guide.md."""

    # The longest window one booking may ask for.
    max_hours: BookingHours = 12
    # How far ahead a window may open.
    days_ahead: DaysAhead = 14
    # A booking none of whose boxes has its device this long after its window opens is
    # released, so that the device goes to the line.
    grace_minutes: GraceMinutes = 15
