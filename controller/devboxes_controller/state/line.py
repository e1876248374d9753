"""The line for devices as this replica sees it: which boxes wait for a device, which hold
one, and the last walk of the line, with each waiting box's summary made from them.

The store enters a box here each time it derives the box's status (:func:`entry` makes
its entry from its objects); the queue's gatekeeper (``control.gates``) reads the line
and hands back its walk; availability counts the boxes waiting per profile and hears when
they change. The order itself, and which box goes next, is pure and lives in
``placement.order``; the words of a summary in ``placement.capacity``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from devboxes_sdk.models import Devbox, ProfileAvailability

from ..box import naming, ownership, status
from ..config.gpu import GpuProfileConfig
from ..k8s.kube import Obj
from ..placement import capacity, order, waiting


class Free(Protocol):
    """What a summary reads of the free devices (``availability.Availability``)."""

    def profile(self, name: str) -> ProfileAvailability | None: ...

    def holding(self, resource: str) -> list[Obj]: ...

    def on_nodes_of(self, profile: GpuProfileConfig, pods: list[Obj]) -> list[str]: ...


# The pinned profile of a box, by name; None when it has none or it cannot be read.
Pinned = Callable[[str], GpuProfileConfig | None]


def entry(
    name: str, objects: status.BoxObjects, box: Devbox, gate: bool
) -> tuple[waiting.Queued | None, order.Holder | None]:
    """The box's entry in the line for its device, and what it holds of it; ``gate``:
    whether boxes of extended resources are rendered with the queue's gate."""
    gpu = box.gpu
    pod = status.current_pod(objects.pods)
    if gpu is None or pod is None or naming.is_stopped(objects.deployment):
        return None, None
    owner = ownership.owner_of(pod)
    gated = naming.gated(pod)
    # A DRA box's resource_name is its device class, which no node counts: it is never
    # in the line of an extended resource.
    resource = gpu.resource_name if gpu.kind == "extended-resource" else None
    holding = None
    if (
        resource is not None
        and not gated
        and (pod.get("status") or {}).get("phase") not in capacity.TERMINATED_PHASES
    ):
        node = (pod.get("spec") or {}).get("nodeName")
        holding = order.Holder(pod["metadata"].get("uid", ""), node, owner, resource, gpu.count)
    since = status.waiting_since(objects)
    if since is None:
        return None, holding
    # A DRA profile has no gate: its boxes form a line of their own, ordered the same way.
    line = resource if resource is not None else f"dra:{gpu.profile}"
    waiter = order.Waiter(name, pod["metadata"]["name"], owner, line, gpu.count, since, gated)
    # Without the gate the scheduler picks: the place is an estimate and nothing is taken.
    exact = gate and resource is not None
    taken = (
        exact and not gated and f"Insufficient {resource}" in (status.scheduling_detail(pod) or "")
    )
    queued = waiting.Queued(gpu.profile, gpu.display_name, waiter, exact, taken)
    return queued, holding


class DeviceLine:
    """Each box's entry in the line (waiting) and holding (a device, or one it was let
    through for), and the line's last walk. Thread-safe; the store changes it only with
    its own status lock held, so that a box's entry and its status change together."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: dict[str, waiting.Queued] = {}
        self._holding: dict[str, order.Holder] = {}
        # The last walk of the line (control.gates): who is about to be placed, and what
        # boxes that fit nowhere lack beside a free device.
        self._walk = order.NO_WALK
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called whenever the boxes waiting change, with the store's lock held: it may
        only take note (availability counts them again soon)."""
        self._listeners.append(listener)

    def put(
        self, name: str, queued: waiting.Queued | None, holding: order.Holder | None
    ) -> set[str]:
        """Record the box's entry (None: it neither waits nor holds); the lines whose
        places it may have moved."""
        with self._lock:
            was = self._queued.pop(name, None)
            was_holding = self._holding.pop(name, None)
            if queued is not None:
                self._queued[name] = queued
            if holding is not None:
                self._holding[name] = holding
        lines = {q.waiter.resource for q in (was, queued) if q is not None}
        if was_holding != holding:
            lines |= {h.resource for h in (was_holding, holding) if h is not None}
        if was != queued:
            for listener in self._listeners:
                listener()
        return lines

    def walked(self, walk: order.Walk) -> set[str]:
        """Keep the line's last walk; the lines of the boxes it tells otherwise."""
        with self._lock:
            before, self._walk = self._walk, walk
            moved = before.placing ^ walk.placing
            moved |= before.booked ^ walk.booked
            moved |= {
                n
                for n in before.short.keys() | walk.short.keys()
                if before.short.get(n) != walk.short.get(n)
            }
            moved |= {
                n
                for n in before.kept.keys() | walk.kept.keys()
                if before.kept.get(n) != walk.kept.get(n)
            }
            return {self._queued[n].waiter.resource for n in moved if n in self._queued}

    def lines(self) -> set[str]:
        """Every line some box waits in."""
        with self._lock:
            return {q.waiter.resource for q in self._queued.values()}

    def waiters_and_holders(self) -> tuple[list[order.Waiter], list[order.Holder]]:
        """The boxes waiting for a device and the boxes holding one."""
        with self._lock:
            return [q.waiter for q in self._queued.values()], list(self._holding.values())

    def waiting_counts(self) -> dict[str, int]:
        """Boxes waiting for a device, by profile."""
        with self._lock:
            queued = list(self._queued.values())
        counts: dict[str, int] = {}
        for queued_box in queued:
            counts[queued_box.profile] = counts.get(queued_box.profile, 0) + 1
        return counts

    def summaries(self, lines: Iterable[str], free: Free, pinned: Pinned) -> dict[str, str]:
        """Each waiting box of these ``lines`` with its summary: its place and its
        profile's free count, or that it is about to be placed."""
        lines = set(lines)
        if not lines:
            return {}
        with self._lock:
            queued = {n: q for n, q in self._queued.items() if q.waiter.resource in lines}
            holdings = order.held(self._holding.values())
            walk = self._walk
        waiters = [q.waiter for q in queued.values()]
        # The last walk may predate a box's new pod: only a box still let through is placing.
        placing = {w.box for w in waiters if not w.gated and w.box in walk.placing}
        places = order.places(waiters, holdings, placing, walk.booked)
        summaries: dict[str, str] = {}
        for name, place in places.items():
            box = queued[name]
            entry = free.profile(box.profile)
            others = _others_holding(box, free, pinned) if box.exact else []
            lacking = walk.short.get(name, ()) if box.exact else ()
            summaries[name] = waiting.waiting_summary(box, entry, place, others, lacking)
            if name in walk.kept:
                summaries[name] = waiting.KEPT.format(
                    display_name=box.display_name, bookings=walk.kept[name]
                )
        for name in placing:
            summaries[name] = waiting.PLACING.format(display_name=queued[name].display_name)
        return summaries


def _others_holding(queued: waiting.Queued, free: Free, pinned: Pinned) -> list[str]:
    """The pods that are not boxes holding devices the box could use, by name."""
    pods = free.holding(queued.waiter.resource)
    # Most clusters have none: then the box's pinned profile is not even read.
    if not pods:
        return []
    profile = pinned(queued.waiter.box)
    return free.on_nodes_of(profile, pods) if profile else []
