"""The GPU doctor's checks of what every box relies on, whatever its profile: the StorageClass
of home volumes, the controller's permissions, SSH keys and addresses, the limits people
meet, and how image profiles are pulled; pure."""

from __future__ import annotations

from devboxes_sdk.models import DoctorCheck

from ..box import authorized_keys
from ..config.formats import is_digest
from ..config.images import ImageProfileConfig
from ..config.limits import Quota
from ..config.settings import Settings
from .doctor_facts import Facts, cannot_read, finding

DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
# What availability counts from, cluster-wide: without one, counts are unknown.
COUNTED_FROM = ("nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses")


def check_storage_class(settings: Settings, facts: Facts) -> DoctorCheck:
    if facts.storage_classes is None:
        return cannot_read(None, "storage-class", "StorageClasses", facts)
    names = {sc["metadata"]["name"] for sc in facts.storage_classes}
    wanted = settings.storage_class_name
    if wanted is not None:
        if wanted in names:
            return finding(None, "storage-class", "pass", f"StorageClass {wanted} exists")
        return finding(
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
        return finding(
            None,
            "storage-class",
            "pass",
            f"home volumes use the default StorageClass {defaults[0]}",
        )
    return finding(
        None,
        "storage-class",
        "fail",
        "no StorageClass is marked default and controller.storageClassName is not set: "
        "home volumes stay Pending",
        "set controller.storageClassName, or mark a class default "
        '(storageclass.kubernetes.io/is-default-class: "true")',
    )


def check_permissions(settings: Settings, facts: Facts) -> list[DoctorCheck]:
    required = [p for p in facts.denied if not p.optional]
    optional = [p for p in facts.denied if p.optional]
    found: list[DoctorCheck] = []
    if required:
        found.append(
            finding(
                None,
                "permissions",
                "fail",
                "the controller may not " + "; ".join(p.describe() for p in required),
                "install the chart's Role and RoleBinding for the controller's ServiceAccount",
            )
        )
    else:
        found.append(
            finding(None, "permissions", "pass", "the controller may do everything it needs")
        )
    reads = [p for p in optional if p.resource != "namespaces"]
    features, fixes = [], []
    if reads:
        features.append(
            "availability reports unknown"
            if settings.availability.enabled
            and any(p.resource in COUNTED_FROM and not p.namespaced for p in reads)
            else "some doctor checks cannot run"
        )
        fixes.append("enable controller.availability.enabled so the chart grants those reads")
    if len(reads) < len(optional):
        features.append("the capabilities give no cluster id")
        fixes.append("grant get on the kube-system Namespace, as the chart's ClusterRole does")
    if optional:
        found.append(
            finding(
                None,
                "permissions",
                "warn",
                f"the controller may not {'; '.join(p.describe() for p in optional)} "
                f"({'; '.join(features)})",
                "; ".join(fixes),
            )
        )
    return found


def _quota_text(quota: Quota) -> list[str]:
    parts = [f"{quota.boxes} boxes"] if quota.boxes is not None else []
    parts += [f"{count} {device} running" for device, count in sorted(quota.devices.items())]
    parts += [f"{b.hours} {b.profile or 'GPU'} hours per {b.days} days" for b in quota.budgets]
    return parts


def check_limits(settings: Settings) -> DoctorCheck:
    """What the limits are, in one line, for an operator checking what people meet."""
    limits = settings.limits
    if not limits.enabled:
        return finding(
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
    return finding(
        None,
        "limits",
        "pass",
        "; ".join(parts) + " (checked on create and start; the operator token has no limits)",
    )


def check_ssh_keys(settings: Settings) -> DoctorCheck:
    secret = settings.ssh.authorized_keys_secret
    namespace = settings.namespace
    if secret is None:
        return finding(
            None,
            "ssh-keys",
            "warn",
            "no operator SSH keys are configured: boxes made with the operator token accept "
            "no login (people's boxes accept the keys each person adds with devbox keys add)",
            authorized_keys.operator_keys_fix(None, namespace),
        )
    # The controller may create and patch Secrets but never read one, so whether this
    # one exists and holds the key stays unknown to the doctor.
    return finding(
        None,
        "ssh-keys",
        "pass",
        f"boxes take their SSH keys from the key authorized_keys of Secret {secret} in "
        f"namespace {namespace} (not verified: the controller may not read Secrets)",
    )


def check_ssh_host(settings: Settings) -> DoctorCheck:
    ssh = settings.ssh
    if not ssh.has_service:
        return finding(
            None,
            "ssh-host",
            "pass",
            "boxes have no SSH Service: people reach them through the controller "
            "(devbox ssh, devbox config-ssh), which must reach the boxes' pods on port 2222",
        )
    if ssh.service_type == "LoadBalancer":
        return finding(
            None, "ssh-host", "pass", "SSH commands show each box's LoadBalancer address"
        )
    if ssh.host:
        return finding(
            None, "ssh-host", "pass", f"SSH commands show {ssh.host} and each box's node port"
        )
    return finding(
        None,
        "ssh-host",
        "warn",
        "controller.ssh.serviceType is NodePort and controller.ssh.host is empty: no SSH "
        "command can be printed, and boxes stay starting, waiting for an SSH address",
        "set controller.ssh.host to an address of the nodes that users can reach, or set "
        "controller.ssh.serviceType to LoadBalancer where the cluster provides load balancers",
    )


def check_pull_policy(profile: ImageProfileConfig) -> DoctorCheck:
    where = f"image profile {profile.name}"
    if profile.pull_policy == "Never":
        return finding(
            None,
            "image-pull-policy",
            "warn",
            f"{where} has pullPolicy Never: its boxes start only on nodes that already hold "
            "the image, and fail with ErrImageNeverPull elsewhere",
            "load the image on every node that may run boxes, or set pullPolicy to IfNotPresent",
        )
    if profile.pull_policy == "Always" and is_digest(profile.image):
        return finding(
            None,
            "image-pull-policy",
            "warn",
            f"{where} has pullPolicy Always on a digest: the image can never change, yet "
            "every start asks the registry, and fails while the registry is unreachable",
            "set pullPolicy to IfNotPresent",
        )
    return finding(
        None, "image-pull-policy", "pass", f"{where} is pulled with {profile.pull_policy}"
    )
