"""Why a GPU box waits, in the one line it shows: its profile's free count, its place in
line, what it lacks beside a free device, the pods that are not boxes holding devices it
could use, or the booking it is held back for. Pure: plain values in, sentences out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from devboxes_sdk.models import ProfileAvailability

from . import order
from .capacity import PODS
from .ledger import MIN_RUN

_SUFFIXES = {1: "st", 2: "nd", 3: "rd"}


def ordinal(number: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, ... 21st."""
    suffix = "th" if 10 <= number % 100 <= 20 else _SUFFIXES.get(number % 10, "th")
    return f"{number}{suffix}"


@dataclass(frozen=True)
class Queued:
    """A GPU box whose pod waits for a device, with its entry in its device's line.

    ``exact``: the line is kept by the queue's gate (profiles of an extended resource), so
    its place is who gets the next device; otherwise (DRA profiles) the scheduler picks and
    the place is an estimate. ``taken``: let through for a free device, the pod found it
    taken by a pod that is not a box.
    """

    profile: str
    display_name: str
    waiter: order.Waiter
    exact: bool = True
    taken: bool = False


TAKEN = (
    "Waiting for a free {display_name}: a pod that is not a box took the one this box was "
    "let through for; {place} in line for the next"
)
# Names beyond these are counted, not listed: the summary stays one short line.
NAMED_HOLDERS = 3


def held_by(pods: Sequence[str]) -> str:
    """The pods that are not boxes holding devices a box could use, by name."""
    shown = ", ".join(pods[:NAMED_HOLDERS])
    if len(pods) > NAMED_HOLDERS:
        shown += f" and {len(pods) - NAMED_HOLDERS} more"
    if len(pods) == 1:
        return f"devices held by a pod that is not a box: {shown}"
    return f"devices held by pods that are not boxes: {shown}"


PLACING = "Let through for a free {display_name}; waiting for the scheduler to place it"
# A box held back by a booking; it goes once it could run ``MIN_RUN`` before the booking.
KEPT = (
    "Waiting for a {display_name} no booking needs: {bookings}; it gets a device once it "
    f"could run {int(MIN_RUN.total_seconds() // 60)} min before the next booking"
)
# What a box may lack beside a free device, as people say it.
_LACKED = {"cpu": "CPU", "memory": "memory", PODS: "a pod slot"}
_UNITS = {"cpu": " CPU", "memory": " memory", PODS: " pod slot"}
_GI = Decimal(2**30)
_MI = Decimal(2**20)


def _figure(resource: str, value: Decimal) -> str:
    """A CPU or memory figure the way presets write it, rounded up (a figure that is "at
    most" stays true)."""
    if resource == "memory":
        unit, size = ("Gi", _GI) if value >= _GI else ("Mi", _MI)
        value, suffix = value / size, unit
    else:
        suffix = ""
    rounded = value.quantize(Decimal("0.01"), rounding=ROUND_CEILING).normalize()
    return f"{rounded:f}{suffix}"


def _amount(resource: str, value: Decimal) -> str:
    return f"{_figure(resource, value)}{_UNITS.get(resource, '')}"


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def lacking_summary(display_name: str, lacking: Sequence[order.Lack]) -> str:
    """Why a box that has a free device on some node it may use still waits: what it
    needs beside it, and the most of that such a node has."""
    names = _and([_LACKED.get(lack.resource, lack.resource) for lack in lacking])
    needs = _and([_amount(lack.resource, lack.needs) for lack in lacking])
    head = f"Waiting for {names} on a node with a free {display_name}: needs {needs}"
    if not all(lack.short for lack in lacking):
        return f"{head}, no such node has {'both' if len(lacking) == 2 else 'all'} free"
    if not any(lack.most for lack in lacking):
        return f"{head}, none free on any such node"
    if len(lacking) == 1:
        most = _figure(lacking[0].resource, lacking[0].most)
    else:
        most = _and([_amount(lack.resource, lack.most) for lack in lacking])
    return f"{head}, at most {most} free on any such node"


def waiting_summary(
    queued: Queued,
    entry: ProfileAvailability | None,
    place: int,
    others: Sequence[str] = (),
    lacking: Sequence[order.Lack] = (),
) -> str:
    """Why a GPU box waits, in one line: its profile's free count, or what it lacks beside
    a free device (``lacking``), and its place in line; then the pods that are not boxes
    (``others``) holding devices it could use."""
    display_name = queued.display_name
    line = f"{ordinal(place)} in line" + ("" if queued.exact else " (estimate)")
    if lacking:
        summary = f"{lacking_summary(display_name, lacking)}; {line}"
    elif queued.taken:
        summary = TAKEN.format(display_name=display_name, place=ordinal(place))
    elif entry is None or entry.capacity is None:
        summary = f"Waiting for a free {display_name}, {line}"
    elif entry.capacity == 0 and entry.reason:
        return entry.reason
    else:
        summary = (
            f"Waiting for a free {display_name}: {entry.available} of {entry.capacity} free, {line}"
        )
    return f"{summary}; {held_by(others)}" if others else summary
