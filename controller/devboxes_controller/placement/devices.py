"""Free devices of DRA profiles, counted from ResourceSlices and allocated ResourceClaims.
Pure: plain slice, claim, DeviceClass and node dicts in, counts and sentences out.

A published device is free when no claim's allocation names it (driver, pool, device),
it carries no NoSchedule/NoExecute device taint, and, for a partition of a partitionable
device, the counters it consumes still fit in its pool's shared counters once every
allocated partition took its own. A device serves a choice of a profile (its own device
class and selectors, or one of its alternatives) when every selector of the DeviceClass
and of the choice holds for it, evaluated with cel-python against the device as
Kubernetes shows it to CEL: ``device.driver``, ``device.attributes['<domain>'].<name>``
and ``device.capacity['<domain>'].<name>``. Kubernetes' ``quantity()``, ``semver()`` and
their ``compareTo``/``isGreaterThan``/``isLessThan`` are provided here; a selector that
needs anything else cannot be judged, and the profile's count is then unknown rather
than a guess.

One box takes ``count`` devices of one choice on one node, so each node's free devices
count separately. A profile with alternatives reports the first choice that has a free
device, as the scheduler tries them in order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from devboxes_sdk.models import GpuAvailability, ProfileAvailability

from ..config.boxes import PresetSettings
from ..config.formats import quantity_value
from ..config.gpu import DeviceAlternative, GpuProfileConfig
from ..k8s.kube import Obj
from . import capacity

if TYPE_CHECKING:
    from . import device_cel

Key = tuple[str, str, str]
# A pool's shared counter: (driver, pool, counter set, counter).
CounterKey = tuple[str, str, str, str]

BLOCKING_EFFECTS = capacity.BLOCKING_EFFECTS
# Devices that no node name ties to one node (allNodes or a nodeSelector) count together.
SHARED = ""

NO_CLASS = "DeviceClass {name} does not exist"
NO_DEVICE = "No published device matches this profile"
NOT_READ = "Free devices of DRA profiles are not counted"
UNKNOWN = (
    "Free devices of this profile are not counted: a selector of this profile or of its "
    "DeviceClass needs what the controller cannot evaluate"
)


# -- ingest: keep only what counting reads ------------------------------------------------------


def _metadata(obj: Obj, *extra: str) -> Obj:
    metadata = obj.get("metadata") or {}
    names = ("name", "namespace", "resourceVersion", "uid", *extra)
    return {k: metadata[k] for k in names if metadata.get(k) is not None}


def strip_slice(obj: Obj) -> Obj:
    """A ResourceSlice's pool, node and devices with their attributes, capacities, taints
    and counters: everything a selector or the counting reads."""
    spec = obj.get("spec") or {}
    devices = []
    for device in spec.get("devices") or []:
        kept: Obj = {"name": device.get("name")}
        for key in ("attributes", "capacity", "consumesCounters"):
            if device.get(key):
                kept[key] = device[key]
        taints = [
            {"effect": t.get("effect")}
            for t in device.get("taints") or []
            if t.get("effect") in BLOCKING_EFFECTS
        ]
        if taints:
            kept["taints"] = taints
        devices.append(kept)
    pool = spec.get("pool") or {}
    kept_spec: Obj = {
        "driver": spec.get("driver"),
        "pool": {"name": pool.get("name"), "generation": pool.get("generation") or 0},
        "devices": devices,
    }
    if spec.get("nodeName"):
        kept_spec["nodeName"] = spec["nodeName"]
    if spec.get("sharedCounters"):
        kept_spec["sharedCounters"] = spec["sharedCounters"]
    return {"metadata": _metadata(obj), "spec": kept_spec}


def strip_claim(obj: Obj) -> Obj:
    """The devices a ResourceClaim's allocation holds."""
    allocation = (obj.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    held = [
        {k: r.get(k) for k in ("driver", "pool", "device")}
        for r in results
        # Admin access looks at a device without taking it from anyone.
        if not r.get("adminAccess")
    ]
    return {"metadata": _metadata(obj), "devices": held}


def strip_device_class(obj: Obj) -> Obj:
    """A DeviceClass's selectors and the extended resource it serves pods by."""
    spec = obj.get("spec") or {}
    selectors = [
        str((s.get("cel") or {}).get("expression") or "") for s in spec.get("selectors") or []
    ]
    kept: Obj = {"selectors": [s for s in selectors if s]}
    if spec.get("extendedResourceName"):
        kept["extendedResourceName"] = spec["extendedResourceName"]
    return {"metadata": _metadata(obj, "creationTimestamp"), "spec": kept}


def held_devices(claims: Iterable[Obj]) -> set[Key]:
    """The devices allocated to any claim (stripped claims)."""
    return {
        (str(d.get("driver")), str(d.get("pool")), str(d.get("device")))
        for claim in claims
        for d in claim.get("devices") or []
    }


# -- the published devices ----------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    key: Key
    # The resourceVersion of its slice: a device is judged again only once it changed.
    version: str
    # The node that reaches it, or SHARED.
    node: str
    blocked: bool
    consumes: tuple[tuple[CounterKey, Decimal], ...]
    published: Obj = field(compare=False, repr=False)


@dataclass(frozen=True)
class Inventory:
    """Every device of the current generation of each pool, and each pool's counters."""

    devices: tuple[Device, ...]
    counters: Mapping[CounterKey, Decimal]


def _amounts(counters: Mapping[str, Any]) -> list[tuple[str, Decimal]]:
    found = []
    for name, value in (counters or {}).items():
        try:
            found.append((name, quantity_value(str((value or {}).get("value")))))
        except ValueError:
            continue
    return found


def inventory(slices: Iterable[Obj]) -> Inventory:
    """The devices of stripped slices. A pool's slices of an older generation than its
    newest are being replaced, and the scheduler ignores them too."""
    slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for item in slices:
        spec = item.get("spec") or {}
        pool_key = (str(spec.get("driver")), str((spec.get("pool") or {}).get("name")))
        generation = int((spec.get("pool") or {}).get("generation") or 0)
        newest[pool_key] = max(newest.get(pool_key, generation), generation)
    devices: list[Device] = []
    counters: dict[CounterKey, Decimal] = {}
    for item in sorted(slices, key=lambda s: str(s["metadata"].get("name"))):
        spec = item.get("spec") or {}
        driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
        if int((spec.get("pool") or {}).get("generation") or 0) != newest[(driver, pool)]:
            continue
        for counter_set in spec.get("sharedCounters") or []:
            for name, amount in _amounts(counter_set.get("counters") or {}):
                counters[(driver, pool, str(counter_set.get("name")), name)] = amount
        for device in spec.get("devices") or []:
            consumes = tuple(
                ((driver, pool, str(use.get("counterSet")), name), amount)
                for use in device.get("consumesCounters") or []
                for name, amount in _amounts(use.get("counters") or {})
            )
            devices.append(
                Device(
                    key=(driver, pool, str(device.get("name"))),
                    version=str(item["metadata"].get("resourceVersion") or ""),
                    node=str(spec.get("nodeName") or SHARED),
                    blocked=bool(device.get("taints")),
                    consumes=consumes,
                    published=device,
                )
            )
    return Inventory(tuple(devices), counters)


# -- matching -----------------------------------------------------------------------------------


class Matcher:
    """Evaluates selectors against devices, compiling each expression once and judging a
    device again only when its slice changed: counts are made on every change of the
    cluster, and published devices rarely change."""

    def __init__(self) -> None:
        # cel-python is loaded with the first selector judged, so a controller whose
        # profiles have none does not hold it (about 8 MiB).
        self._programs: device_cel.Programs | None = None
        self._verdicts: dict[tuple[str, Key, str], bool | None] = {}
        self._seen: set[tuple[Key, str]] = set()
        # The availability thread and requests with a preset count at the same time.
        self._lock = threading.Lock()

    def holds(self, expression: str, device: Device) -> bool | None:
        """Whether the selector holds for the device; None when it cannot be judged."""
        cached = (expression, device.key, device.version)
        with self._lock:
            if cached in self._verdicts:
                return self._verdicts[cached]
            verdict = self._judge(expression, device)
            self._verdicts[cached] = verdict
            return verdict

    def _judge(self, expression: str, device: Device) -> bool | None:
        if self._programs is None:
            from . import device_cel

            self._programs = device_cel.Programs()
        return self._programs.judge(expression, device.key[0], device.published)

    def keep_only(self, found: Inventory) -> None:
        """Forget the verdicts on devices no longer published as they were."""
        current = {(d.key, d.version) for d in found.devices}
        with self._lock:
            if current == self._seen:
                return
            self._seen = current
            self._verdicts = {k: v for k, v in self._verdicts.items() if (k[1], k[2]) in current}

    def matches(self, selectors: Sequence[str], device: Device) -> bool | None:
        """All selectors hold: True; one does not: False; else None (cannot be judged)."""
        judged: bool | None = True
        for expression in selectors:
            holds = self.holds(expression, device)
            if holds is False:
                return False
            if holds is None:
                judged = None
        return judged


# -- counting -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChoiceCount:
    """One choice of a profile: boxes it could serve now and on an empty cluster, the
    devices that match it, and whether any device could not be judged."""

    alternative: int
    available: int
    capacity: int
    matching: int
    unjudged: bool = False
    missing_class: str | None = None


def _fits(device: Device, left: Mapping[CounterKey, Decimal]) -> bool:
    return all(left.get(counter, Decimal(0)) >= amount for counter, amount in device.consumes)


def _take(device: Device, left: dict[CounterKey, Decimal]) -> None:
    for counter, amount in device.consumes:
        left[counter] = left.get(counter, Decimal(0)) - amount


@dataclass(frozen=True)
class Room:
    """How many more boxes a node's CPU, memory and pod slots take with a preset, now and
    on an empty cluster; None: no limit (no preset)."""

    now: int | None = None
    empty: int | None = None


# The nodes a profile's boxes may run on, by name.
Nodes = Mapping[str, Room]


def _boxes(
    matching: Sequence[Device],
    left: dict[CounterKey, Decimal],
    count: int,
    nodes: Nodes | None,
    now: bool,
) -> int:
    """Boxes of ``count`` devices each, node by node; a partition is taken only while its
    counters fit, the smallest first so that one large partition does not shut out many
    small ones."""
    by_node: dict[str, list[Device]] = {}
    for device in matching:
        by_node.setdefault(device.node, []).append(device)
    boxes = 0
    for devices in by_node.values():
        taken = 0
        for device in sorted(devices, key=lambda d: (sum(a for _, a in d.consumes), d.key)):
            if _fits(device, left):
                _take(device, left)
                taken += 1
        room = (nodes or {}).get(devices[0].node, Room())
        limit = room.now if now else room.empty
        boxes += taken // count if limit is None else min(taken // count, limit)
    return boxes


def count_choice(
    index: int,
    choice: DeviceAlternative,
    found: Inventory,
    held: set[Key],
    classes: Mapping[str, Obj],
    nodes: Nodes | None,
    matcher: Matcher,
) -> ChoiceCount:
    """``nodes``: the nodes the profile's pods may run on (None: any)."""
    device_class = classes.get(choice.device_class_name)
    if device_class is None:
        return ChoiceCount(index, 0, 0, 0, missing_class=choice.device_class_name)
    selectors = [*(device_class.get("spec") or {}).get("selectors", []), *choice.selectors]
    matching: list[Device] = []
    unjudged = False
    for device in found.devices:
        verdict = matcher.matches(selectors, device)
        if verdict is None:
            unjudged = True
        if verdict and (nodes is None or device.node == SHARED or device.node in nodes):
            matching.append(device)
    return _counted(index, matching, found, held, choice.count, unjudged, nodes)


def _counted(
    index: int,
    matching: list[Device],
    found: Inventory,
    held: set[Key],
    count: int,
    unjudged: bool,
    nodes: Nodes | None,
) -> ChoiceCount:
    # What allocated devices consume is gone from their pools, whatever they match.
    left = dict(found.counters)
    for device in found.devices:
        if device.key in held:
            _take(device, left)
    free = [d for d in matching if d.key not in held and not d.blocked]
    return ChoiceCount(
        alternative=index,
        available=_boxes(free, left, count, nodes, now=True),
        capacity=_boxes(
            [d for d in matching if not d.blocked], dict(found.counters), count, nodes, now=False
        ),
        matching=len(matching),
        unjudged=unjudged,
    )


def _room(node: Obj, used: capacity.Usage, preset: PresetSettings) -> int:
    def fits(resource: str, each: Decimal) -> int:
        free = capacity.allocatable(node, resource) - used.get(resource, Decimal(0))
        return max(int(free // each), 0)

    return min(
        fits("cpu", quantity_value(preset.cpu)),
        fits("memory", quantity_value(preset.memory_request)),
        fits(capacity.PODS, Decimal(1)),
    )


def eligible_nodes(
    profile: GpuProfileConfig,
    nodes: Sequence[Obj],
    runtime_classes: Mapping[str, Obj],
    usage: Mapping[str, capacity.Usage] | None = None,
    preset: PresetSettings | None = None,
) -> dict[str, Room]:
    """The nodes a box of the profile may run on: Ready, schedulable, selected and with
    every blocking taint tolerated; with a preset, how many boxes its CPU and memory
    requests and one pod each leave room for."""
    where = capacity.placement(profile, runtime_classes)
    if where.runtime_missing:
        return {}
    found = {}
    for node in nodes:
        if not (
            where.selects(node)
            and capacity.node_ready(node)
            and capacity.node_schedulable(node)
            and not capacity.untolerated_taints(node, where.tolerations)
        ):
            continue
        name = capacity.node_name(node)
        if preset is None:
            found[name] = Room()
        else:
            used = (usage or {}).get(name, {})
            found[name] = Room(now=_room(node, used, preset), empty=_room(node, {}, preset))
    return found


def count_profile(
    profile: GpuProfileConfig,
    found: Inventory,
    held: set[Key],
    classes: Mapping[str, Obj],
    nodes: Nodes | None,
    matcher: Matcher,
) -> list[ChoiceCount]:
    """Every choice of a DRA profile, in the order the scheduler tries them."""
    return [
        count_choice(i, choice, found, held, classes, nodes, matcher)
        for i, choice in enumerate(profile.choices())
    ]


def profile_entry(name: str, counts: Sequence[ChoiceCount], waiting: int) -> ProfileAvailability:
    """The profile's availability: the first choice with a free device (or, with none
    free, the first that has any), unknown when a choice tried before it or it itself
    holds a device no selector could be judged on."""
    for choice in counts:
        if choice.unjudged:
            return ProfileAvailability(name=name, waiting=waiting, reason=UNKNOWN)
        if choice.available > 0:
            return ProfileAvailability(
                name=name, available=choice.available, capacity=choice.capacity, waiting=waiting
            )
    usable = next((c for c in counts if c.capacity > 0), None)
    if usable is not None:
        return ProfileAvailability(
            name=name, available=0, capacity=usable.capacity, waiting=waiting
        )
    missing = next((c.missing_class for c in counts if c.missing_class), None)
    reason = NO_CLASS.format(name=missing) if missing else NO_DEVICE
    return ProfileAvailability(name=name, available=0, capacity=0, waiting=waiting, reason=reason)


# -- the extended-resource bridge ---------------------------------------------------------------


def serving_class(classes: Mapping[str, Obj], resource: str) -> str | None:
    """The DeviceClass that serves pods requesting ``resource``: of several, the newest,
    then the first by name, as the scheduler picks."""
    serving = [
        (str(c["metadata"].get("creationTimestamp") or ""), name)
        for name, c in classes.items()
        if (c.get("spec") or {}).get("extendedResourceName") == resource
    ]
    if not serving:
        return None
    newest = max(created for created, _ in serving)
    return min(name for created, name in serving if created == newest)


def bridged(
    profile: GpuProfileConfig,
    base: ProfileAvailability,
    found: Inventory,
    held: set[Key],
    classes: Mapping[str, Obj],
    nodes: Nodes,
    matcher: Matcher,
) -> ProfileAvailability:
    """An extended-resource profile whose resource a DeviceClass serves: the devices of
    that class count beside what nodes advertise, since no node advertises them."""
    resource = profile.resource_name
    name = serving_class(classes, resource) if resource else None
    if name is None:
        return base
    choice = DeviceAlternative(device_class_name=name, count=profile.count)
    counted = count_choice(0, choice, found, held, classes, nodes, matcher)
    if counted.unjudged:
        return ProfileAvailability(name=profile.name, waiting=base.waiting, reason=UNKNOWN)
    if counted.capacity == 0:
        return base
    available = (base.available or 0) + counted.available
    total = (base.capacity or 0) + counted.capacity
    return ProfileAvailability(
        name=profile.name, available=available, capacity=total, waiting=base.waiting
    )


# -- availability -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """The devices DRA drivers publish, the claims that hold some, and the DeviceClasses,
    as the watches keep them (stripped)."""

    slices: Sequence[Obj]
    claims: Sequence[Obj]
    classes: Sequence[Obj]


def with_devices(
    profiles: Sequence[GpuProfileConfig],
    counted: GpuAvailability,
    published: Published | str,
    nodes: Sequence[Obj],
    runtime_classes: Mapping[str, Obj],
    matcher: Matcher,
    usage: Mapping[str, capacity.Usage] | None = None,
    preset: PresetSettings | None = None,
) -> GpuAvailability:
    """``counted`` as :mod:`.capacity` makes it from nodes and pods, with DRA profiles
    counted from their devices and extended-resource profiles that a DeviceClass serves
    counted with that class's devices. ``published`` is the reason when the devices
    cannot be read: DRA profiles then say it, the others are counted from nodes alone.
    With a preset, a box counts on a node only where its CPU and memory also fit."""
    if isinstance(published, str):
        return counted.model_copy(
            update={
                "profiles": [
                    entry.model_copy(update={"reason": f"{NOT_READ}: {published}"})
                    if profile.is_dra
                    else entry
                    for profile, entry in zip(profiles, counted.profiles, strict=True)
                ]
            }
        )
    found = inventory(published.slices)
    matcher.keep_only(found)
    held = held_devices(published.claims)
    classes = {str(c["metadata"]["name"]): c for c in published.classes}
    entries = []
    for profile, entry in zip(profiles, counted.profiles, strict=True):
        if profile.is_dra:
            where = eligible_nodes(profile, nodes, runtime_classes, usage, preset)
            counts = count_profile(profile, found, held, classes, where, matcher)
            entries.append(profile_entry(profile.name, counts, entry.waiting))
        elif profile.resource_name and serving_class(classes, profile.resource_name):
            where = eligible_nodes(profile, nodes, runtime_classes, usage, preset)
            entries.append(bridged(profile, entry, found, held, classes, where, matcher))
        else:
            entries.append(entry)
    return counted.model_copy(update={"profiles": entries})
