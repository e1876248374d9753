"""What the operator preflight asks the apiserver: the cluster objects it lists, a dry-run
create, and whether the controller may do each thing it needs (SelfSubjectAccessReview).

Each read returns the raw JSON body and raises :class:`~.kube.ApiProblem` as
:func:`~.kube.call` does.
"""

from __future__ import annotations

from . import kube
from .kube import ApiClient, Obj


def list_nodes(api: ApiClient) -> Obj:
    return kube.call(kube.apis(api).core.list_node)


def list_runtime_classes(api: ApiClient) -> Obj:
    return kube.call(kube.apis(api).node.list_runtime_class)


def list_storage_classes(api: ApiClient) -> Obj:
    return kube.call(kube.apis(api).storage.list_storage_class)


def list_resource_quotas(api: ApiClient, namespace: str) -> Obj:
    return kube.call(kube.apis(api).core.list_namespaced_resource_quota, namespace)


def list_limit_ranges(api: ApiClient, namespace: str) -> Obj:
    return kube.call(kube.apis(api).core.list_namespaced_limit_range, namespace)


def list_device_classes(api: ApiClient) -> Obj:
    return kube.call(kube.apis(api).resource.list_device_class)


def list_resource_slices(api: ApiClient) -> Obj:
    return kube.call(kube.apis(api).resource.list_resource_slice)


def dry_run_claim_template(api: ApiClient, namespace: str, template: Obj) -> None:
    """Have the apiserver validate ``template`` as it would a create, without storing it."""
    kube.call(
        kube.apis(api).resource.create_namespaced_resource_claim_template,
        namespace,
        template,
        dry_run="All",
    )


def access_allowed(api: ApiClient, attributes: dict[str, str]) -> bool:
    """Whether the controller's own identity may act as ``attributes`` (verb, resource,
    group and, for a namespaced resource, namespace) say."""
    review = kube.call(
        kube.apis(api).authorization.create_self_subject_access_review,
        {"spec": {"resourceAttributes": attributes}},
    )
    return bool((review.get("status") or {}).get("allowed"))
