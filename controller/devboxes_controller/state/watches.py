"""Every watch the controller keeps, declared once in one table, and the set of them one
process builds from it at start.

Each row is one shared list-then-watch (:class:`.cache.Informer`): its kind and scope,
the list call (``k8s.kinds``), what its cache keeps of each object (``slim``), what it is
indexed by, who reads it, and the settings under which it exists. :class:`Watches` builds
the rows the settings call for, once, and hands the same informers to the box store and
to availability, which subscribe to them and read them but never build one. As in
KubeSpawner's reflectors, one watch per kind serves every reader.

In short (``WATCHES`` below is the source; ``slim`` names each strip):

- deployments, replicasets (only those failing to create their pod), pods, services,
  persistentvolumeclaims: the box namespace's managed objects, indexed by box, read by
  the status, the verbs, the reconciler, the device line; always.
- events: every Event of the box namespace, indexed by the box of its object; the status;
  always.
- resourceclaimtemplates, resourceclaims: the box namespace's managed objects, indexed by
  box; repair, and a DRA box's allocated devices; while some profile uses DRA.
- nodes, pods (all namespaces): the cluster, feeding availability's running totals; the
  counts and the gates; while availability is counted.
- runtimeclasses: the cluster; the counts and the gates; while availability is counted
  and some profile names a RuntimeClass.
- resourceslices: the cluster; the free DRA devices, and the product of a DRA box's
  device; while availability is counted or some profile uses DRA.
- resourceclaims (all namespaces), deviceclasses: the cluster; the free DRA devices;
  while availability is counted.
- configmaps: the one ConfigMap of ended sessions in the box namespace; always.
- bookings: the one ConfigMap of bookings in the box namespace; the line, extend, the
  bookings' keeper and the API; always.
- usage: the day records of GPU usage in the box namespace; the usage recorder, the
  reports and the budgets; always.

"Managed" is the managed-object label selector; "availability is counted" is
``Settings.counts_devices`` (``availability.enabled`` and GPUs enabled). ``/ready`` waits
for the namespace watches only: a controller that may not read the cluster still serves.
The ConfigMap of ended sessions is built from its row by the ended sessions
(``ended_sessions``), which start and stop it with their writer, and which a replica's
sign-outs also run alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..box import naming
from ..box.status import FAILED_CREATE
from ..config.settings import Settings
from ..k8s import kinds
from ..k8s.kinds import Kind
from ..k8s.kube import ApiClient, Apis, apis
from ..placement.usage_ledger import SELECTOR as USAGE_SELECTOR
from . import slim
from .bookings import BOOKINGS_CONFIGMAP
from .cache import BoxOf, Informer, Keep, OnChange, Strip

Condition = Callable[[Settings], bool]


def always(settings: Settings) -> bool:
    return True


def uses_dra(settings: Settings) -> bool:
    """Some profile is of DRA devices."""
    return settings.gpu.uses_dra


def counts_devices(settings: Settings) -> bool:
    """Availability is counted: turned on, and GPUs enabled."""
    return settings.counts_devices


def counts_runtime_classes(settings: Settings) -> bool:
    """Availability is counted and some profile names a RuntimeClass."""
    return settings.counts_devices and any(p.runtime_class_name for p in settings.gpu.profiles)


def reads_devices(settings: Settings) -> bool:
    """Availability is counted (free devices), or some profile uses DRA (a box's device)."""
    return settings.counts_devices or settings.gpu.uses_dra


@dataclass(frozen=True)
class Watch:
    """One row of the table. ``name`` is the cache's name in logs, metrics, readiness and
    availability's reasons; ``cluster`` whether it covers every namespace (objects keyed
    ``namespace/name``) rather than the box namespace; ``box_of`` what it indexes objects
    by, when by box; ``ready`` whether ``/ready`` waits for it."""

    name: str
    kind: Kind
    cluster: bool
    strip: Strip | None
    readers: str
    when: Condition = always
    keep: Keep | None = None
    box_of: BoxOf | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    ready: bool = True

    def informer(self, apis: Apis, namespace: str) -> Informer:
        """A new, unstarted informer of this watch in the box ``namespace``."""
        return Informer(
            self.name,
            self.kind.lister(apis, all_namespaces=self.cluster),
            None if self.cluster else namespace,
            box_of=self.box_of,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            strip=self.strip,
            keep=self.keep,
        )


def _box(
    name: str,
    kind: Kind,
    strip: Strip,
    readers: str,
    when: Condition = always,
    keep: Keep | None = None,
) -> Watch:
    """A watch of the box namespace's managed objects of one kind, indexed by box."""
    return Watch(
        name,
        kind,
        False,
        strip,
        readers,
        when,
        keep=keep,
        box_of=naming.box_name_of,
        label_selector=naming.MANAGED_SELECTOR,
    )


def _cluster(name: str, kind: Kind, strip: Strip, readers: str, when: Condition) -> Watch:
    """A cluster-wide watch of availability's: ``/ready`` does not wait for it."""
    return Watch(name, kind, True, strip, readers, when, ready=False)


DEPLOYMENTS = _box(
    "deployments",
    kinds.DEPLOYMENTS,
    slim.deployment,
    "status, lifecycle, reconciler, gates, volumes",
)
REPLICASETS = _box(
    "replicasets", kinds.REPLICASETS, slim.replicaset, "status", keep=slim.failing_replicaset
)
PODS = _box("pods", kinds.PODS, slim.pod, "status, the device line")
SERVICES = _box("services", kinds.SERVICES, slim.service, "status, lifecycle, reconciler")
PERSISTENT_VOLUME_CLAIMS = _box(
    "persistentvolumeclaims",
    kinds.PERSISTENT_VOLUME_CLAIMS,
    slim.persistent_volume_claim,
    "status, lifecycle, volumes",
)
# Events carry no box label: indexed by the box of the object they are about. Only the
# ones status reads are watched, pod creations a ReplicaSet was refused; the apiserver
# leaves out the others (several per box start), which the cache would hold for an hour.
EVENTS = Watch(
    "events",
    kinds.EVENTS,
    False,
    slim.event,
    "status",
    box_of=naming.box_of_event,
    field_selector=f"involvedObject.kind=ReplicaSet,reason={FAILED_CREATE}",
)
# The kubelets' reports of a pod's volumes they could not prepare: the mount retry's.
FAILED_MOUNT = "FailedMount"
MOUNT_REPORTS = Watch(
    "events (failed mounts)",
    kinds.EVENTS,
    False,
    slim.mount_report,
    "the mount retry",
    field_selector=f"involvedObject.kind=Pod,reason={FAILED_MOUNT}",
    ready=False,
)
CLAIM_TEMPLATES = _box(
    "resourceclaimtemplates",
    kinds.RESOURCE_CLAIM_TEMPLATES,
    slim.claim_template,
    "lifecycle, reconciler",
    uses_dra,
)
# Made by Kubernetes from a box's template, with the template's box labels.
RESOURCE_CLAIMS = _box(
    "resourceclaims",
    kinds.RESOURCE_CLAIMS,
    slim.resource_claim,
    "status (a DRA box's allocated devices)",
    uses_dra,
)
NODES = _cluster("nodes", kinds.NODES, slim.node, "availability, gates", counts_devices)
CLUSTER_PODS = _cluster(
    "pods (all namespaces)", kinds.PODS, slim.cluster_pod, "availability, gates", counts_devices
)
RUNTIME_CLASSES = _cluster(
    "runtimeclasses",
    kinds.RUNTIME_CLASSES,
    slim.runtime_class,
    "availability, gates",
    counts_runtime_classes,
)
# One watch of the published devices for the counts and for the box store, which reports
# the product and memory of a DRA box's device.
RESOURCE_SLICES = _cluster(
    "resourceslices",
    kinds.RESOURCE_SLICES,
    slim.resource_slice,
    "availability, status (a DRA box's device)",
    reads_devices,
)
CLUSTER_CLAIMS = _cluster(
    "resourceclaims (all namespaces)",
    kinds.RESOURCE_CLAIMS,
    slim.held_claim,
    "availability",
    counts_devices,
)
DEVICE_CLASSES = _cluster(
    "deviceclasses", kinds.DEVICE_CLASSES, slim.device_class, "availability", counts_devices
)
# The one ConfigMap in which every replica records the dashboard sessions ended.
ENDED_SESSIONS_CONFIGMAP = "devboxes-ended-sessions"
ENDED_SESSIONS = Watch(
    "configmaps",
    kinds.CONFIGMAPS,
    False,
    None,
    "ended sessions",
    field_selector=f"metadata.name={ENDED_SESSIONS_CONFIGMAP}",
)

BOOKINGS = Watch(
    "bookings",
    kinds.CONFIGMAPS,
    False,
    None,
    "the line, extend, the bookings' keeper, the API",
    field_selector=f"metadata.name={BOOKINGS_CONFIGMAP}",
)

# The day records of GPU usage, which the leader writes and every replica reports from.
USAGE = Watch(
    "usage",
    kinds.CONFIGMAPS,
    False,
    None,
    "the usage recorder, reports, budgets",
    label_selector=USAGE_SELECTOR,
    ready=False,
)

# The namespace's box objects, whose changes a box's status is derived from.
BOX_WATCHES = (
    DEPLOYMENTS,
    REPLICASETS,
    PODS,
    SERVICES,
    PERSISTENT_VOLUME_CLAIMS,
    EVENTS,
    CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
)
# Availability's: the nodes and what pods use, which it counts from.
COUNTING = (NODES, CLUSTER_PODS, RUNTIME_CLASSES)
# Availability's free DRA devices, apart from the counting: a cluster that does not serve
# DRA, or a controller that may not read it, still has its nodes counted.
DEVICES = (RESOURCE_SLICES, CLUSTER_CLAIMS, DEVICE_CLASSES)
# Built and run by the ended sessions themselves.
OWN = (ENDED_SESSIONS,)
WATCHES: tuple[Watch, ...] = (
    *BOX_WATCHES,
    BOOKINGS,
    USAGE,
    MOUNT_REPORTS,
    *COUNTING,
    *DEVICES,
    *OWN,
)


class Watches:
    """The shared watches of one process: the rows of ``WATCHES`` (but the ended
    sessions') that ``settings`` call for, built once. Started and stopped together."""

    def __init__(self, settings: Settings, api: ApiClient) -> None:
        groups = apis(api)
        self._informers = {
            watch.name: watch.informer(groups, settings.namespace)
            for watch in WATCHES
            if watch not in OWN and watch.when(settings)
        }

    def get(self, watch: Watch) -> Informer | None:
        """The watch's informer; None when the settings do not call for it."""
        return self._informers.get(watch.name)

    def __getitem__(self, watch: Watch) -> Informer:
        return self._informers[watch.name]

    def __contains__(self, watch: Watch) -> bool:
        return watch.name in self._informers

    def __iter__(self) -> Iterator[Informer]:
        return iter(self._informers.values())

    def of(self, watches: tuple[Watch, ...]) -> tuple[Informer, ...]:
        """The informers of those ``watches`` that exist, in their order."""
        return tuple(i for i in (self.get(w) for w in watches) if i is not None)

    def ready(self) -> tuple[Informer, ...]:
        """The informers ``/ready`` waits for."""
        return self.of(tuple(w for w in WATCHES if w.ready))

    def on_box_change(self, on_change: OnChange) -> None:
        """Call ``on_change`` with each box whose objects one of the box watches changed."""
        for informer in self.of(BOX_WATCHES):
            informer.subscribe(on_change=on_change)

    def start(self) -> None:
        for informer in self:
            informer.start()

    def stop(self) -> None:
        for informer in self:
            informer.stop()
