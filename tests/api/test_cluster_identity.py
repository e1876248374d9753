"""The capabilities say which cluster a controller serves: the name its operator gives it
and the UID of the cluster's kube-system Namespace, the same through every replica and URL;
a controller that may not read that Namespace serves everything else, says why once, and
gives the id as soon as a later read may."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from support import Api, StartController, service_account_kubeconfig, wait_for

from devboxes_sdk.models import Capabilities, ClusterIdentity

UNREAD = "cannot read the cluster id"


def kube_system_uid(kube: Any) -> str:
    uid: str = client.CoreV1Api(kube).read_namespace("kube-system").metadata.uid
    return uid


def cluster_of(controller: Controller, query: str = "") -> dict[str, Any]:
    """The capabilities' cluster: without a query from the bodies answered before routing,
    with one through the routes."""
    body = Api(controller).call("GET", f"/capabilities{query}")
    Capabilities.model_validate(body)
    cluster: dict[str, Any] = body["cluster"]
    return cluster


def log_lines(controller: Controller, words: str) -> list[dict[str, Any]]:
    lines = controller.log.read_text().splitlines()
    return [
        entry
        for line in lines
        if line.startswith("{") and words in (entry := json.loads(line))["message"]
    ]


def test_the_capabilities_name_the_cluster_and_give_its_kube_system_uid(
    start_controller: StartController, namespace: str, kube: Any
) -> None:
    settings = {**example_settings(namespace), "cluster": {"name": "testbed-a"}}
    first, second = start_controller(settings), start_controller(settings)
    expected = {"name": "testbed-a", "id": kube_system_uid(kube)}
    for replica in (first, second):
        wait_for(lambda replica=replica: cluster_of(replica)["id"], timeout=60)
        assert cluster_of(replica) == expected
        assert cluster_of(replica, "?through=routes") == expected
    parsed = Capabilities.model_validate(Api(first).call("GET", "/capabilities")).cluster
    assert parsed == ClusterIdentity(name="testbed-a", id=expected["id"])
    # Two URLs of one cluster give one body, tag and all.
    tags = {
        requests.get(f"{r.url}/api/v1/capabilities", headers=r.headers(), timeout=30).headers[
            "ETag"
        ]
        for r in (first, second)
    }
    assert len(tags) == 1
    assert not log_lines(first, UNREAD)


def namespace_only_account(kube: Any, namespace: str) -> str:
    """A ServiceAccount allowed everything the controller calls in ``namespace``, and nothing
    cluster-wide."""
    rbac = client.RbacAuthorizationV1Api(kube)
    client.CoreV1Api(kube).create_namespaced_service_account(
        namespace, {"metadata": {"name": "unnamed"}}
    )
    rules = [
        {
            "apiGroups": ["", "apps", "coordination.k8s.io", "resource.k8s.io"],
            "resources": ["*"],
            "verbs": ["*"],
        }
    ]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "unnamed"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "unnamed"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "unnamed"},
            "subjects": [{"kind": "ServiceAccount", "name": "unnamed", "namespace": namespace}],
        },
    )
    return "unnamed"


def test_without_the_read_the_id_is_unknown_said_once_and_a_grant_fills_it_in(
    testbed: Testbed,
    kube: Any,
    namespace: str,
    start_controller: StartController,
    tmp_path: Path,
) -> None:
    account = namespace_only_account(kube, namespace)
    kubeconfig = service_account_kubeconfig(
        testbed, kube, namespace, account, tmp_path / "unnamed-kubeconfig"
    )
    settings = {**example_settings(namespace), "availability": {"enabled": False}}
    controller = start_controller(settings, kubeconfig=kubeconfig)
    # Ready, and serving: only the id is missing.
    assert Api(controller).call("GET", "/devboxes")["items"] == []
    assert cluster_of(controller) == {"name": None, "id": None}
    (said,) = wait_for(lambda: log_lines(controller, UNREAD), timeout=30)
    assert said["level"] == "warning"
    assert "forbidden" in said["problem"]

    rbac = client.RbacAuthorizationV1Api(kube)
    role = f"{namespace}-kube-system-read"
    rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["namespaces"],
                    "resourceNames": ["kube-system"],
                    "verbs": ["get"],
                }
            ],
        }
    )
    try:
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": role},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            }
        )
        uid = kube_system_uid(kube)
        wait_for(lambda: cluster_of(controller)["id"] == uid, timeout=120)
        assert cluster_of(controller, "?through=routes") == {"name": None, "id": uid}
        assert len(log_lines(controller, UNREAD)) == 1
        assert [line["cluster_id"] for line in log_lines(controller, "cluster id read")] == [uid]
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)
