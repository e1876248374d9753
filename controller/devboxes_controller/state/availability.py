"""Live GPU availability: from the watches of every node and every pod of the cluster.

GPUs are also taken by pods that are not boxes, so the pods of all namespaces count.
When a profile names a RuntimeClass, the RuntimeClasses are watched too: theirs are
the nodeSelector and tolerations admission adds to the pods.
Each object is stripped on ingest to the few fields :mod:`..placement.capacity` reads. Every
watch event updates running totals per node and resource (:class:`..placement.capacity.Totals`)
at a cost that does not grow with the cluster, and every ``RECOUNT_SECONDS`` a full recount
from the cached objects checks them. A burst of watch events is coalesced into one
computation over the nodes; listeners hear only real changes.

Free DRA devices come from three more cluster-wide watches, of ResourceSlices,
ResourceClaims and DeviceClasses (:mod:`..placement.devices`), counted afresh at each
computation. They are apart from the node and pod watches: a cluster that does not serve
DRA, or a controller that may not read it, still has its nodes counted.

None of this affects readiness: a controller that may not read nodes or pods reports
availability as unknown, with the reason, and serves everything else as before.

The watches are the process's shared ones (``watches.Watches``, rows ``COUNTING`` and
``DEVICES``), which exist only while availability is counted (the slices also while a
profile uses DRA, for the box store); this module subscribes to them and reads them.
The boxes waiting per profile come from the device line (``line.DeviceLine``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Protocol

from devboxes_sdk.models import GpuAvailability, Preset, ProfileAvailability

from ..config.boxes import PresetSettings
from ..config.gpu import GpuProfileConfig
from ..config.settings import Settings
from ..k8s.kube import Obj, status_of
from ..placement import capacity, devices
from .bodies import Body, body
from .cache import Informer
from .metrics import METRICS
from .watches import CLUSTER_PODS, COUNTING, DEVICES, NODES, RUNTIME_CLASSES, Watches

log = logging.getLogger(__name__)

# Long enough to fold a burst of pod events (a rollout, a node going away) into one
# computation, short enough that a freed GPU shows at once to a person watching.
COALESCE_SECONDS = 0.05
# A recount reads every cached pod: rare enough to cost little beside thousands of pods,
# often enough that a wrong total, should a change ever be missed, is not served for long.
RECOUNT_SECONDS = 30.0

DISABLED = "availability is turned off by the operator (controller.availability.enabled: false)"
FORBIDDEN = (
    "the controller may not list {kind} cluster-wide; grant it the chart's read-only "
    "ClusterRole (controller.availability.enabled: true)"
)
LOADING = "the controller is still loading the cluster's nodes and pods"
UNREACHABLE = "the controller cannot read the cluster's {kind} ({error})"


class Waiting(Protocol):
    """The boxes waiting for a device (``line.DeviceLine``)."""

    def waiting_counts(self) -> Mapping[str, int]: ...

    def add_listener(self, listener: Callable[[], None]) -> None: ...


@dataclass(frozen=True)
class _Observed:
    """One consistent reading of the cluster: nodes, what pods use on each, when."""

    at: datetime
    nodes: list[Obj] = field(default_factory=list)
    usage: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    runtime_classes: dict[str, Obj] = field(default_factory=dict)
    reason: str | None = None
    # What DRA drivers publish and claims hold, or why it cannot be read.
    published: devices.Published | str = LOADING


@dataclass(frozen=True)
class Cluster:
    """The nodes and what bound pods use on each at one moment; ``placed``: which of the
    pods asked about that use counts."""

    nodes: list[Obj]
    usage: dict[str, capacity.Usage]
    placed: frozenset[str]
    runtime_classes: dict[str, Obj]


class Availability:
    """Per-profile counts of boxes that could start now, kept current by the watches."""

    def __init__(self, settings: Settings, watches: Watches, waiting: Waiting) -> None:
        self.settings = settings
        self._waiting = waiting.waiting_counts
        self._listeners: list[Callable[[], None]] = []
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self.enabled = settings.counts_devices
        self._observed = _Observed(
            at=datetime.now(UTC), reason=LOADING if self.enabled else DISABLED
        )
        self._matcher = devices.Matcher()
        self._current = self._compute(self._observed)
        self._body = body(self._current.model_dump_json().encode())
        self._others: frozenset[tuple[str, str, str]] = frozenset()
        # Written by the two watch threads inside their caches' locks, read by this one.
        self._totals = capacity.Totals()
        self._totals_lock = threading.Lock()
        # Each exists only while counted (the slices also for the store's DRA boxes).
        self._nodes = watches.get(NODES)
        self._pods = watches.get(CLUSTER_PODS)
        self._runtime_classes = watches.get(RUNTIME_CLASSES)
        self.informers = watches.of(COUNTING)
        # Apart from ``informers``: a cluster without DRA still has its nodes counted.
        self.device_informers = watches.of(DEVICES) if self.enabled else ()
        for informer in watches.of(COUNTING + DEVICES):
            informer.subscribe(on_update=self.kick)
        if self._nodes is not None and self._pods is not None:
            self._nodes.subscribe(on_object=self._node_changed)
            self._pods.subscribe(on_object=self._pod_changed)
        waiting.add_listener(self.kick)
        self._thread = threading.Thread(target=self._run, name="availability", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start counting; the watches are started by whoever built them."""
        self._thread.start()
        self.kick()

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called from the availability thread whenever a profile's counts change."""
        self._listeners.append(listener)

    def kick(self) -> None:
        """Something the counts depend on changed: recompute soon (coalesced)."""
        self._dirty.set()

    # -- reading -----------------------------------------------------------------------------
    def current(self, preset: Preset | None = None) -> GpuAvailability:
        """The counts; with a preset, only boxes whose CPU and memory also fit count."""
        if preset is None:
            return self._current
        return self._compute(self._observed, self.settings.preset(preset))

    def body(self, preset: Preset | None = None) -> Body:
        """The counts as a response body; without a preset, made once per change."""
        if preset is None:
            return self._body
        return body(self.current(preset).model_dump_json().encode())

    def profile(self, name: str) -> ProfileAvailability | None:
        return self._current.profile(name)

    def cluster(self, pods: Iterable[str]) -> Cluster | None:
        """One consistent reading of the nodes and of what bound pods use, with which of
        the ``pods`` (uids) that use counts; None while the cluster cannot be read."""
        if not self.enabled or self._reason() is not None:
            return None
        node_cache, pod_cache = self._counted()
        with node_cache.paused(), pod_cache.paused(), self._totals_lock:
            nodes, usage = node_cache.all(), self._totals.usage()
            placed = self._totals.placed(pods)
        return Cluster(nodes, usage, placed, self._runtime_classes_by_name())

    def forbidden(self) -> bool:
        """Whether the cluster-wide reads are refused, which lasts until an operator grants
        them, unlike a watch that is loading or cannot reach the apiserver."""
        return any(_refused(informer) for informer in self.informers)

    def holding(self, resource: str) -> list[Obj]:
        """The pods that are not boxes holding some ``resource``; none while the cluster
        cannot be read."""
        if not self.enabled or self._reason() is not None:
            return []
        with self._totals_lock:
            return capacity.holding(self._totals.holding_devices(), resource)

    def on_nodes_of(self, profile: GpuProfileConfig, pods: list[Obj]) -> list[str]:
        """``namespace/name`` of those of ``pods`` bound to a node the profile's boxes
        could use. Only the pods' own nodes are looked at: there are few of them."""
        if self._nodes is None:
            return []
        nodes = [self._nodes.get(name) for name in {p.get("nodeName") for p in pods} if name]
        where = capacity.placement(profile, self._runtime_classes_by_name())
        eligible, _ = capacity.eligible_nodes(profile, where, [n for n in nodes if n is not None])
        return capacity.pod_names(pods, {capacity.node_name(n) for n in eligible})

    def _counted(self) -> tuple[Informer, Informer]:
        """The node and pod caches, which exist while availability is counted."""
        if self._nodes is None or self._pods is None:
            raise RuntimeError("availability is not counted: no node or pod watch")
        return self._nodes, self._pods

    def _runtime_classes_by_name(self) -> dict[str, Obj]:
        runtime_classes = self._runtime_classes.all() if self._runtime_classes else []
        return {rc["metadata"]["name"]: rc for rc in runtime_classes}

    # -- running totals ----------------------------------------------------------------------
    def _pod_changed(self, old: Obj | None, new: Obj | None) -> None:
        with self._totals_lock:
            if old is not None:
                self._totals.remove_pod(old)
            if new is not None:
                self._totals.put_pod(new)

    def _node_changed(self, old: Obj | None, new: Obj | None) -> None:
        with self._totals_lock:
            if old is not None:
                self._totals.remove_node(old)
            if new is not None:
                self._totals.put_node(new)

    def recount(self) -> list[capacity.Disagreement]:
        """Count both tables afresh from the cached nodes and pods and compare; on any
        difference warn once per figure, count it and adopt the recount. The differences."""
        if not self.informers:
            return []
        node_cache, pod_cache = self._counted()
        with node_cache.paused(), pod_cache.paused(), self._totals_lock:
            nodes, pods = node_cache.all(), pod_cache.all()
            kept = self._totals.figures()
        # Counted outside the locks: the watches go on meanwhile, and the copies above
        # are of one moment.
        found = capacity.disagreements(kept, capacity.count(nodes, pods))
        METRICS.availability_recounts.inc()
        if not found:
            return found
        for wrong in found:
            METRICS.availability_disagreements.labels(wrong.table).inc()
            log.warning(
                "availability totals disagree with a recount; adopting the recount",
                extra={
                    "table": wrong.table,
                    "node": wrong.node,
                    "resource": wrong.resource,
                    "kept": str(wrong.kept),
                    "counted": str(wrong.counted),
                },
            )
        with node_cache.paused(), pod_cache.paused(), self._totals_lock:
            self._totals = capacity.Totals.of(node_cache.all(), pod_cache.all())
        self.kick()
        return found

    # -- computing ---------------------------------------------------------------------------
    def _reason(self, informers: tuple[Informer, ...] | None = None) -> str | None:
        """Why the counts cannot be known now, or None."""
        for informer in self.informers if informers is None else informers:
            if informer.synced.is_set():
                continue
            failure = informer.failure
            if _refused(informer):
                return FORBIDDEN.format(kind=informer.kind)
            if failure is not None:
                return UNREACHABLE.format(kind=informer.kind, error=type(failure).__name__)
            return LOADING
        return None

    def _published(self) -> devices.Published | str:
        """What the DRA watches hold, or why they cannot be read (only while enabled)."""
        reason = self._reason(self.device_informers)
        if reason is not None:
            return reason
        slices, claims, classes = self.device_informers
        return devices.Published(slices.all(), claims.all(), classes.all())

    def _observe(self) -> _Observed:
        if not self.enabled:
            return _Observed(at=datetime.now(UTC), reason=DISABLED)
        reason = self._reason()
        if reason is not None:
            return _Observed(at=datetime.now(UTC), reason=reason)
        node_cache, _ = self._counted()
        return _Observed(
            at=datetime.now(UTC),
            nodes=node_cache.all(),
            usage=self._usage(),
            runtime_classes=self._runtime_classes_by_name(),
            published=self._published(),
        )

    def _usage(self) -> dict[str, capacity.Usage]:
        with self._totals_lock:
            return self._totals.usage()

    def _compute(
        self, observed: _Observed, preset: PresetSettings | None = None
    ) -> GpuAvailability:
        profiles = self.settings.gpu.profiles if self.settings.gpu.enabled else []
        waiting = self._waiting()
        if observed.reason is not None:
            return capacity.unknown(profiles, observed.reason, waiting, observed.at)
        counted = capacity.availability(
            profiles,
            observed.nodes,
            observed.usage,
            waiting,
            observed.at,
            preset,
            observed.runtime_classes,
        )
        return devices.with_devices(
            profiles,
            counted,
            observed.published,
            observed.nodes,
            observed.runtime_classes,
            self._matcher,
            observed.usage,
            preset,
        )

    def _checked_recount(self) -> None:
        # Before the first lists, there is nothing to count yet.
        if not self.informers or self._reason() is not None:
            return
        try:
            self.recount()
        except Exception:
            log.exception("availability recount failed")

    def refresh(self) -> bool:
        """Recompute now; True when any profile's counts changed, or which pods that are
        not boxes hold devices where (waiting boxes name them)."""
        observed = self._observe()
        computed = self._compute(observed)
        others = self._others_holding()
        changed = computed.profiles != self._current.profiles or others != self._others
        self._observed, self._current, self._others = observed, computed, others
        self._body = body(computed.model_dump_json().encode())
        return changed

    def _others_holding(self) -> frozenset[tuple[str, str, str]]:
        """(namespace, name, node) of every pod that is not a box's and holds a device: one
        may take a device over as another gives it back, the counts staying the same."""
        with self._totals_lock:
            pods = self._totals.holding_devices()
        return frozenset(
            (
                str(p["metadata"].get("namespace")),
                str(p["metadata"].get("name")),
                str(p["nodeName"]),
            )
            for p in pods
            if not p.get("box")
        )

    def _run(self) -> None:
        recount_at = time.monotonic() + RECOUNT_SECONDS
        while not self._stop.is_set():
            self._dirty.wait(max(recount_at - time.monotonic(), 0))
            if self._stop.is_set():
                return
            if time.monotonic() >= recount_at:
                recount_at = time.monotonic() + RECOUNT_SECONDS
                self._checked_recount()
            if not self._dirty.is_set():
                continue
            # Wait a moment so that the rest of a burst lands in the same computation.
            if self._stop.wait(COALESCE_SECONDS):
                return
            self._dirty.clear()
            try:
                changed = self.refresh()
            except Exception:
                log.exception("availability computation failed")
                continue
            if not changed:
                continue
            for listener in self._listeners:
                try:
                    listener()
                except Exception:
                    log.exception("availability listener failed")


def _refused(informer: Informer) -> bool:
    """Whether the informer has not loaded because its reads are not allowed."""
    failure = informer.failure
    return not informer.synced.is_set() and failure is not None and status_of(failure) in (401, 403)
