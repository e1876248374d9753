"""The GPU doctor: does the cluster meet every prerequisite of the configured profiles?

:func:`gather` reads what the checks need from the apiserver through
``k8s.preflight`` (nodes, RuntimeClasses, StorageClasses, the box namespace's
ResourceQuotas and LimitRanges, and the controller's own permissions by
SelfSubjectAccessReview); :func:`diagnose` is a pure function of that data and the
settings, made of the checks in :mod:`.doctor_cluster` and :mod:`.doctor_profiles`.
Anything the doctor may not read becomes a warning that says so, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from devboxes_sdk.models import DoctorReport, DoctorVerdict

from ..box import render
from ..config.settings import Settings
from ..k8s import preflight
from ..k8s.kube import ApiClient, ApiProblem, Obj
from . import capacity, devices, doctor_cluster, doctor_profiles
from .doctor_facts import PERMISSIONS, Facts, Permission, finding

ACCESS_WORKERS = 8


# -- gathering ---------------------------------------------------------------------------------


def _items(read: Callable[[], Obj], what: str, unreadable: dict[str, str]) -> list[Obj] | None:
    try:
        return list(read().get("items") or [])
    except ApiProblem as err:
        unreadable[what] = err.detail
        return None


def _allowed(api: ApiClient, permission: Permission, namespace: str) -> bool:
    attributes = {
        "verb": permission.verb,
        "resource": permission.resource,
        "group": permission.group,
    }
    if permission.namespaced:
        attributes["namespace"] = namespace
    if permission.name is not None:
        attributes["name"] = permission.name
    return preflight.access_allowed(api, attributes)


def gather(settings: Settings, api: ApiClient) -> Facts:
    """Read everything the checks need; raises :class:`ApiProblem` only when the
    apiserver cannot answer at all (a permission review fails)."""
    namespace = settings.namespace
    unreadable: dict[str, str] = {}
    nodes = _items(lambda: preflight.list_nodes(api), "nodes", unreadable)
    runtime_classes = _items(
        lambda: preflight.list_runtime_classes(api), "RuntimeClasses", unreadable
    )
    storage_classes = _items(
        lambda: preflight.list_storage_classes(api), "StorageClasses", unreadable
    )
    quotas = _items(
        lambda: preflight.list_resource_quotas(api, namespace), "ResourceQuotas", unreadable
    )
    limit_ranges = _items(
        lambda: preflight.list_limit_ranges(api, namespace), "LimitRanges", unreadable
    )
    device_classes = (
        _items(lambda: preflight.list_device_classes(api), "DeviceClasses", unreadable)
        if settings.gpu.uses_dra
        else None
    )
    slices = (
        _items(lambda: preflight.list_resource_slices(api), "ResourceSlices", unreadable)
        if settings.gpu.uses_dra
        else None
    )
    claim_refusals = _claim_refusals(settings, api, unreadable)
    with ThreadPoolExecutor(ACCESS_WORKERS, thread_name_prefix="doctor") as pool:
        answers = list(pool.map(lambda p: _allowed(api, p, namespace), PERMISSIONS))
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
    settings: Settings, api: ApiClient, unreadable: dict[str, str]
) -> dict[str, str | None]:
    """A server-side dry run of each DRA profile's claim template: the apiserver compiles
    the selectors with Kubernetes' own CEL functions, which the settings check cannot."""
    found: dict[str, str | None] = {}
    for profile in settings.gpu.profiles:
        template = render.render_claim_template(
            doctor_profiles.sample_spec(profile, "small"), settings
        )
        if template is None:
            continue
        # A generated name: never collides with the template of a box named "doctor".
        del template["metadata"]["name"]
        template["metadata"]["generateName"] = "devboxes-doctor-"
        try:
            preflight.dry_run_claim_template(api, settings.namespace, template)
            found[profile.name] = None
        except ApiProblem as err:
            if err.status == 422:
                found[profile.name] = err.detail
            else:
                unreadable["claim template dry run"] = err.detail
    return found


def examine(settings: Settings, api: ApiClient) -> DoctorReport:
    return diagnose(settings, gather(settings, api))


# -- the report --------------------------------------------------------------------------------


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
            else finding(
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
        doctor_cluster.check_storage_class(settings, facts),
        *doctor_cluster.check_permissions(settings, facts),
        doctor_cluster.check_ssh_keys(settings),
        doctor_cluster.check_ssh_host(settings),
        doctor_cluster.check_limits(settings),
    ]
    if not settings.gpu.enabled:
        checks.append(
            finding(None, "gpu", "warn", "GPU acceleration is disabled: no profile was checked")
        )
    else:
        for profile in settings.gpu.profiles:
            checks.extend(doctor_profiles.check_profile(profile, settings, facts))
    if settings.images.enabled:
        checks.extend(doctor_cluster.check_pull_policy(image) for image in settings.images.profiles)
    return DoctorReport(ok=all(c.verdict != "fail" for c in checks), checks=checks)
