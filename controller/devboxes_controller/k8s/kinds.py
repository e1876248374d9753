"""The kinds the controller lists and watches, as definitions: the generated API that
serves each and the name the client gives it. The calls follow from them, so no module
above this layer imports the Kubernetes client to list, watch or write a kind.

Modelled on lightkube's resource definitions: a kind knows its API group and its names,
and ``list``, ``read``, ``create`` or ``patch`` of it is the client's method of that verb
and name. Each list call is also the kind's watch call (``watch=True``), as in the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from .kube import ApiClient

# A generated list method: keyword arguments in (``namespace`` for a namespaced list, the
# selectors, ``watch``, ``resource_version``...), the raw response out with
# ``_preload_content=False``.
ListCall = Callable[..., Any]


@dataclass(frozen=True)
class Kind:
    """One kind: ``plural`` as RBAC and the URL name it, ``singular`` as the generated
    client names its methods, ``api`` the client's class of its API group."""

    plural: str
    singular: str
    api: Callable[[ApiClient], Any]
    namespaced: bool

    def lister(self, api: ApiClient, all_namespaces: bool = False) -> ListCall:
        """The list (and watch) call of the kind: of one namespace, which the call then
        takes as ``namespace``, or of every namespace; a cluster kind has only the one."""
        if not self.namespaced:
            name = f"list_{self.singular}"
        elif all_namespaces:
            name = f"list_{self.singular}_for_all_namespaces"
        else:
            name = f"list_namespaced_{self.singular}"
        function: ListCall = getattr(self.api(api), name)
        return function

    def call(self, api: ApiClient, verb: str) -> Callable[..., Any]:
        """The call of ``verb`` (read, create, patch, delete) on one object of the kind,
        for ``kube.call``."""
        scope = "namespaced_" if self.namespaced else ""
        function: Callable[..., Any] = getattr(self.api(api), f"{verb}_{scope}{self.singular}")
        return function


DEPLOYMENTS = Kind("deployments", "deployment", client.AppsV1Api, True)
REPLICASETS = Kind("replicasets", "replica_set", client.AppsV1Api, True)
PODS = Kind("pods", "pod", client.CoreV1Api, True)
SERVICES = Kind("services", "service", client.CoreV1Api, True)
PERSISTENT_VOLUME_CLAIMS = Kind(
    "persistentvolumeclaims", "persistent_volume_claim", client.CoreV1Api, True
)
EVENTS = Kind("events", "event", client.CoreV1Api, True)
CONFIGMAPS = Kind("configmaps", "config_map", client.CoreV1Api, True)
NODES = Kind("nodes", "node", client.CoreV1Api, False)
RUNTIME_CLASSES = Kind("runtimeclasses", "runtime_class", client.NodeV1Api, False)
RESOURCE_CLAIM_TEMPLATES = Kind(
    "resourceclaimtemplates", "resource_claim_template", client.ResourceV1Api, True
)
RESOURCE_CLAIMS = Kind("resourceclaims", "resource_claim", client.ResourceV1Api, True)
RESOURCE_SLICES = Kind("resourceslices", "resource_slice", client.ResourceV1Api, False)
DEVICE_CLASSES = Kind("deviceclasses", "device_class", client.ResourceV1Api, False)


def status_of(err: BaseException) -> int | None:
    """The HTTP status of an apiserver's answer raised by the client; None for any other
    failure (a dropped connection, a timeout)."""
    if isinstance(err, client.ApiException):
        return int(err.status) if err.status is not None else None
    return None


def describe(err: BaseException) -> str:
    """A failure in one line for a log: the apiserver's status and reason, or the error."""
    if isinstance(err, client.ApiException):
        return f"HTTP {err.status}: {err.reason}"
    return f"{type(err).__name__}: {err}"
