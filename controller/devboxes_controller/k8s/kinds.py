"""The kinds the controller calls, as definitions: the API group that serves each (an
attribute of :class:`~.kube.Apis`, the one place the methods of every kind are made) and
the name the client gives it. The calls follow from them, so no module above this layer
names a generated method to list or watch a kind.

Modelled on lightkube's resource definitions: a kind knows its API group and its names,
and ``list``, ``read``, ``create`` or ``patch`` of it is the client's method of that verb
and name. Each list call is also the kind's watch call (``watch=True``), as in the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .rest import Resource, Verb, method_name

if TYPE_CHECKING:
    from .kube import Apis

# A generated list method: keyword arguments in (``namespace`` for a namespaced list, the
# selectors, ``watch``, ``resource_version``...), the raw response out.
ListCall = Callable[..., Any]


@dataclass(frozen=True)
class Kind(Resource):
    """One kind; its ``group`` is also the attribute of :class:`Apis` that serves it."""

    def lister(self, apis: Apis, all_namespaces: bool = False) -> ListCall:
        """The list (and watch) call of the kind: of one namespace, which the call then
        takes as ``namespace``, or of every namespace; a cluster kind has only the one."""
        function: ListCall = getattr(
            getattr(apis, self.group), method_name(self, "list", all_namespaces)
        )
        return function

    def call(self, apis: Apis, verb: Verb) -> Callable[..., Any]:
        """The call of ``verb`` (read, create, patch, delete) on one object of the kind,
        for ``kube.call``."""
        function: Callable[..., Any] = getattr(getattr(apis, self.group), method_name(self, verb))
        return function


DEPLOYMENTS = Kind("deployments", "deployment", "apps", True)
REPLICASETS = Kind("replicasets", "replica_set", "apps", True)
PODS = Kind("pods", "pod", "core", True)
SERVICES = Kind("services", "service", "core", True)
PERSISTENT_VOLUME_CLAIMS = Kind("persistentvolumeclaims", "persistent_volume_claim", "core", True)
EVENTS = Kind("events", "event", "core", True)
CONFIGMAPS = Kind("configmaps", "config_map", "core", True)
NODES = Kind("nodes", "node", "core", False)
# Only kube-system, whose UID is the cluster's id.
NAMESPACES = Kind("namespaces", "namespace", "core", False)
RUNTIME_CLASSES = Kind("runtimeclasses", "runtime_class", "node", False)
RESOURCE_CLAIM_TEMPLATES = Kind(
    "resourceclaimtemplates", "resource_claim_template", "resource", True
)
RESOURCE_CLAIMS = Kind("resourceclaims", "resource_claim", "resource", True)
RESOURCE_SLICES = Kind("resourceslices", "resource_slice", "resource", False)
DEVICE_CLASSES = Kind("deviceclasses", "device_class", "resource", False)
SECRETS = Kind("secrets", "secret", "core", True)
RESOURCE_QUOTAS = Kind("resourcequotas", "resource_quota", "core", True)
LIMIT_RANGES = Kind("limitranges", "limit_range", "core", True)
LEASES = Kind("leases", "lease", "coordination", True)
STORAGE_CLASSES = Kind("storageclasses", "storage_class", "storage", False)
SELF_SUBJECT_ACCESS_REVIEWS = Kind(
    "selfsubjectaccessreviews", "self_subject_access_review", "authorization", False
)
# Every kind the controller calls.
KINDS = (
    DEPLOYMENTS,
    REPLICASETS,
    PODS,
    SERVICES,
    PERSISTENT_VOLUME_CLAIMS,
    EVENTS,
    CONFIGMAPS,
    SECRETS,
    NODES,
    NAMESPACES,
    RESOURCE_QUOTAS,
    LIMIT_RANGES,
    RUNTIME_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DEVICE_CLASSES,
    LEASES,
    STORAGE_CLASSES,
    SELF_SUBJECT_ACCESS_REVIEWS,
)
