"""The line for devices kept as a promise: box pods that ask for a device wait behind the
scheduling gate ``devboxes.io/queue``, and this loop lifts the gate of the box whose turn it
is once a node it fits has the device free (:mod:`..placement.order` has the order).

Every replica walks the line, so that each one's summaries say what a waiting box lacks
and which boxes are about to be placed; only the Lease holder lifts gates. Everything a
walk decides from is in the caches: which boxes wait and hold devices (the box store) and
what every pod of the cluster uses on every node (availability). It keeps no memory of its
own, so a replica that takes the Lease goes on from the cluster as it is. Each pass is
idempotent: lifting a gate already lifted changes nothing.

Bookings: a box whose owner's booking of its profile is open goes ahead of the other
gated boxes, and a box that could run less than ``ledger.MIN_RUN`` before breaking
someone's booking is left out of the walk until it could (its time to live is cut at the
booking's start when it starts, :meth:`.lifecycle.Lifecycle.begin_time_to_live`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from decimal import Decimal

from ..box import activity, naming
from ..box.spec import spec_from_deployment
from ..config.catalog import SnapshotError
from ..config.formats import quantity_value
from ..config.settings import Settings
from ..k8s import kube
from ..k8s.kube import ApiProblem, NotFound, Obj
from ..k8s.lease import LeaderElector
from ..placement import capacity, order
from ..placement.ledger import MIN_RUN
from ..state.availability import Cluster
from ..state.store import BoxStore
from .passes import Passes
from .promises import Promises, booked_for, time_to_live

log = logging.getLogger(__name__)

# A pass reads only the waiting boxes and the nodes: cheap enough to run often, so a
# device freed by a change no listener reports is handed on within this.
RESYNC_SECONDS = 1.0
LIFT = {"spec": {"schedulingGates": [{"$patch": "delete", "name": naming.QUEUE_GATE}]}}


def free_room(cluster: Cluster) -> dict[str, capacity.Usage]:
    """What each Ready, schedulable node has left of each resource it offers."""
    room: dict[str, capacity.Usage] = {}
    for node in cluster.nodes:
        if not (capacity.node_ready(node) and capacity.node_schedulable(node)):
            continue
        name = capacity.node_name(node)
        used = cluster.usage.get(name, {})
        offered = (node.get("status") or {}).get("allocatable") or {}
        room[name] = {r: capacity.allocatable(node, r) - used.get(r, Decimal(0)) for r in offered}
    return room


def demand(deployment: Obj, settings: Settings, cluster: Cluster) -> order.Demand | None:
    """What the box's pod takes from a node and the nodes that could ever hold it; None
    for a box whose pinned profile is unreadable or not of an extended resource."""
    try:
        spec = spec_from_deployment(deployment)
    except SnapshotError:
        return None
    profile = spec.gpu
    if profile is None or profile.resource_name is None:
        return None
    preset = settings.preset(spec.preset)
    needs = {
        profile.resource_name: Decimal(profile.count),
        "cpu": quantity_value(preset.cpu),
        "memory": quantity_value(preset.memory_request),
        capacity.PODS: Decimal(1),
    }
    where = capacity.placement(profile, cluster.runtime_classes)
    eligible, _ = capacity.eligible_nodes(profile, where, cluster.nodes)
    nodes = tuple(
        capacity.node_name(n)
        for n in eligible
        if all(capacity.allocatable(n, r) >= amount for r, amount in needs.items())
    )
    return order.Demand(needs, nodes)


def reserve_unplaced(
    room: dict[str, capacity.Usage], holders: Sequence[order.Holder], placed: frozenset[str]
) -> None:
    """Keep the device of a pod the box caches show bound while the cluster-wide usage does
    not count it yet: the two watches see the binding at slightly different moments."""
    for holder in holders:
        if holder.node is not None and holder.uid not in placed and holder.node in room:
            free = room[holder.node]
            free[holder.resource] = free.get(holder.resource, Decimal(0)) - holder.count


class Gatekeeper(Passes):
    """Walks the line on every replica, and lifts gates in line order while this replica
    holds the Lease."""

    def __init__(
        self, store: BoxStore, api: kube.ApiClient, elector: LeaderElector, promises: Promises
    ) -> None:
        super().__init__("queue", RESYNC_SECONDS)
        self._store = store
        self._core = kube.apis(api).core
        self._elector = elector
        self._promises = promises
        self._strict = store.settings.queue.order == "strict"
        store.add_listener(lambda _name: self.wake())
        store.availability.add_listener(self.wake)
        store.bookings.add_listener(self.wake)
        elector.add_listener(lambda _leading: self.wake())

    def pass_once(self) -> list[str]:
        """Walk the line and, while leading, let through the boxes whose turn it is; their
        names."""
        waiters, holders = self._store.line()
        gated = [w for w in waiters if w.gated]
        availability = self._store.availability
        if not availability.enabled or availability.forbidden():
            self._store.walked(order.NO_WALK)
            # No view of free devices to keep a line by (turned off since these pods were
            # made, or never granted): the scheduler places them, as without the line.
            return [w.box for w in gated if self._elector.is_leading() and self._lift(w, {})]
        if not waiters:
            self._store.walked(order.NO_WALK)
            return []
        cluster = availability.cluster(h.uid for h in holders)
        if cluster is None:
            return []
        room = free_room(cluster)
        reserve_unplaced(room, holders, cluster.placed)
        demands: dict[str, order.Demand] = {}
        for waiter in waiters:
            deployment = self._store.deployment(naming.object_names(waiter.box))
            found = demand(deployment, self._store.settings, cluster) if deployment else None
            if found is not None:
                demands[waiter.box] = found
        holdings = order.held(holders)
        booked, held_back = self._bookings(waiters)
        resources = sorted({w.resource for w in waiters if w.box in demands})
        free = [w for w in waiters if w.box not in held_back]
        lines = [order.line(free, r, holdings, booked) for r in resources]
        walk = order.walk(lines, demands, room, self._strict)
        walk = dataclasses.replace(walk, booked=frozenset(booked), kept=held_back)
        self._store.walked(walk)
        if not self._elector.is_leading():
            return []
        # No node could ever hold these: the scheduler says why (a selector that matches
        # no node, a count no node offers) better than a line that never moves.
        lifted = [
            w.box
            for w in gated
            if w.box in demands and not demands[w.box].nodes and self._lift(w, {})
        ]
        places = order.places(waiters, holdings, walk.placing, walk.booked)
        for waiter in walk.lift:
            if not self._elector.is_leading():
                break
            if self._lift(waiter, places):
                lifted.append(waiter.box)
        return lifted

    def _bookings(self, waiters: Sequence[order.Waiter]) -> tuple[set[str], dict[str, str]]:
        """The gated boxes whose owner's booking is open (they go first), and those that
        would break someone's booking within ``MIN_RUN`` of getting a device (they wait),
        with the bookings in a sentence."""
        booked: set[str] = set()
        held_back: dict[str, str] = {}
        now = self._store.clock()
        for waiter in waiters:
            deployment = self._store.deployment(naming.object_names(waiter.box))
            profile = activity.gpu_profile(deployment) if deployment is not None else None
            if not waiter.gated or deployment is None or profile is None:
                continue
            records = self._promises.records(profile, now)
            if not records:
                continue
            if booked_for(records, waiter.owner, waiter.box, now) is not None:
                booked.add(waiter.box)
            until = now + time_to_live(deployment)
            clash = self._promises.clash(profile, waiter.box, waiter.owner, until, now)
            if clash is not None and clash.at - now < MIN_RUN:
                held_back[waiter.box] = clash.sentence()
        return booked, held_back

    def _lift(self, waiter: order.Waiter, places: Mapping[str, int]) -> bool:
        try:
            kube.call(
                self._core.patch_namespaced_pod,
                waiter.pod,
                self._store.settings.namespace,
                LIFT,
            )
        except NotFound:
            return False
        except ApiProblem as err:
            log.warning("queue gate not lifted", extra={"box": waiter.box, "error": err.detail})
            return False
        log.info(
            "queue gate lifted",
            extra={
                "box": waiter.box,
                "resource": waiter.resource,
                "owner": waiter.owner,
                "place": places.get(waiter.box),
            },
        )
        return True
