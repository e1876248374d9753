"""The line of boxes waiting for a device, and which of them may go to the scheduler now.
Pure: plain records in, an order and a choice out.

A box pod that asks for a device is created held back by the scheduling gate ``devboxes.io/queue``:
the scheduler does not look at it until the gate is lifted. There is one line per device
resource. Its order, the same for the place a box reports and for the lifting:

1. boxes already let through (gate lifted) and not yet placed: they take the next device
   they fit, whatever the order of the rest;
2. then the box whose owner (``box.ownership.owner_of`` of its pod) holds the
   fewest devices of that resource (devices held or let through);
3. then the box that has waited longest (its pod's creation: when it was created or last
   started);
4. then the box name.

The boxes made with the operator token all belong to the operator, one person.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
    waiters: Iterable[Waiter], resource: str, holdings: Mapping[tuple[str, str], int]
) -> list[Waiter]:
    """The boxes waiting for ``resource`` in the order they get it, first first."""
    return sorted(
        (w for w in waiters if w.resource == resource),
        key=lambda w: (w.gated, holdings.get((w.owner, resource), 0), w.since, w.box),
    )


def places(waiters: Sequence[Waiter], holdings: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """Each waiting box's place in its resource's line, from 1."""
    found: dict[str, int] = {}
    for resource in {w.resource for w in waiters}:
        for place, waiter in enumerate(line(waiters, resource, holdings), start=1):
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


def to_lift(
    lines: Iterable[Sequence[Waiter]], demands: Mapping[str, Demand], free: Mapping[str, Usage]
) -> list[Waiter]:
    """The gated boxes to let through now, given what each node has free.

    Each line is walked from its head. A box already let through keeps the first node it
    fits (the device it is about to take is nobody else's); a gated box is let through
    when some node has room for it, and its room is kept for it. The first gated box that
    fits nowhere stops its line: nobody behind it goes first. A box that fits no node even
    on an empty cluster holds nobody up (its reason says why it cannot start).
    """
    room = {node: dict(usage) for node, usage in free.items()}
    chosen = []
    for waiting in lines:
        for waiter in waiting:
            demand = demands.get(waiter.box)
            if demand is None or not demand.nodes:
                continue
            node = next((n for n in demand.nodes if _fits(room.get(n, {}), demand.needs)), None)
            if node is not None:
                _take(room[node], demand.needs)
                if waiter.gated:
                    chosen.append(waiter)
            elif waiter.gated:
                break
    return chosen
