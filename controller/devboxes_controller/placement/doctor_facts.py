"""What the GPU doctor knows: the permissions it asks the apiserver about, what it read
from the cluster, and how a finding is written; pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from devboxes_sdk.models import DoctorCheck, DoctorVerdict

from ..k8s.kube import Obj


@dataclass(frozen=True)
class Permission:
    """One verb on one resource that the controller calls; ``namespaced`` False is cluster-wide."""

    verb: str
    resource: str
    group: str = ""
    namespaced: bool = True
    # Without it only an optional feature suffers (availability, the cluster's id, parts
    # of the doctor).
    optional: bool = False
    # The one object it is granted on, when not every object of the resource.
    name: str | None = None

    def describe(self) -> str:
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        resource += f"/{self.name}" if self.name else ""
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
    *_grant("", "configmaps", "get list watch create patch update delete"),
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
    # The cluster's id in the capabilities (k8s.cluster_id).
    *_grant("", "namespaces", "get", namespaced=False, optional=True, name="kube-system"),
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


def finding(
    profile: str | None, check: str, verdict: DoctorVerdict, message: str, fix: str | None = None
) -> DoctorCheck:
    return DoctorCheck(profile=profile, check=check, verdict=verdict, message=message, fix=fix)


def cannot_read(profile: str | None, check: str, what: str, facts: Facts) -> DoctorCheck:
    return finding(
        profile,
        check,
        "warn",
        f"cannot read {what}: {facts.unreadable.get(what, 'unknown reason')}",
        f"grant the controller list on {what} (the chart's ClusterRole and Role do)",
    )
