"""The GPU doctor's checks of one GPU profile: its nodes or devices, its RuntimeClass, and
what the box namespace's LimitRanges and ResourceQuotas make of its boxes; pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from devboxes_sdk.models import PRESETS, DoctorCheck, DoctorVerdict, Preset

from ..box import render
from ..box.spec import BoxSpec
from ..config.gpu import DeviceAlternative, GpuProfileConfig
from ..config.settings import Settings
from ..k8s.kube import Obj
from . import admission, capacity, devices
from .doctor_facts import Facts, cannot_read, finding

SHOWN_NODES = 3


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
            finding(
                name,
                "resource",
                "fail",
                f"no node advertises {resource}",
                "install the device plugin or GPU Operator",
            )
        ]
    found: list[DoctorCheck] = [
        finding(name, "resource", "pass", f"{len(advertising)} node(s) advertise {resource}")
    ]
    matching = [n for n in nodes if capacity.selector_matches(n, profile.node_selector)]
    selector = _selector_text(profile)
    if not matching:
        found.append(
            finding(
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
            finding(
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
        finding(
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
        return finding(
            name, "nodes", "pass", f"all {len(candidates)} node(s) are Ready and schedulable"
        )
    fix = "uncordon the nodes (kubectl uncordon NODE) or repair them until they are Ready"
    if len(unusable) == len(candidates):
        return finding(
            name, "nodes", "fail", f"no node is Ready and schedulable ({_names(unusable)})", fix
        )
    return finding(
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
        return finding(profile.name, "taints", "pass", "every taint on its nodes is tolerated")
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
    return finding(profile.name, "taints", verdict, message, fix)


def _count(profile: GpuProfileConfig, resource: str, candidates: list[Obj]) -> DoctorCheck:
    most = max(capacity.allocatable(n, resource) for n in candidates)
    if most >= profile.count:
        return finding(
            profile.name,
            "count",
            "pass",
            f"count {profile.count} fits (up to {most} {resource} on one node)",
        )
    return finding(
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
        return cannot_read(profile.name, "runtime-class", "RuntimeClasses", facts)
    found = next((rc for rc in facts.runtime_classes if rc["metadata"]["name"] == wanted), None)
    if found is None:
        return finding(
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
        return finding(
            profile.name,
            "runtime-class",
            "fail",
            f"RuntimeClass {wanted} only runs on nodes labelled {shown}, and none of "
            "this profile's nodes is",
            "align the RuntimeClass's scheduling.nodeSelector with the profile's nodes",
        )
    return finding(profile.name, "runtime-class", "pass", f"RuntimeClass {wanted} exists")


def box_pod(settings: Settings, profile: GpuProfileConfig, preset: Preset) -> Obj:
    """The pod spec of a new box of this profile and preset, exactly as it would be created."""
    template: Obj = render.render_deployment(sample_spec(profile, preset), settings)["spec"][
        "template"
    ]
    return dict(template["spec"])


def sample_spec(profile: GpuProfileConfig, preset: Preset) -> BoxSpec:
    """A box of this profile and preset, as the doctor judges one."""
    return BoxSpec(
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
        return finding(profile, check, "fail", first.message, first.fix)
    if refused:
        first = next(iter(refused.values()))[0]
        fitting = " or ".join(p for p in problems if p not in refused)
        return finding(
            profile,
            check,
            "warn",
            first.message,
            f"{first.fix}; until then, boxes of this profile need preset {fitting}",
        )
    waiting = [x for found in problems.values() for x in found]
    if waiting:
        return finding(profile, check, "warn", waiting[0].message, waiting[0].fix)
    return finding(profile, check, "pass", fine)


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
        cannot_read(profile.name, "limit-range", "LimitRanges", facts)
        if facts.limit_ranges is None
        else _judge(profile.name, "limit-range", by_limits, "no LimitRange forbids its boxes"),
        cannot_read(profile.name, "quota", "ResourceQuotas", facts)
        if facts.quotas is None
        else _judge(profile.name, "quota", by_quota, "every ResourceQuota has room for its boxes"),
    ]


def _device_classes(profile: GpuProfileConfig, facts: Facts) -> DoctorCheck:
    """A DRA profile's DeviceClasses, its own and its alternatives', must all exist."""
    if facts.device_classes is None:
        return cannot_read(profile.name, "device-class", "DeviceClasses", facts)
    existing = {dc["metadata"]["name"] for dc in facts.device_classes}
    wanted = list(dict.fromkeys(c.device_class_name for c in profile.choices()))
    missing = [name for name in wanted if name not in existing]
    if missing:
        return finding(
            profile.name,
            "device-class",
            "fail",
            f"DeviceClass {', '.join(missing)} does not exist: the scheduler refuses every "
            "box of this profile",
            "install the DRA driver that provides it, or change the profile's "
            f"deviceClassName (existing: {', '.join(sorted(existing)) or 'none'})",
        )
    return finding(profile.name, "device-class", "pass", f"DeviceClass {', '.join(wanted)} exists")


def _choice_name(index: int, choice: DeviceAlternative) -> str:
    which = "its own choice" if index == 0 else f"alternative {index}"
    return f"{which} ({choice.device_class_name})"


def _published_devices(profile: GpuProfileConfig, facts: Facts) -> DoctorCheck | None:
    """Does any published device satisfy the profile's class and selectors, choice by
    choice? Devices held by claims count too: this is about the profile, not the moment."""
    if facts.slices is None:
        return cannot_read(profile.name, "devices", "ResourceSlices", facts)
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
            return finding(
                profile.name,
                "devices",
                "warn",
                f"whether a published device matches {profile.name} is unknown: the "
                f"controller cannot evaluate a selector of {', '.join(unjudged)}, so its free "
                "devices are not counted either",
                "use only what the controller evaluates in selectors: attributes, capacities, "
                "quantity(), semver(), compareTo, isGreaterThan and isLessThan",
            )
        return finding(
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
        return finding(
            profile.name,
            "devices",
            "warn",
            f"published devices match {profile.name} ({found}), but {'; '.join(problems)}",
            "correct or remove the choices that match nothing",
        )
    return finding(
        profile.name, "devices", "pass", f"published devices match {profile.name}: {found}"
    )


def _claim_template(profile: GpuProfileConfig, facts: Facts) -> DoctorCheck:
    if profile.name not in facts.claim_refusals:
        return finding(
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
        return finding(
            profile.name,
            "claim-template",
            "fail",
            f"the apiserver refuses this profile's claim template: {refusal}",
            "correct the profile's selectors, counts or device classes",
        )
    return finding(
        profile.name,
        "claim-template",
        "pass",
        "the apiserver accepts this profile's claim template and selectors",
    )


def check_profile(profile: GpuProfileConfig, settings: Settings, facts: Facts) -> list[DoctorCheck]:
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
        found.append(cannot_read(profile.name, "resource", "nodes", facts))
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
