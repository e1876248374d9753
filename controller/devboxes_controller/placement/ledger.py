"""The promises on one GPU profile's devices over time: whether one more box of it fits in
a span, the first instant it does not, and the earliest span of a length that fits.

Pure. Everything is counted in the profile's own units (boxes of it, as its availability
counts them). A ``Span`` is one unit promised from ``start`` to ``end``: a booking's
window, or a running box until the end of its time to live, which the controller
enforces. The units that are neither (pods that are not boxes) are taken out of the
capacity by the caller, as if they held their devices for ever.

How many units are promised only rises at a span's start, so within a span asked about
the most are promised at its start or at the start of some span inside it: those are the
only instants checked, each by two bisections.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import NamedTuple

# A box is let through before a booking only if it may run this long before it.
MIN_RUN = timedelta(minutes=15)


class Span(NamedTuple):
    """One unit promised over ``[start, end)``; ``booking`` names the booking it keeps,
    None for a running box. A tuple: a ledger of ten thousand boxes makes as many."""

    start: datetime
    end: datetime
    booking: str | None = None


class Ledger:
    """The spans of one profile and its ``capacity``, sorted once for many questions.
    ``held_until``: the ends of units held from before any moment asked about (running
    boxes), kept apart from the spans so that ten thousand boxes cost one sort."""

    def __init__(
        self, capacity: int, spans: Iterable[Span], held_until: Iterable[datetime] = ()
    ) -> None:
        self.capacity = capacity
        self.spans = [s for s in spans if s.start < s.end]
        self._starts = sorted(s.start for s in self.spans)
        self._ends = sorted(s.end for s in self.spans)
        self._held = sorted(held_until)

    def promised(self, moment: datetime) -> int:
        """Units promised at ``moment``."""
        held = len(self._held) - bisect_right(self._held, moment)
        return bisect_right(self._starts, moment) - bisect_right(self._ends, moment) + held

    def first_full(
        self, start: datetime, end: datetime, *, booked_only: bool = False
    ) -> datetime | None:
        """The first instant of ``[start, end)`` at which one more unit does not fit; None
        when it fits throughout. With ``booked_only``, only instants a booking is open
        count: what boxes alone promise is the line's to sort out, not a broken booking."""
        if start >= end:
            return None
        first = bisect_right(self._starts, start)
        last = bisect_left(self._starts, end)
        for moment in [start, *self._starts[first:last]]:
            if self.promised(moment) >= self.capacity and (
                not booked_only or self.bookings_at(moment)
            ):
                return moment
        return None

    def first_broken(self, after: datetime) -> datetime | None:
        """The first opening of a booking window after ``after`` at which more units are
        promised than there are: two writers each kept the promises they saw (an extend
        and an admission at once) and together broke one, or devices were lost since."""
        openings = sorted({s.start for s in self.spans if s.booking and s.start > after})
        return next((m for m in openings if self.promised(m) > self.capacity), None)

    def bookings_at(self, moment: datetime) -> list[Span]:
        """The booking windows open at ``moment``, earliest first."""
        found = [s for s in self.spans if s.booking and s.start <= moment < s.end]
        return sorted(found, key=lambda s: (s.start, s.booking or ""))

    def earliest(self, start: datetime, length: timedelta, latest: datetime) -> datetime | None:
        """The earliest start from ``start`` to ``latest`` of a span ``length`` long that
        fits; None when none does. A span that does not fit at some start fits next where
        a promise ends."""
        later = self._ends[bisect_right(self._ends, start) :]
        later += self._held[bisect_right(self._held, start) :]
        for moment in [start, *sorted(later)]:
            if moment > latest:
                return None
            if self.first_full(moment, moment + length) is None:
                return moment
        return None
