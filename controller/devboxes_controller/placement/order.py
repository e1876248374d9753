"""The line of boxes waiting for a device, and which of them may go to the scheduler now.
Pure: plain records in, an order and a choice out.

A box pod that asks for a device is created held back by the scheduling gate ``devboxes.io/queue``:
the scheduler does not look at it until the gate is lifted. There is one line per device
resource. Its order, the same for the place a box reports and for the lifting:

1. boxes already let through (gate lifted) and not yet placed: they take the next device
   they fit, whatever the order of the rest;
2. then the box whose owner has a booking of its profile open now (``control.promises``);
3. then the box whose owner (``box.ownership.owner_of`` of its pod) holds the
   fewest devices of that resource (devices held or let through);
4. then the box that has waited longest (its pod's creation: when it was created or last
   started);
5. then the box name.

The boxes made with the operator token all belong to the operator, one person.

Each line is walked from its head, and a box goes when some node it may use has room for
it. A box that fits nowhere keeps its place and, on every node it may use that has fewer
of its devices free than it needs, the devices that are: nobody behind it takes those
first. What else it holds back depends on the order the operator chose:

- backfill (the default): nothing else. Where its devices are free but the CPU, memory or
  pod slot it needs beside them is not, or on nodes it may not use, the boxes behind it
  that fit go first, so no device stays idle while a box could use it. The price: smaller
  boxes that keep coming may keep taking the CPU or memory a larger box waits for.
- strict: the first box that fits nowhere stops its line, whatever it lacks.

A box let through that has its room (it is about to be placed) is no longer in line: the
places count the boxes that still wait.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

Usage = dict[str, Decimal]


@dataclass(frozen=True)
class Waiter:
    """A box whose pod waits for a device: held at the gate (``gated``) or let through and
    not yet placed by the scheduler."""

    box: str
    pod: str
    owner: str
    resource: str
    count: int
    since: str
    gated: bool


@dataclass(frozen=True)
class Holder:
    """A box whose pod holds a device of ``resource``, or will once placed (gate lifted);
    ``node`` once placed."""

    uid: str
    node: str | None
    owner: str
    resource: str
    count: int


def held(holders: Iterable[Holder]) -> dict[tuple[str, str], int]:
    """Devices held per (owner, resource)."""
    totals: dict[tuple[str, str], int] = {}
    for holder in holders:
        key = (holder.owner, holder.resource)
        totals[key] = totals.get(key, 0) + holder.count
    return totals


def line(
    waiters: Iterable[Waiter],
    resource: str,
    holdings: Mapping[tuple[str, str], int],
    booked: Collection[str] = frozenset(),
) -> list[Waiter]:
    """The boxes waiting for ``resource`` in the order they get it, first first; the
    ``booked`` boxes (whose owner's booking is open) ahead of the other gated ones."""
    return sorted(
        (w for w in waiters if w.resource == resource),
        key=lambda w: (
            w.gated,
            w.box not in booked,
            holdings.get((w.owner, resource), 0),
            w.since,
            w.box,
        ),
    )


def places(
    waiters: Sequence[Waiter],
    holdings: Mapping[tuple[str, str], int],
    placing: Collection[str] = frozenset(),
    booked: Collection[str] = frozenset(),
) -> dict[str, int]:
    """Each waiting box's place in its resource's line, from 1; the boxes ``placing`` (let
    through with their room) have none and come before nobody."""
    found: dict[str, int] = {}
    waiting = [w for w in waiters if w.box not in placing]
    for resource in {w.resource for w in waiting}:
        for place, waiter in enumerate(line(waiting, resource, holdings, booked), start=1):
            found[waiter.box] = place
    return found


@dataclass(frozen=True)
class Demand:
    """What a waiting box takes from a node (its device, CPU, memory and a pod slot), and
    the nodes it may run on that could hold it when empty."""

    needs: Mapping[str, Decimal]
    nodes: tuple[str, ...]


def _fits(room: Mapping[str, Decimal], needs: Mapping[str, Decimal]) -> bool:
    return all(room.get(resource, Decimal(0)) >= amount for resource, amount in needs.items())


def _take(room: Usage, needs: Mapping[str, Decimal]) -> None:
    for resource, amount in needs.items():
        room[resource] = room.get(resource, Decimal(0)) - amount


@dataclass(frozen=True)
class Lack:
    """A resource a box needs beside its devices: ``needs`` of it, and ``most``, the most
    of it free on one node that has the box's devices free."""

    resource: str
    needs: Decimal
    most: Decimal

    @property
    def short(self) -> bool:
        """Whether no node with the box's devices free has enough of it."""
        return self.most < self.needs


@dataclass(frozen=True)
class Walk:
    """One walk of the lines: the gated boxes to let through now (``lift``), the boxes
    already let through that have their room (``placing``: about to be placed, no longer
    in line), and what each box that fits nowhere although some node it may use has its
    devices free lacks there (``short``)."""

    lift: tuple[Waiter, ...]
    placing: frozenset[str]
    short: Mapping[str, tuple[Lack, ...]]
    # The boxes whose owner's booking is open (first in line), and the boxes held back
    # because their device is promised to a booking, with the bookings in a sentence.
    booked: frozenset[str] = frozenset()
    kept: Mapping[str, str] = field(default_factory=dict)


def _lacking(
    beside: Sequence[Mapping[str, Decimal]], demand: Demand, device: str
) -> tuple[Lack, ...]:
    """What a box lacks on the nodes that have its devices free (``beside``: their room)."""
    others = [r for r in demand.needs if r != device]

    def short_on(room: Mapping[str, Decimal], resource: str) -> bool:
        return room.get(resource, Decimal(0)) < demand.needs[resource]

    lacking = [r for r in others if all(short_on(room, r) for room in beside)]
    # Each is free on some node, but no node has them all: name those some node lacks.
    lacking = lacking or [r for r in others if any(short_on(room, r) for room in beside)]
    return tuple(
        Lack(r, demand.needs[r], max(max(room.get(r, Decimal(0)) for room in beside), Decimal(0)))
        for r in lacking
    )


def walk(
    lines: Iterable[Sequence[Waiter]],
    demands: Mapping[str, Demand],
    free: Mapping[str, Usage],
    strict: bool = False,
) -> Walk:
    """Walk each line from its head, given what each node has free.

    A box already let through keeps the first node it fits (the device it is about to take
    is nobody else's); a gated box is let through when some node has room for it, and its
    room is kept for it. A box that fits nowhere keeps, on the nodes it may use, the
    devices it waits for there; with ``strict`` the first gated one stops its line. A box
    that fits no node even on an empty cluster holds nobody up (its reason says why it
    cannot start).
    """
    room = {node: dict(usage) for node, usage in free.items()}
    lift: list[Waiter] = []
    placing: set[str] = set()
    short: dict[str, tuple[Lack, ...]] = {}
    for waiting in lines:
        for waiter in waiting:
            demand = demands.get(waiter.box)
            if demand is None or not demand.nodes:
                continue
            nodes = [room[n] for n in demand.nodes if n in room]
            fitting = next((r for r in nodes if _fits(r, demand.needs)), None)
            if fitting is not None:
                _take(fitting, demand.needs)
                if waiter.gated:
                    lift.append(waiter)
                else:
                    placing.add(waiter.box)
                continue
            device = waiter.resource
            count = demand.needs.get(device, Decimal(0))
            beside = [r for r in nodes if r.get(device, Decimal(0)) >= count]
            if beside:
                short[waiter.box] = _lacking(beside, demand, device)
            for node_room in nodes:
                if node_room.get(device, Decimal(0)) < count:
                    node_room[device] = min(node_room.get(device, Decimal(0)), Decimal(0))
            if strict and waiter.gated:
                break
    return Walk(tuple(lift), frozenset(placing), short)


# Before the first walk, and while there is no line to keep.
NO_WALK = Walk((), frozenset(), {})
