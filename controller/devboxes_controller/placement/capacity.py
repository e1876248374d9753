"""How many boxes of each GPU profile the cluster could start now, judged as the scheduler
would. Pure: plain node and pod dicts in, wire models and sentences out.

A node is eligible for a profile when it is Ready, schedulable (not cordoned), carries
every label of the profile's nodeSelector, has no NoSchedule/NoExecute taint the
profile does not tolerate, and advertises at least ``count`` units of the
profile's resource. The profile's RuntimeClass counts too: admission adds its
``scheduling`` nodeSelector and tolerations to every pod, and refuses every pod when
it does not exist. Units are whatever the device plugin advertises: whole boards,
MIG slices or time-slices all count the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from devboxes_sdk.models import GpuAvailability, ProfileAvailability

from ..box.naming import LABEL_BOX
from ..config.boxes import PresetSettings
from ..config.formats import quantity_value
from ..config.gpu import GpuProfileConfig
from ..k8s.kube import Obj

Usage = dict[str, Decimal]

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# The pod count a node accepts is a resource of its own in the scheduler's eyes.
PODS = "pods"

NO_RUNTIME = "The container runtime this profile needs is not installed on the cluster"
NO_SELECTOR_MATCH = "No node matches this profile's selector"
NONE_READY = "No node of this profile is Ready and schedulable"
TAINTED = "Every node of this profile has a taint the profile does not tolerate"
NOT_ADVERTISED = "No node of this profile advertises {resource}"
TOO_FEW = "No node of this profile has {count} {resource} (the most on one node is {most})"
# Free DRA devices are in ResourceSlices and claims, which this count does not read.
DRA_NOT_COUNTED = "Free devices of DRA profiles are not counted"


# -- ingest: keep only what the computation reads ---------------------------------------------


def _quantity(value: object) -> Decimal:
    """A quantity as a number; one this module cannot read counts as nothing."""
    try:
        return quantity_value(str(value))
    except (ValueError, ArithmeticError):
        return Decimal(0)


def _add(total: Usage, requests: Mapping[str, object]) -> None:
    for resource, value in requests.items():
        total[resource] = total.get(resource, Decimal(0)) + _quantity(value)


def _requests(container: Obj) -> Mapping[str, object]:
    return ((container.get("resources") or {}).get("requests")) or {}


def pod_requests(spec: Obj) -> Usage:
    """What a pod takes from its node, as the scheduler adds it up.

    Containers and restartable (sidecar) init containers run together, so they add up;
    each ordinary init container runs alone after the sidecars declared before it, so
    only the largest such moment counts. The pod's overhead comes on top.
    """
    total: Usage = {}
    for container in spec.get("containers") or []:
        _add(total, _requests(container))
    sidecars: Usage = {}
    peak: Usage = {}
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            _add(total, _requests(container))
            _add(sidecars, _requests(container))
            continue
        moment = dict(sidecars)
        _add(moment, _requests(container))
        for resource, value in moment.items():
            peak[resource] = max(peak.get(resource, Decimal(0)), value)
    for resource, value in peak.items():
        total[resource] = max(total.get(resource, Decimal(0)), value)
    _add(total, spec.get("overhead") or {})
    return total


def _uid(metadata: Obj) -> Obj:
    """The uid, which the running totals key each object by, when the object has one."""
    return {"uid": metadata["uid"]} if metadata.get("uid") else {}


def strip_pod(pod: Obj) -> Obj:
    """The few fields of a pod that capacity needs, with its requests already summed;
    ``box`` only for a box's pod, which a waiting box does not name as holding devices."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    stripped: Obj = {
        "metadata": {
            "name": metadata.get("name"),
            "namespace": metadata.get("namespace"),
            "resourceVersion": metadata.get("resourceVersion"),
            **_uid(metadata),
        },
        "nodeName": spec.get("nodeName"),
        "phase": (pod.get("status") or {}).get("phase"),
        "requests": {k: str(v) for k, v in pod_requests(spec).items()},
    }
    if LABEL_BOX in (metadata.get("labels") or {}):
        stripped["box"] = True
    return stripped


def strip_node(node: Obj) -> Obj:
    """The fields of a node that eligibility and capacity read."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "metadata": {
            "name": metadata.get("name"),
            "resourceVersion": metadata.get("resourceVersion"),
            **_uid(metadata),
            "labels": dict(metadata.get("labels") or {}),
        },
        "spec": {
            "unschedulable": bool(spec.get("unschedulable")),
            "taints": [
                {k: t[k] for k in ("key", "value", "effect") if t.get(k) is not None}
                for t in spec.get("taints") or []
            ],
        },
        "status": {
            "allocatable": dict(status.get("allocatable") or {}),
            "capacity": dict(status.get("capacity") or {}),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status")}
                for c in status.get("conditions") or []
                if c.get("type") == "Ready"
            ],
        },
    }


def strip_runtime_class(runtime_class: Obj) -> Obj:
    """The name and the scheduling constraints admission adds to a RuntimeClass's pods."""
    metadata = runtime_class.get("metadata") or {}
    scheduling = runtime_class.get("scheduling") or {}
    return {
        "metadata": {
            "name": metadata.get("name"),
            "resourceVersion": metadata.get("resourceVersion"),
        },
        "scheduling": {
            "nodeSelector": dict(scheduling.get("nodeSelector") or {}),
            "tolerations": [
                {k: t[k] for k in ("key", "operator", "value", "effect") if t.get(k) is not None}
                for t in scheduling.get("tolerations") or []
            ],
        },
    }


def usage_by_node(pods: Iterable[Obj]) -> dict[str, Usage]:
    """Requests of every non-terminated pod bound to a node, summed per node (stripped pods)."""
    usage: dict[str, Usage] = {}
    for pod in pods:
        taken = pod_contribution(pod)
        if taken is not None:
            _apply(usage, taken, 1)
    return usage


# -- running totals: one watch event at a time ------------------------------------------------


@dataclass(frozen=True)
class Contribution:
    """What one object adds to its node's totals."""

    node: str
    amounts: Usage


def pod_contribution(pod: Obj) -> Contribution | None:
    """What a stripped pod takes from its node: its requests and one of the node's pod
    slots, from its binding until it ends; None before and after."""
    node = pod.get("nodeName")
    if not node or pod.get("phase") in TERMINATED_PHASES:
        return None
    amounts: Usage = {}
    _add(amounts, pod.get("requests") or {})
    amounts[PODS] = amounts.get(PODS, Decimal(0)) + 1
    return Contribution(node, amounts)


def node_contribution(node: Obj) -> Contribution:
    """What a stripped node offers: its allocatable resources."""
    amounts: Usage = {}
    _add(amounts, (node.get("status") or {}).get("allocatable") or {})
    return Contribution(node_name(node), amounts)


def _apply(totals: dict[str, Usage], contribution: Contribution, sign: int) -> None:
    """Add (sign 1) or take away (sign -1) a contribution. A figure back at zero is dropped,
    and so is a node left with none, so that totals built in any order compare equal."""
    total = totals.setdefault(contribution.node, {})
    for resource, amount in contribution.amounts.items():
        value = total.get(resource, Decimal(0)) + sign * amount
        if value:
            total[resource] = value
        else:
            total.pop(resource, None)
    if not total:
        del totals[contribution.node]


def _replace(
    contributions: dict[str, Contribution],
    totals: dict[str, Usage],
    uid: str,
    new: Contribution | None,
) -> None:
    old = contributions.pop(uid, None)
    if old is not None:
        _apply(totals, old, -1)
    if new is not None:
        contributions[uid] = new
        _apply(totals, new, 1)


def is_device(resource: str) -> bool:
    """Whether a resource is an extended one (a device): their names carry a domain,
    the built-in ones (cpu, memory, hugepages-2Mi, ...) do not."""
    return "/" in resource


def uid(obj: Obj) -> str:
    return str(obj["metadata"]["uid"])


class Totals:
    """Per node and resource, what the node offers (``allocatable``) and what its bound,
    non-terminated pods take (``used``, with the pod count under ``pods``).

    Each total is the sum of per-object contributions kept by uid. Putting an object
    replaces what its uid contributed before, so a change costs the same whatever the
    size of the cluster, and an object delivered twice (a relist re-reads every object)
    is counted once. Decimal arithmetic is exact: taking away what was added leaves no
    residue, so totals kept through any sequence of changes equal a recount.
    """

    def __init__(self) -> None:
        self.used: dict[str, Usage] = {}
        self.allocatable: dict[str, Usage] = {}
        self._pods: dict[str, Contribution] = {}
        self._nodes: dict[str, Contribution] = {}
        # The few pods that hold a device, so that naming them reads no other pod.
        self._holding_devices: dict[str, Obj] = {}

    @classmethod
    def of(cls, nodes: Iterable[Obj], pods: Iterable[Obj]) -> Totals:
        totals = cls()
        for node in nodes:
            totals.put_node(node)
        for pod in pods:
            totals.put_pod(pod)
        return totals

    def put_pod(self, pod: Obj) -> None:
        contribution = pod_contribution(pod)
        _replace(self._pods, self.used, uid(pod), contribution)
        if contribution is not None and any(map(is_device, contribution.amounts)):
            self._holding_devices[uid(pod)] = pod
        else:
            self._holding_devices.pop(uid(pod), None)

    def remove_pod(self, pod: Obj) -> None:
        _replace(self._pods, self.used, uid(pod), None)
        self._holding_devices.pop(uid(pod), None)

    def holding_devices(self) -> list[Obj]:
        """The bound, non-terminated pods that hold some device (extended resource)."""
        return list(self._holding_devices.values())

    def put_node(self, node: Obj) -> None:
        _replace(self._nodes, self.allocatable, uid(node), node_contribution(node))

    def remove_node(self, node: Obj) -> None:
        _replace(self._nodes, self.allocatable, uid(node), None)

    def placed(self, uids: Iterable[str]) -> frozenset[str]:
        """Those of these pods whose requests ``used`` counts."""
        return frozenset(u for u in uids if u in self._pods)

    def usage(self) -> dict[str, Usage]:
        """A copy of ``used`` that later changes leave alone."""
        return _copy(self.used)

    def figures(self) -> Figures:
        """Copies of both tables, to compare with a recount."""
        return Figures(_copy(self.used), _copy(self.allocatable))


def _copy(table: Mapping[str, Usage]) -> dict[str, Usage]:
    return {node: dict(total) for node, total in table.items()}


@dataclass(frozen=True)
class Figures:
    """Both tables of a :class:`Totals` at one moment."""

    used: Mapping[str, Usage]
    allocatable: Mapping[str, Usage]


def count(nodes: Iterable[Obj], pods: Iterable[Obj]) -> Figures:
    """Both tables summed afresh from every object, by name rather than by uid."""
    allocatable: dict[str, Usage] = {}
    for node in nodes:
        _apply(allocatable, node_contribution(node), 1)
    return Figures(usage_by_node(pods), allocatable)


@dataclass(frozen=True)
class Disagreement:
    """One figure the running totals had wrong: ``kept`` against the recount's ``counted``."""

    table: str
    node: str
    resource: str
    kept: Decimal
    counted: Decimal


def disagreements(kept: Figures, counted: Figures) -> list[Disagreement]:
    """Every node and resource whose two figures differ (a missing figure is zero)."""
    found = []
    tables = (
        ("used", kept.used, counted.used),
        ("allocatable", kept.allocatable, counted.allocatable),
    )
    for table, ours, theirs in tables:
        for node in sorted(set(ours) | set(theirs)):
            mine, other = ours.get(node, {}), theirs.get(node, {})
            for resource in sorted(set(mine) | set(other)):
                held, recounted = mine.get(resource, Decimal(0)), other.get(resource, Decimal(0))
                if held != recounted:
                    found.append(Disagreement(table, node, resource, held, recounted))
    return found


# -- eligibility -------------------------------------------------------------------------------


def node_name(node: Obj) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def node_ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_schedulable(node: Obj) -> bool:
    return not (node.get("spec") or {}).get("unschedulable")


def allocatable(node: Obj, resource: str) -> Decimal:
    return _quantity(((node.get("status") or {}).get("allocatable") or {}).get(resource, 0))


def selector_matches(node: Obj, selector: Mapping[str, str]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def tolerates(toleration: Mapping[str, Any], taint: Obj) -> bool:
    """The Kubernetes rule: effect (empty matches all), then key and value by operator."""
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return operator == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taints(node: Obj, tolerations: Sequence[Mapping[str, Any]]) -> list[Obj]:
    """The taints that keep a pod with these tolerations off the node."""
    return [
        taint
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in BLOCKING_EFFECTS
        and not any(tolerates(toleration, taint) for toleration in tolerations)
    ]


def describe_taint(taint: Obj) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


@dataclass(frozen=True)
class Placement:
    """Where a profile's pods may run once admitted: the profile's nodeSelector and
    tolerations plus its RuntimeClass's (``runtime_missing`` when the profile names a
    RuntimeClass that does not exist, so that every pod is refused)."""

    node_selector: Mapping[str, str]
    runtime_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    runtime_missing: bool = False

    def selects(self, node: Obj) -> bool:
        # Both must hold: admission refuses a pod whose nodeSelector contradicts its
        # RuntimeClass's, which no node can satisfy either.
        return selector_matches(node, self.node_selector) and selector_matches(
            node, self.runtime_selector
        )


def placement(profile: GpuProfileConfig, runtime_classes: Mapping[str, Obj]) -> Placement:
    """The profile's placement, given the cluster's RuntimeClasses by name."""
    own = tuple(t.to_kubernetes() for t in profile.tolerations)
    wanted = profile.runtime_class_name
    if wanted is None:
        return Placement(profile.node_selector, {}, own)
    runtime_class = runtime_classes.get(wanted)
    if runtime_class is None:
        return Placement(profile.node_selector, {}, own, runtime_missing=True)
    scheduling = runtime_class.get("scheduling") or {}
    return Placement(
        profile.node_selector,
        dict(scheduling.get("nodeSelector") or {}),
        own + tuple(scheduling.get("tolerations") or ()),
    )


def eligible_nodes(
    profile: GpuProfileConfig, where: Placement, nodes: Sequence[Obj]
) -> tuple[list[Obj], str | None]:
    """The nodes the profile's pods could land on, or none and the first filter that
    removed them all, as a sentence without node names."""
    if where.runtime_missing:
        return [], NO_RUNTIME
    matching = [n for n in nodes if where.selects(n)]
    if not matching:
        return [], NO_SELECTOR_MATCH
    usable = [n for n in matching if node_ready(n) and node_schedulable(n)]
    if not usable:
        return [], NONE_READY
    admitted = [n for n in usable if not untolerated_taints(n, where.tolerations)]
    if not admitted:
        return [], TAINTED
    resource = profile.resource_name
    if resource is None:
        return [], DRA_NOT_COUNTED
    offering = [n for n in admitted if allocatable(n, resource) > 0]
    if not offering:
        return [], NOT_ADVERTISED.format(resource=resource)
    fitting = [n for n in offering if allocatable(n, resource) >= profile.count]
    if not fitting:
        most = max(allocatable(n, resource) for n in offering)
        return [], TOO_FEW.format(count=profile.count, resource=resource, most=most)
    return fitting, None


# -- counting ----------------------------------------------------------------------------------


def _boxes_on_node(
    node: Obj, used: Usage, profile: GpuProfileConfig, preset: PresetSettings | None
) -> int:
    """How many more boxes of the profile fit on one node, given what is already used."""

    def room(resource: str, each: Decimal) -> int:
        free = allocatable(node, resource) - used.get(resource, Decimal(0))
        return max(int(free // each), 0)

    if profile.resource_name is None:
        return 0
    fits = room(profile.resource_name, Decimal(profile.count))
    if preset is not None:
        fits = min(
            fits,
            room("cpu", quantity_value(preset.cpu)),
            room("memory", quantity_value(preset.memory_request)),
            room(PODS, Decimal(1)),
        )
    return fits


def profile_availability(
    profile: GpuProfileConfig,
    nodes: Sequence[Obj],
    usage: Mapping[str, Usage],
    waiting: int,
    preset: PresetSettings | None = None,
    runtime_classes: Mapping[str, Obj] | None = None,
) -> ProfileAvailability:
    """``available``: boxes that could start now; ``capacity``: the same on an empty cluster.
    ``runtime_classes``: the cluster's RuntimeClasses by name."""
    if profile.is_dra:
        return ProfileAvailability(name=profile.name, waiting=waiting, reason=DRA_NOT_COUNTED)
    eligible, reason = eligible_nodes(profile, placement(profile, runtime_classes or {}), nodes)
    available = sum(
        _boxes_on_node(n, usage.get(node_name(n), {}), profile, preset) for n in eligible
    )
    capacity = sum(_boxes_on_node(n, {}, profile, preset) for n in eligible)
    return ProfileAvailability(
        name=profile.name,
        available=available,
        capacity=capacity,
        waiting=waiting,
        reason=reason,
    )


def availability(
    profiles: Sequence[GpuProfileConfig],
    nodes: Sequence[Obj],
    usage: Mapping[str, Usage],
    waiting: Mapping[str, int],
    observed_at: datetime,
    preset: PresetSettings | None = None,
    runtime_classes: Mapping[str, Obj] | None = None,
) -> GpuAvailability:
    return GpuAvailability(
        observed_at=observed_at,
        profiles=[
            profile_availability(p, nodes, usage, waiting.get(p.name, 0), preset, runtime_classes)
            for p in profiles
        ],
    )


def unknown(
    profiles: Sequence[GpuProfileConfig],
    reason: str,
    waiting: Mapping[str, int],
    observed_at: datetime,
) -> GpuAvailability:
    """Availability when the controller cannot see the cluster: counts null, with the reason."""
    return GpuAvailability(
        observed_at=observed_at,
        profiles=[
            ProfileAvailability(name=p.name, waiting=waiting.get(p.name, 0), reason=reason)
            for p in profiles
        ],
    )


def holding(pods: Iterable[Obj], resource: str) -> list[Obj]:
    """The stripped pods that are not boxes' (of any namespace), bound and not ended, that
    hold some ``resource``."""
    found = []
    for pod in pods:
        contribution = None if pod.get("box") else pod_contribution(pod)
        if contribution is not None and contribution.amounts.get(resource, Decimal(0)) > 0:
            found.append(pod)
    return found


def pod_names(pods: Iterable[Obj], nodes: Collection[str]) -> list[str]:
    """``namespace/name`` of the stripped pods bound to one of ``nodes``, sorted."""
    return sorted(
        f"{p['metadata'].get('namespace')}/{p['metadata'].get('name')}"
        for p in pods
        if p.get("nodeName") in nodes
    )
