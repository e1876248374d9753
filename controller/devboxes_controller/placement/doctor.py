"""The GPU doctor: does the cluster meet every prerequisite of the configured profiles?

:func:`gather` reads what the checks need from the apiserver (nodes, RuntimeClasses,
StorageClasses, the box namespace's ResourceQuotas and LimitRanges, and the
controller's own permissions by SelfSubjectAccessReview); :func:`diagnose` is a pure
function of that data and the settings. Anything the doctor may not read becomes a
warning that says so, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from devboxes_sdk.models import PRESETS, DoctorCheck, DoctorReport, DoctorVerdict, Preset

from ..box import render, sshkeys
from ..config.formats import is_digest
from ..config.settings import (
    DeviceAlternative,
    GpuProfileConfig,
    ImageProfileConfig,
    Quota,
    Settings,
)
from ..k8s import kube
from ..k8s.kube import ApiProblem, Obj
from . import admission, capacity, devices

DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
SHOWN_NODES = 3
# What availability counts from, cluster-wide: without one, counts are unknown.
COUNTED_FROM = ("nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses")
ACCESS_WORKERS = 8


@dataclass(frozen=True)
class Permission:
    """One verb on one resource that the controller calls; ``namespaced`` False is cluster-wide."""

    verb: str
    resource: str
    group: str = ""
    namespaced: bool = True
    # Without it only an optional feature suffers (availability, parts of the doctor).
    optional: bool = False

    def describe(self) -> str:
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        where = "in the box namespace" if self.namespaced else "cluster-wide"
        return f"{self.verb} {resource} {where}"


def _grant(group: str, resource: str, verbs: str, **kwargs: Any) -> list[Permission]:
    return [Permission(verb, resource, group, **kwargs) for verb in verbs.split()]


# Exactly the chart's Role and ClusterRole: every verb here is one the controller calls.
PERMISSIONS: tuple[Permission, ...] = (
    *_grant("apps", "deployments", "list watch create patch delete"),
    *_grant("apps", "replicasets", "list watch"),
    *_grant("", "pods", "list watch patch"),
    *_grant("", "services", "list watch create delete"),
    *_grant("", "persistentvolumeclaims", "get list watch create patch delete"),
    *_grant("", "events", "list watch create"),
    *_grant("", "secrets", "create patch"),
    *_grant("", "configmaps", "get list watch create patch update"),
    *_grant("coordination.k8s.io", "leases", "get create update"),
    *_grant("resource.k8s.io", "resourceclaimtemplates", "list watch create"),
    *_grant("resource.k8s.io", "resourceclaims", "list watch"),
    *_grant("", "resourcequotas", "list", optional=True),
    *_grant("", "limitranges", "list", optional=True),
    *_grant("", "nodes", "list watch", namespaced=False, optional=True),
    *_grant("", "pods", "list watch", namespaced=False, optional=True),
    *_grant("node.k8s.io", "runtimeclasses", "list watch", namespaced=False, optional=True),
    *_grant("storage.k8s.io", "storageclasses", "list", namespaced=False, optional=True),
    *_grant("resource.k8s.io", "resourceslices", "list watch", namespaced=False, optional=True),
    *_grant("resource.k8s.io", "resourceclaims", "list watch", namespaced=False, optional=True),
    *_grant("resource.k8s.io", "deviceclasses", "list watch", namespaced=False, optional=True),
)


@dataclass(frozen=True)
class Facts:
    """What the doctor read from the cluster; a list is None when it could not be read,
    and ``unreadable`` then holds the reason under the same name."""

    nodes: list[Obj] | None = None
    runtime_classes: list[Obj] | None = None
    storage_classes: list[Obj] | None = None
    quotas: list[Obj] | None = None
    limit_ranges: list[Obj] | None = None
    device_classes: list[Obj] | None = None
    # Stripped as availability keeps them (devices.strip_slice).
    slices: list[Obj] | None = None
    # Per DRA profile, the apiserver's refusal of a dry-run claim template of its box, or
    # None when it accepted it; a profile is absent when the dry run could not be asked.
    claim_refusals: dict[str, str | None] = field(default_factory=dict)
    denied: list[Permission] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)


# -- gathering ---------------------------------------------------------------------------------


def _items(read: Callable[[], Obj], what: str, unreadable: dict[str, str]) -> list[Obj] | None:
    try:
        return list(read().get("items") or [])
    except ApiProblem as err:
        unreadable[what] = err.detail
        return None


def _allowed(authz: client.AuthorizationV1Api, permission: Permission, namespace: str) -> bool:
    attributes = {
        "verb": permission.verb,
        "resource": permission.resource,
        "group": permission.group,
    }
    if permission.namespaced:
        attributes["namespace"] = namespace
    review = kube.call(
        authz.create_self_subject_access_review,
        {"spec": {"resourceAttributes": attributes}},
    )
    return bool((review.get("status") or {}).get("allowed"))


def gather(settings: Settings, api: client.ApiClient) -> Facts:
    """Read everything the checks need; raises :class:`ApiProblem` only when the
    apiserver cannot answer at all (a permission review fails)."""
    core = client.CoreV1Api(api)
    namespace = settings.namespace
    unreadable: dict[str, str] = {}
    nodes = _items(lambda: kube.call(core.list_node), "nodes", unreadable)
    runtime_classes = _items(
        lambda: kube.call(client.NodeV1Api(api).list_runtime_class), "RuntimeClasses", unreadable
    )
    storage_classes = _items(
        lambda: kube.call(client.StorageV1Api(api).list_storage_class),
        "StorageClasses",
        unreadable,
    )
    quotas = _items(
        lambda: kube.call(core.list_namespaced_resource_quota, namespace),
        "ResourceQuotas",
        unreadable,
    )
    limit_ranges = _items(
        lambda: kube.call(core.list_namespaced_limit_range, namespace), "LimitRanges", unreadable
    )
    device_classes = (
        _items(
            lambda: kube.call(client.ResourceV1Api(api).list_device_class),
            "DeviceClasses",
            unreadable,
        )
        if settings.gpu.uses_dra
        else None
    )
    slices = (
        _items(
            lambda: kube.call(client.ResourceV1Api(api).list_resource_slice),
            "ResourceSlices",
            unreadable,
        )
        if settings.gpu.uses_dra
        else None
    )
    claim_refusals = _claim_refusals(settings, api, unreadable)
    authz = client.AuthorizationV1Api(api)
    with ThreadPoolExecutor(ACCESS_WORKERS, thread_name_prefix="doctor") as pool:
        answers = list(pool.map(lambda p: _allowed(authz, p, namespace), PERMISSIONS))
    return Facts(
        nodes=[capacity.strip_node(n) for n in nodes] if nodes is not None else None,
        runtime_classes=runtime_classes,
        storage_classes=storage_classes,
        quotas=quotas,
        limit_ranges=limit_ranges,
        device_classes=device_classes,
        slices=[devices.strip_slice(s) for s in slices] if slices is not None else None,
        claim_refusals=claim_refusals,
        denied=[p for p, allowed in zip(PERMISSIONS, answers, strict=True) if not allowed],
        unreadable=unreadable,
    )


def _claim_refusals(
    settings: Settings, api: client.ApiClient, unreadable: dict[str, str]
) -> dict[str, str | None]:
    """A server-side dry run of each DRA profile's claim template: the apiserver compiles
    the selectors with Kubernetes' own CEL functions, which the settings check cannot."""
    resource = client.ResourceV1Api(api)
    found: dict[str, str | None] = {}
    for profile in settings.gpu.profiles:
        template = render.render_claim_template(_doctor_spec(profile, "small"), settings)
        if template is None:
            continue
        # A generated name: never collides with the template of a box named "doctor".
        del template["metadata"]["name"]
        template["metadata"]["generateName"] = "devboxes-doctor-"
        try:
            kube.call(
                resource.create_namespaced_resource_claim_template,
                settings.namespace,
                template,
                dry_run="All",
            )
            found[profile.name] = None
        except ApiProblem as err:
            if err.status == 422:
                found[profile.name] = err.detail
            else:
                unreadable["claim template dry run"] = err.detail
    return found


def examine(settings: Settings, api: client.ApiClient) -> DoctorReport:
    return diagnose(settings, gather(settings, api))


# -- checks ------------------------------------------------------------------------------------


def _check(
    profile: str | None, check: str, verdict: DoctorVerdict, message: str, fix: str | None = None
) -> DoctorCheck:
    return DoctorCheck(profile=profile, check=check, verdict=verdict, message=message, fix=fix)


def _cannot_read(profile: str | None, check: str, what: str, facts: Facts) -> DoctorCheck:
    return _check(
        profile,
        check,
        "warn",
        f"cannot read {what}: {facts.unreadable.get(what, 'unknown reason')}",
        f"grant the controller list on {what} (the chart's ClusterRole and Role do)",
    )


def _names(nodes: Sequence[Obj]) -> str:
    names = sorted(capacity.node_name(n) for n in nodes)
    shown = ", ".join(names[:SHOWN_NODES])
    more = len(names) - SHOWN_NODES
    return f"{shown} and {more} more" if more > 0 else shown


def _selector_text(profile: GpuProfileConfig) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(profile.node_selector.items()))


def _profile_nodes(
    profile: GpuProfileConfig, resource: str, nodes: list[Obj], where: capacity.Placement
) -> list[DoctorCheck]:
    """Resource, selector, node health, taints and count: the scheduler's view, with what
    the profile's RuntimeClass adds to its pods."""
    name = profile.name
    advertising = [n for n in nodes if capacity.allocatable(n, resource) > 0]
    if not advertising:
        return [
            _check(
                name,
                "resource",
                "fail",
                f"no node advertises {resource}",
                "install the device plugin or GPU Operator",
            )
        ]
    found: list[DoctorCheck] = [
        _check(name, "resource", "pass", f"{len(advertising)} node(s) advertise {resource}")
    ]
    matching = [n for n in nodes if capacity.selector_matches(n, profile.node_selector)]
    selector = _selector_text(profile)
    if not matching:
        found.append(
            _check(
                name,
                "selector",
                "fail",
                f"no node matches the nodeSelector {selector}",
                f"label the GPU nodes {selector} or correct the profile's nodeSelector",
            )
        )
        return found
    candidates = [n for n in matching if capacity.allocatable(n, resource) > 0]
    if not candidates:
        found.append(
            _check(
                name,
                "selector",
                "fail",
                f"the {len(matching)} node(s) matching the nodeSelector {selector} do not "
                f"advertise {resource}",
                f"point the nodeSelector at the nodes that advertise {resource}",
            )
        )
        return found
    found.append(
        _check(
            name,
            "selector",
            "pass",
            f"the nodeSelector {selector} matches {len(candidates)} node(s) with {resource}"
            if selector
            else f"no nodeSelector: {len(candidates)} node(s) with {resource} qualify",
        )
    )
    # Narrowed to the RuntimeClass's nodes, unless that leaves none: the runtime-class
    # check reports that, and the rest still says what is wrong with the profile's nodes.
    candidates = [
        n for n in candidates if capacity.selector_matches(n, where.runtime_selector)
    ] or candidates
    found.append(_health(name, candidates))
    found.append(_taints(profile, where, candidates))
    found.append(_count(profile, resource, candidates))
    return found


def _health(name: str, candidates: list[Obj]) -> DoctorCheck:
    unusable = [
        n for n in candidates if not (capacity.node_ready(n) and capacity.node_schedulable(n))
    ]
    if not unusable:
        return _check(
            name, "nodes", "pass", f"all {len(candidates)} node(s) are Ready and schedulable"
        )
    fix = "uncordon the nodes (kubectl uncordon NODE) or repair them until they are Ready"
    if len(unusable) == len(candidates):
        return _check(
            name, "nodes", "fail", f"no node is Ready and schedulable ({_names(unusable)})", fix
        )
    return _check(
        name,
        "nodes",
        "warn",
        f"{len(unusable)} of {len(candidates)} node(s) are not Ready or are cordoned "
        f"({_names(unusable)})",
        fix,
    )


def _taints(
    profile: GpuProfileConfig, where: capacity.Placement, candidates: list[Obj]
) -> DoctorCheck:
    blocked = {
        capacity.node_name(n): capacity.untolerated_taints(n, where.tolerations) for n in candidates
    }
    blocked = {node: taints for node, taints in blocked.items() if taints}
    if not blocked:
        return _check(profile.name, "taints", "pass", "every taint on its nodes is tolerated")
    taints = sorted({capacity.describe_taint(t) for ts in blocked.values() for t in ts})
    first = next(t for ts in blocked.values() for t in ts)
    fix = (
        f"add a toleration {{key: {first.get('key')}, operator: Exists, effect: "
        f"{first.get('effect')}}} to the profile, or remove the taint"
    )
    message = (
        f"the profile does not tolerate {', '.join(taints)} on {len(blocked)} of "
        f"{len(candidates)} node(s)"
    )
    verdict: DoctorVerdict = "fail" if len(blocked) == len(candidates) else "warn"
    return _check(profile.name, "taints", verdict, message, fix)


def _count(profile: GpuProfileConfig, resource: str, candidates: list[Obj]) -> DoctorCheck:
    most = max(capacity.allocatable(n, resource) for n in candidates)
    if most >= profile.count:
        return _check(
            profile.name,
            "count",
            "pass",
            f"count {profile.count} fits (up to {most} {resource} on one node)",
        )
    return _check(
        profile.name,
        "count",
        "fail",
        f"count {profile.count} does not fit: the most {resource} on one node is {most}",
        f"lower the profile's count to {most} or add nodes with {profile.count} {resource}",
    )


def _runtime_class(
    profile: GpuProfileConfig, facts: Facts, candidates: list[Obj] | None
) -> DoctorCheck | None:
    wanted = profile.runtime_class_name
    if wanted is None:
        return None
    if facts.runtime_classes is None:
        return _cannot_read(profile.name, "runtime-class", "RuntimeClasses", facts)
    found = next((rc for rc in facts.runtime_classes if rc["metadata"]["name"] == wanted), None)
    if found is None:
        return _check(
            profile.name,
            "runtime-class",
            "fail",
            f"RuntimeClass {wanted} does not exist: every pod of this profile is refused",
            f"create the RuntimeClass {wanted} for the GPU nodes' container runtime, or "
            "remove runtimeClassName from the profile",
        )
    selector = ((found.get("scheduling") or {}).get("nodeSelector")) or {}
    overlaps = candidates is None or any(capacity.selector_matches(n, selector) for n in candidates)
    if not overlaps:
        shown = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        return _check(
            profile.name,
            "runtime-class",
            "fail",
            f"RuntimeClass {wanted} only runs on nodes labelled {shown}, and none of "
            "this profile's nodes is",
            "align the RuntimeClass's scheduling.nodeSelector with the profile's nodes",
        )
    return _check(profile.name, "runtime-class", "pass", f"RuntimeClass {wanted} exists")


def box_pod(settings: Settings, profile: GpuProfileConfig, preset: Preset) -> Obj:
    """The pod spec of a new box of this profile and preset, exactly as it would be created."""
    template: Obj = render.render_deployment(_doctor_spec(profile, preset), settings)["spec"][
        "template"
    ]
    return dict(template["spec"])


def _doctor_spec(profile: GpuProfileConfig, preset: Preset) -> render.BoxSpec:
    return render.BoxSpec(
        name="doctor",
        preset=preset,
        ttl_hours=1,
        repository=None,
        expires_at=datetime.now(UTC),
        gpu=profile,
    )


def _judge(
    profile: str, check: str, problems: dict[Preset, list[admission.Problem]], fine: str
) -> DoctorCheck:
    """One verdict over every preset: a failure when no preset gets through, a warning
    when only some do or when only what others hold now is in the way."""
    refused = {p: [x for x in found if not x.for_now] for p, found in problems.items()}
    refused = {p: found for p, found in refused.items() if found}
    if len(refused) == len(problems):
        first = next(iter(refused.values()))[0]
        return _check(profile, check, "fail", first.message, first.fix)
    if refused:
        first = next(iter(refused.values()))[0]
        fitting = " or ".join(p for p in problems if p not in refused)
        return _check(
            profile,
            check,
            "warn",
            first.message,
            f"{first.fix}; until then, boxes of this profile need preset {fitting}",
        )
    waiting = [x for found in problems.values() for x in found]
    if waiting:
        return _check(profile, check, "warn", waiting[0].message, waiting[0].fix)
    return _check(profile, check, "pass", fine)


def _admission(profile: GpuProfileConfig, settings: Settings, facts: Facts) -> list[DoctorCheck]:
    """The box namespace's LimitRanges and ResourceQuotas against a box of this profile
    with each preset: its GPU, CPU and memory requests and limits."""
    limit_ranges = facts.limit_ranges or []
    by_limits: dict[Preset, list[admission.Problem]] = {}
    by_quota: dict[Preset, list[admission.Problem]] = {}
    for preset in PRESETS:
        what = f"a box of this profile with preset {preset}"
        containers = admission.admitted_containers(box_pod(settings, profile, preset), limit_ranges)
        by_limits[preset] = admission.limit_range_problems(containers, limit_ranges, what)
        by_quota[preset] = admission.quota_problems(
            containers, facts.quotas or [], what, settings.namespace
        )
    return [
        _cannot_read(profile.name, "limit-range", "LimitRanges", facts)
        if facts.limit_ranges is None
        else _judge(profile.name, "limit-range", by_limits, "no LimitRange forbids its boxes"),
        _cannot_read(profile.name, "quota", "ResourceQuotas", facts)
        if facts.quotas is None
        else _judge(profile.name, "quota", by_quota, "every ResourceQuota has room for its boxes"),
    ]


def _device_classes(profile: GpuProfileConfig, facts: Facts) -> DoctorCheck:
    """A DRA profile's DeviceClasses, its own and its alternatives', must all exist."""
    if facts.device_classes is None:
        return _cannot_read(profile.name, "device-class", "DeviceClasses", facts)
    existing = {dc["metadata"]["name"] for dc in facts.device_classes}
    wanted = list(dict.fromkeys(c.device_class_name for c in profile.choices()))
    missing = [name for name in wanted if name not in existing]
    if missing:
        return _check(
            profile.name,
            "device-class",
            "fail",
            f"DeviceClass {', '.join(missing)} does not exist: the scheduler refuses every "
            "box of this profile",
            "install the DRA driver that provides it, or change the profile's "
            f"deviceClassName (existing: {', '.join(sorted(existing)) or 'none'})",
        )
    return _check(profile.name, "device-class", "pass", f"DeviceClass {', '.join(wanted)} exists")


def _choice_name(index: int, choice: DeviceAlternative) -> str:
    which = "its own choice" if index == 0 else f"alternative {index}"
    return f"{which} ({choice.device_class_name})"


def _published_devices(profile: GpuProfileConfig, facts: Facts) -> DoctorCheck | None:
    """Does any published device satisfy the profile's class and selectors, choice by
    choice? Devices held by claims count too: this is about the profile, not the moment."""
    if facts.slices is None:
        return _cannot_read(profile.name, "devices", "ResourceSlices", facts)
    if facts.device_classes is None:
        # The device-class check already says that the classes cannot be read.
        return None
    classes = {
        str(c["metadata"]["name"]): devices.strip_device_class(c) for c in facts.device_classes
    }
    counts = devices.count_profile(
        profile, devices.inventory(facts.slices), set(), classes, None, devices.Matcher()
    )
    choices = profile.choices()
    unjudged = [_choice_name(c.alternative, choices[c.alternative]) for c in counts if c.unjudged]
    matched = [c for c in counts if c.matching > 0]
    if not matched:
        if unjudged:
            return _check(
                profile.name,
                "devices",
                "warn",
                f"whether a published device matches {profile.name} is unknown: the "
                f"controller cannot evaluate a selector of {', '.join(unjudged)}, so its free "
                "devices are not counted either",
                "use only what the controller evaluates in selectors: attributes, capacities, "
                "quantity(), semver(), compareTo, isGreaterThan and isLessThan",
            )
        return _check(
            profile.name,
            "devices",
            "fail",
            f"no published device matches {profile.name}: no ResourceSlice has a device that "
            "satisfies its DeviceClass and selectors, so its boxes wait forever",
            "install or repair the DRA driver on the GPU nodes, or correct the profile's "
            "deviceClassName and selectors (kubectl get resourceslices -o yaml shows the "
            "published attributes and capacities)",
        )
    found = ", ".join(
        f"{_choice_name(c.alternative, choices[c.alternative])}: {c.matching}" for c in matched
    )
    idle = [
        _choice_name(c.alternative, choices[c.alternative])
        for c in counts
        if c.matching == 0 and not c.unjudged
    ]
    if idle or unjudged:
        problems = []
        if idle:
            verb = "matches" if len(idle) == 1 else "match"
            problems.append(f"{', '.join(idle)} {verb} no published device")
        if unjudged:
            problems.append(f"the controller cannot evaluate a selector of {', '.join(unjudged)}")
        return _check(
            profile.name,
            "devices",
            "warn",
            f"published devices match {profile.name} ({found}), but {'; '.join(problems)}",
            "correct or remove the choices that match nothing",
        )
    return _check(
        profile.name, "devices", "pass", f"published devices match {profile.name}: {found}"
    )


def _claim_template(profile: GpuProfileConfig, facts: Facts) -> DoctorCheck:
    if profile.name not in facts.claim_refusals:
        return _check(
            profile.name,
            "claim-template",
            "warn",
            "could not ask the apiserver to check this profile's claim template: "
            f"{facts.unreadable.get('claim template dry run', 'unknown reason')}",
            "grant the controller create on resourceclaimtemplates.resource.k8s.io in the box "
            "namespace (the chart's Role does) on a cluster that serves resource.k8s.io/v1",
        )
    refusal = facts.claim_refusals[profile.name]
    if refusal is not None:
        return _check(
            profile.name,
            "claim-template",
            "fail",
            f"the apiserver refuses this profile's claim template: {refusal}",
            "correct the profile's selectors, counts or device classes",
        )
    return _check(
        profile.name,
        "claim-template",
        "pass",
        "the apiserver accepts this profile's claim template and selectors",
    )


def _profile_checks(
    profile: GpuProfileConfig, settings: Settings, facts: Facts
) -> list[DoctorCheck]:
    found: list[DoctorCheck] = []
    candidates: list[Obj] | None = None
    runtime_classes = {rc["metadata"]["name"]: rc for rc in facts.runtime_classes or []}
    resource = profile.resource_name
    if resource is None:
        found.append(_device_classes(profile, facts))
        found.append(_claim_template(profile, facts))
        published = _published_devices(profile, facts)
        if published is not None:
            found.append(published)
    elif facts.nodes is None:
        found.append(_cannot_read(profile.name, "resource", "nodes", facts))
    else:
        where = capacity.placement(profile, runtime_classes)
        found.extend(_profile_nodes(profile, resource, facts.nodes, where))
        candidates = [
            n
            for n in facts.nodes
            if capacity.selector_matches(n, profile.node_selector)
            and capacity.allocatable(n, resource) > 0
        ]
    runtime = _runtime_class(profile, facts, candidates)
    if runtime is not None:
        found.append(runtime)
    found.extend(_admission(profile, settings, facts))
    return found


def _storage_class(settings: Settings, facts: Facts) -> DoctorCheck:
    if facts.storage_classes is None:
        return _cannot_read(None, "storage-class", "StorageClasses", facts)
    names = {sc["metadata"]["name"] for sc in facts.storage_classes}
    wanted = settings.storage_class_name
    if wanted is not None:
        if wanted in names:
            return _check(None, "storage-class", "pass", f"StorageClass {wanted} exists")
        return _check(
            None,
            "storage-class",
            "fail",
            f"StorageClass {wanted} does not exist: home volumes stay Pending",
            f"create StorageClass {wanted} or set controller.storageClassName to one of: "
            f"{', '.join(sorted(names)) or 'none exist'}",
        )
    defaults = [
        sc["metadata"]["name"]
        for sc in facts.storage_classes
        if any(
            (sc["metadata"].get("annotations") or {}).get(a) == "true"
            for a in DEFAULT_CLASS_ANNOTATIONS
        )
    ]
    if defaults:
        return _check(
            None,
            "storage-class",
            "pass",
            f"home volumes use the default StorageClass {defaults[0]}",
        )
    return _check(
        None,
        "storage-class",
        "fail",
        "no StorageClass is marked default and controller.storageClassName is not set: "
        "home volumes stay Pending",
        "set controller.storageClassName, or mark a class default "
        '(storageclass.kubernetes.io/is-default-class: "true")',
    )


def _permissions(settings: Settings, facts: Facts) -> list[DoctorCheck]:
    required = [p for p in facts.denied if not p.optional]
    optional = [p for p in facts.denied if p.optional]
    found: list[DoctorCheck] = []
    if required:
        found.append(
            _check(
                None,
                "permissions",
                "fail",
                "the controller may not " + "; ".join(p.describe() for p in required),
                "install the chart's Role and RoleBinding for the controller's ServiceAccount",
            )
        )
    else:
        found.append(
            _check(None, "permissions", "pass", "the controller may do everything it needs")
        )
    if optional:
        feature = (
            "availability reports unknown"
            if settings.availability.enabled
            and any(p.resource in COUNTED_FROM and not p.namespaced for p in optional)
            else "some doctor checks cannot run"
        )
        found.append(
            _check(
                None,
                "permissions",
                "warn",
                f"the controller may not {'; '.join(p.describe() for p in optional)} ({feature})",
                "enable controller.availability.enabled so the chart grants its read-only "
                "ClusterRole",
            )
        )
    return found


def _quota_text(quota: Quota) -> list[str]:
    parts = [f"{quota.boxes} boxes"] if quota.boxes is not None else []
    parts += [f"{count} {device} running" for device, count in sorted(quota.devices.items())]
    return parts


def _limits(settings: Settings) -> DoctorCheck:
    """What the limits are, in one line, for an operator checking what people meet."""
    limits = settings.limits
    if not limits.enabled:
        return _check(
            None,
            "limits",
            "pass",
            "no limits: each person may hold any number of boxes and devices",
        )
    parts = []
    person = _quota_text(limits.per_person)
    if person:
        parts.append(f"each person: at most {', '.join(person)}")
    for name, group in sorted(limits.groups.items()):
        bounds = _quota_text(group)
        if group.presets is not None:
            bounds.append(f"presets {'/'.join(group.presets)}")
        if group.max_ttl_hours is not None:
            bounds.append(f"time to live up to {group.max_ttl_hours} h")
        parts.append(f"group {name}: {', '.join(bounds) or 'no bounds'}")
    return _check(
        None,
        "limits",
        "pass",
        "; ".join(parts) + " (checked on create and start; the operator token has no limits)",
    )


def _ssh_keys(settings: Settings) -> DoctorCheck:
    secret = settings.ssh.authorized_keys_secret
    namespace = settings.namespace
    if secret is None:
        return _check(
            None,
            "ssh-keys",
            "warn",
            "no operator SSH keys are configured: boxes made with the operator token accept "
            "no login (people's boxes accept the keys each person adds with devbox keys add)",
            sshkeys.operator_keys_fix(None, namespace),
        )
    # The controller may create and patch Secrets but never read one, so whether this
    # one exists and holds the key stays unknown to the doctor.
    return _check(
        None,
        "ssh-keys",
        "pass",
        f"boxes take their SSH keys from the key authorized_keys of Secret {secret} in "
        f"namespace {namespace} (not verified: the controller may not read Secrets)",
    )


def _ssh_host(settings: Settings) -> DoctorCheck:
    ssh = settings.ssh
    if ssh.service_type == "LoadBalancer":
        return _check(None, "ssh-host", "pass", "SSH commands show each box's LoadBalancer address")
    if ssh.host:
        return _check(
            None, "ssh-host", "pass", f"SSH commands show {ssh.host} and each box's node port"
        )
    return _check(
        None,
        "ssh-host",
        "warn",
        "controller.ssh.serviceType is NodePort and controller.ssh.host is empty: no SSH "
        "command can be printed, and boxes stay starting, waiting for an SSH address",
        "set controller.ssh.host to an address of the nodes that users can reach, or set "
        "controller.ssh.serviceType to LoadBalancer where the cluster provides load balancers",
    )


def _pull_policy(profile: ImageProfileConfig) -> DoctorCheck:
    where = f"image profile {profile.name}"
    if profile.pull_policy == "Never":
        return _check(
            None,
            "image-pull-policy",
            "warn",
            f"{where} has pullPolicy Never: its boxes start only on nodes that already hold "
            "the image, and fail with ErrImageNeverPull elsewhere",
            "load the image on every node that may run boxes, or set pullPolicy to IfNotPresent",
        )
    if profile.pull_policy == "Always" and is_digest(profile.image):
        return _check(
            None,
            "image-pull-policy",
            "warn",
            f"{where} has pullPolicy Always on a digest: the image can never change, yet "
            "every start asks the registry, and fails while the registry is unreachable",
            "set pullPolicy to IfNotPresent",
        )
    return _check(
        None, "image-pull-policy", "pass", f"{where} is pulled with {profile.pull_policy}"
    )


# What each check is about, in words that name nothing of how the cluster places boxes.
TOPICS: dict[str, str] = {
    "storage-class": "the StorageClass of home volumes",
    "permissions": "the controller's permissions",
    "ssh-keys": "the SSH keys of boxes made with the operator token",
    "ssh-host": "the address that SSH commands show",
    "resource": "nodes that offer this profile's devices",
    "selector": "the nodes this profile's boxes may run on",
    "nodes": "the health of this profile's nodes",
    "taints": "the taints of this profile's nodes",
    "count": "room for one box's devices on one node",
    "runtime-class": "the container runtime of this profile's boxes",
    "device-class": "the device classes of this profile",
    "devices": "the devices drivers publish for this profile",
    "claim-template": "the device claim of this profile's boxes",
    "quota": "the box namespace's quotas, for this profile's boxes",
    "limit-range": "the box namespace's limit ranges, for this profile's boxes",
}
# Findings made only of what people may see anyway: the limits they meet, whether GPUs
# are on, and the image profiles of the catalog with how their images are pulled.
PUBLIC_CHECKS = frozenset({"limits", "gpu", "image-pull-policy"})
OUTCOMES: dict[DoctorVerdict, str] = {
    "pass": "in order",
    "warn": "needs attention",
    "fail": "not in order",
}
ASK_AN_ADMIN = "ask an admin, whose devbox gpu doctor shows what is wrong and how to fix it"


def for_people(report: DoctorReport) -> DoctorReport:
    """The report as a person who is not an admin reads it: every verdict, but no
    finding that names node selectors, nodes, taints, RuntimeClasses, DeviceClasses,
    Secrets, quotas or the apiserver's words. A check not listed in :data:`TOPICS`
    is told in the same words as the others, so a new check is never shown in full by
    mistake."""
    return DoctorReport(
        ok=report.ok,
        checks=[
            check
            if check.check in PUBLIC_CHECKS
            else _check(
                check.profile,
                check.check,
                check.verdict,
                f"{TOPICS.get(check.check, f'the {check.check} check')}: {OUTCOMES[check.verdict]}",
                None if check.verdict == "pass" else ASK_AN_ADMIN,
            )
            for check in report.checks
        ],
    )


def diagnose(settings: Settings, facts: Facts) -> DoctorReport:
    """Every check, cluster-wide first, then per GPU profile in catalog order, then the
    image profiles."""
    checks = [
        _storage_class(settings, facts),
        *_permissions(settings, facts),
        _ssh_keys(settings),
        _ssh_host(settings),
        _limits(settings),
    ]
    if not settings.gpu.enabled:
        checks.append(
            _check(None, "gpu", "warn", "GPU acceleration is disabled: no profile was checked")
        )
    else:
        for profile in settings.gpu.profiles:
            checks.extend(_profile_checks(profile, settings, facts))
    if settings.images.enabled:
        checks.extend(_pull_policy(image) for image in settings.images.profiles)
    return DoctorReport(ok=all(c.verdict != "fail" for c in checks), checks=checks)
