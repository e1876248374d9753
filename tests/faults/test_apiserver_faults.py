"""The controller under the failures real control planes have: the apiserver restarts
(every managed upgrade does it), etcd restarts, the apiserver freezes. Outcomes only:
what answers, what the caches hold afterwards, what was left behind."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import requests
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller
from kubernetes import client
from support import StartController, service_account_kubeconfig, wait_for

from devboxes_sdk.models import IDEMPOTENCY_HEADER

MANAGED = "app.kubernetes.io/managed-by=devboxes-controller"


def api(controller: Controller, method: str, path: str, timeout: float = 30, **kwargs: Any) -> Any:
    return requests.request(
        method,
        f"{controller.url}/api/v1{path}",
        headers=controller.headers(),
        timeout=timeout,
        **kwargs,
    )


def ready(controller: Controller) -> bool:
    """the controller reports ready"""
    return requests.get(f"{controller.url}/ready", timeout=10).status_code == 200


def not_ready(controller: Controller) -> bool:
    """the controller reports not ready"""
    return requests.get(f"{controller.url}/ready", timeout=10).status_code == 503


def listed(controller: Controller) -> set[str]:
    response = api(controller, "GET", "/devboxes")
    assert response.status_code == 200, response.text
    return {box["name"] for box in response.json()["items"]}


def in_cluster(kube: Any, namespace: str) -> set[str]:
    deployments = client.AppsV1Api(kube).list_namespaced_deployment(
        namespace, label_selector=MANAGED
    )
    return {d.metadata.name.removeprefix("devbox-") for d in deployments.items}


def create(controller: Controller, name: str) -> None:
    response = api(controller, "POST", "/devboxes", json={"name": name})
    assert response.status_code == 201, response.text


def create_with_key(controller: Controller, i: int) -> Any:
    """The ``i``th box's create, always with the same idempotency key."""
    headers = {**controller.headers(), IDEMPOTENCY_HEADER: f"frozen-key-{i}"}
    return requests.post(
        f"{controller.url}/api/v1/devboxes",
        json={"name": f"frozen-{i}"},
        headers=headers,
        timeout=30,
    )


def assert_serves_what_it_knows(
    controller: Controller, boxes: set[str], refused_name: str
) -> requests.Response:
    """While the cluster cannot store anything the controller says it is not ready, yet
    answers its health check and lists ``boxes`` from memory; it refuses the create of
    ``refused_name`` with 503. The refusal."""
    wait_for(lambda: not_ready(controller), timeout=60)
    assert requests.get(f"{controller.url}/health", timeout=10).status_code == 200
    assert listed(controller) == boxes
    refused = api(controller, "POST", "/devboxes", json={"name": refused_name})
    assert refused.status_code == 503, refused.text
    return refused


def assert_caches_equal_the_cluster(controller: Controller, kube: Any, ns: str) -> None:
    views: list[tuple[set[str], set[str]]] = []

    def same_boxes() -> bool:
        """the controller lists exactly the boxes in the cluster"""
        views.append((listed(controller), in_cluster(kube, ns)))
        return views[-1][0] == views[-1][1]

    try:
        wait_for(same_boxes, timeout=60)
    finally:
        print("controller lists / cluster has:", views[-1])
    replicas = {
        d.metadata.name.removeprefix("devbox-"): d.spec.replicas
        for d in client.AppsV1Api(kube).list_namespaced_deployment(ns).items
    }
    for name, count in replicas.items():
        box = api(controller, "GET", f"/devboxes/{name}").json()
        assert (box["state"] == "stopped") == (count == 0), box


def test_caches_recover_after_an_apiserver_restart(
    fault_testbed: Testbed, fault_namespace: str, fault_controller: Controller
) -> None:
    controller = fault_controller
    for name in ("alpha", "bravo", "charlie"):
        create(controller, name)

    apiserver = fault_testbed.component("kube-apiserver")
    apiserver.stop()
    # While it is gone the process keeps serving what it knows, and says it is not ready.
    refused = assert_serves_what_it_knows(controller, {"alpha", "bravo", "charlie"}, "delta")
    assert refused.headers["Retry-After"]
    fault_testbed.restart("kube-apiserver")

    # Changes made by others while the controller's watches are reconnecting.
    kube = fault_testbed.api_client()
    apps = client.AppsV1Api(kube)
    apps.delete_namespaced_deployment("devbox-alpha", fault_namespace)
    apps.patch_namespaced_deployment_scale(
        "devbox-bravo", fault_namespace, {"spec": {"replicas": 0}}
    )
    wait_for(lambda: ready(controller), timeout=90)
    assert_caches_equal_the_cluster(controller, kube, fault_namespace)
    assert api(controller, "GET", "/devboxes/alpha").status_code == 404
    # The name deleted behind the controller's back is free again; the rest works.
    create(controller, "alpha")
    assert api(controller, "GET", "/devboxes/alpha").status_code == 200
    assert api(controller, "DELETE", "/devboxes/charlie").status_code == 200
    assert_caches_equal_the_cluster(controller, kube, fault_namespace)
    log = controller.log.read_text()
    assert "watch recovered" in log
    assert "KeyError" not in log


def test_caches_recover_after_an_etcd_restart(
    fault_testbed: Testbed, fault_namespace: str, fault_controller: Controller
) -> None:
    controller = fault_controller
    create(controller, "echo")
    create(controller, "foxtrot")

    fault_testbed.component("etcd").stop()
    # The apiserver still answers, but cannot store anything: not ready, writes refused.
    assert_serves_what_it_knows(controller, {"echo", "foxtrot"}, "golf")
    fault_testbed.restart("etcd")

    kube = fault_testbed.api_client()
    wait_for(lambda: ready(controller), timeout=120)
    client.AppsV1Api(kube).delete_namespaced_deployment("devbox-echo", fault_namespace)
    create(controller, "golf")
    assert_caches_equal_the_cluster(controller, kube, fault_namespace)
    assert api(controller, "POST", "/devboxes/foxtrot/stop").status_code == 200
    assert_caches_equal_the_cluster(controller, kube, fault_namespace)


def test_a_frozen_apiserver_delays_only_writes_and_leaves_nothing_half_made(
    fault_testbed: Testbed, fault_namespace: str, fault_controller: Controller
) -> None:
    controller = fault_controller
    create(controller, "hotel")
    fault_testbed.freeze("kube-apiserver")
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=70) as pool:
            creates = [pool.submit(create_with_key, controller, i) for i in range(60)]
            # Reads and health keep answering while every write is stuck or refused.
            reads = [
                pool.submit(requests.get, f"{controller.url}/health", timeout=10),
                pool.submit(api, controller, "GET", "/devboxes", timeout=10),
                pool.submit(api, controller, "GET", "/devboxes/hotel", timeout=10),
                pool.submit(api, controller, "GET", "/capabilities", timeout=10),
            ]
            assert [r.result().status_code for r in reads] == [200, 200, 200, 200]
            answers = [c.result() for c in creates]
        # Stuck or refused (503), or past the operator's share of the write pool (429).
        codes = {a.status_code for a in answers}
        assert 503 in codes, {a.text for a in answers}
        assert codes <= {429, 503}, {a.text for a in answers}
        assert all(a.headers.get("Retry-After") for a in answers)
        wait_for(lambda: not_ready(controller), timeout=60)
    finally:
        fault_testbed.thaw("kube-apiserver")

    wait_for(lambda: ready(controller), timeout=90)
    kube = fault_testbed.api_client()
    core = client.CoreV1Api(kube)

    def every_box_whole() -> bool:
        """every Deployment the freeze left has its Service and home claim"""
        boxes = in_cluster(kube, fault_namespace)
        services = {s.metadata.name for s in core.list_namespaced_service(fault_namespace).items}
        claims = {
            c.metadata.name
            for c in core.list_namespaced_persistent_volume_claim(fault_namespace).items
        }
        return all(f"devbox-{b}-ssh" in services and f"devbox-{b}-home" in claims for b in boxes)

    wait_for(every_box_whole, timeout=60)
    assert_caches_equal_the_cluster(controller, kube, fault_namespace)
    # Whether or not the refused create was applied, its retry makes exactly one box.
    retries = [create_with_key(controller, i) for i in range(60)]
    assert [r.status_code for r in retries] == [201] * 60, {r.text for r in retries}
    assert in_cluster(kube, fault_namespace) == {"hotel", *(f"frozen-{i}" for i in range(60))}
    create(controller, "india")


def test_a_replica_whose_caches_cannot_sync_never_leads(
    fault_testbed: Testbed,
    fault_kube: Any,
    fault_namespace: str,
    start_fault_controller: StartController,
    tmp_path: Any,
) -> None:
    """A replica allowed everything but watching pods: it must not take the Lease."""
    rbac = client.RbacAuthorizationV1Api(fault_kube)
    core = client.CoreV1Api(fault_kube)
    core.create_namespaced_service_account(fault_namespace, {"metadata": {"name": "blind"}})
    rules = [
        {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": ["*"]},
        {
            "apiGroups": [""],
            "resources": ["services", "persistentvolumeclaims", "events", "configmaps"],
            "verbs": ["*"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
    ]
    rbac.create_namespaced_role(fault_namespace, {"metadata": {"name": "blind"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        fault_namespace,
        {
            "metadata": {"name": "blind"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "blind"},
            "subjects": [{"kind": "ServiceAccount", "name": "blind", "namespace": fault_namespace}],
        },
    )
    kubeconfig = service_account_kubeconfig(
        fault_testbed, fault_kube, fault_namespace, "blind", tmp_path / "blind-kubeconfig"
    )
    blind = start_fault_controller(kubeconfig, until="/health")
    # Its pods watch is refused, so it never becomes ready...
    wait_for(lambda: "pods" in requests.get(f"{blind.url}/ready", timeout=10).text, timeout=60)
    coordination = client.CoordinationV1Api(fault_kube)

    def holder() -> str | None:
        try:
            lease = coordination.read_namespaced_lease("devboxes-controller", fault_namespace)
        except client.ApiException:
            return None
        return lease.spec.holder_identity

    # ...and never leads, alone, over several lease periods.
    for _ in range(40):
        assert holder() != blind.identity
        assert not_ready(blind)
        time.sleep(0.25)
    # A healthy replica beside it takes the Lease at once.
    healthy = start_fault_controller()
    wait_for(lambda: holder() == healthy.identity, timeout=60)
    assert holder() != blind.identity
