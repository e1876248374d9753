"""A box pod whose node was refused its volumes for a moment is retried at once: the rule
with plain data, and the controller against the real testbed answering a kubelet's report."""

from __future__ import annotations

import json
import uuid
from typing import Any

from devboxes_controller.box import naming
from devboxes_controller.control.mount_retry import (
    MAX_RETRIES,
    NOT_YET_RELATED,
    Retry,
    retries,
    waiting_on_node,
)
from kubernetes import client
from support import StartController, wait_for_value

REFUSED = (
    "Unable to attach or mount volumes: unmounted volumes=[home], unattached volumes=[], "
    "failed to process volumes=[home]: error processing PVC boxes/devbox-a-home: failed to "
    'fetch PVC from API server: persistentvolumeclaims "devbox-a-home" is forbidden: User '
    '"system:node:n1" cannot get resource "persistentvolumeclaims" in API group "" in the '
    f"namespace \"boxes\": {NOT_YET_RELATED} 'n1' and this object"
)
MISSING = 'Unable to attach or mount volumes: persistentvolumeclaim "devbox-a-home" not found'


def report(pod: str, message: str, version: str = "7", kind: str = "Pod") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pod}.1", "resourceVersion": version},
        "reason": "FailedMount",
        "involvedObject": {"kind": kind, "name": pod},
        "message": message,
    }


def pending_on(node: str | None, phase: str = "Pending") -> dict[str, Any]:
    return {"spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def test_a_pod_on_its_node_and_not_started_waits_on_it() -> None:
    assert waiting_on_node(pending_on("n1"))
    assert not waiting_on_node(pending_on(None))
    assert not waiting_on_node(pending_on("n1", "Running"))
    assert not waiting_on_node(None)


def test_each_report_of_the_authorizers_lag_is_retried_once() -> None:
    waiting = {"devbox-a-1-x"}.__contains__
    reports = [report("devbox-a-1-x", REFUSED)]
    assert retries(reports, waiting, {}) == [Retry("devbox-a-1-x", "7", 1)]
    # The same report is not retried twice; its next occurrence (a new version) is.
    assert retries(reports, waiting, {"devbox-a-1-x": (1, "7")}) == []
    again = [report("devbox-a-1-x", REFUSED, version="9")]
    assert retries(again, waiting, {"devbox-a-1-x": (1, "7")}) == [Retry("devbox-a-1-x", "9", 2)]


def test_other_failures_started_pods_and_a_node_refused_for_good_are_left_to_the_kubelet() -> None:
    waiting = {"devbox-a-1-x"}.__contains__
    assert retries([report("devbox-a-1-x", MISSING)], waiting, {}) == []
    assert retries([report("devbox-b-1-x", REFUSED)], waiting, {}) == []
    assert retries([report("devbox-a-1-x", REFUSED, kind="Node")], waiting, {}) == []
    spent = {"devbox-a-1-x": (MAX_RETRIES, "6")}
    assert retries([report("devbox-a-1-x", REFUSED)], waiting, spent) == []


# Bound to a node no kubelet serves, a pod waits there as one whose volumes are refused.
ABSENT_NODE = "devbox-absent-node"


def box_pod(name: str, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "devbox", "image": "busybox"}]}
    if node is None:
        # No scheduler answers to this name: the pod waits for the test to bind it.
        spec["schedulerName"] = "devboxes-test-nobody"
    else:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "labels": {naming.LABEL_MANAGED_BY: naming.MANAGER, naming.LABEL_BOX: name},
        },
        "spec": spec,
    }


def kubelet_report(core: Any, namespace: str, pod: str, message: str) -> str:
    name = f"{pod}.{uuid.uuid4().hex[:8]}"
    core.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace},
            "reason": "FailedMount",
            "message": message,
            "type": "Warning",
            "count": 1,
            "source": {"component": "kubelet"},
        },
    )
    return name


def retried(core: Any, namespace: str, pod: str) -> str | None:
    body = json.loads(core.read_namespaced_pod(pod, namespace, _preload_content=False).data)
    annotations = body["metadata"].get("annotations") or {}
    value = annotations.get(naming.ANNOTATION_MOUNT_RETRY)
    return None if value is None else str(value)


def test_the_leader_retries_a_pod_whose_node_was_refused_its_claim(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    start_controller()
    core = client.CoreV1Api(kube)
    lagging, later, missing = "devbox-lagging-1-a", "devbox-later-1-a", "devbox-missing-1-a"
    core.create_namespaced_pod(namespace, box_pod(lagging, ABSENT_NODE))
    core.create_namespaced_pod(namespace, box_pod(later, None))
    core.create_namespaced_pod(namespace, box_pod(missing, ABSENT_NODE))
    kubelet_report(core, namespace, later, REFUSED)
    kubelet_report(core, namespace, missing, MISSING)
    event = kubelet_report(core, namespace, lagging, REFUSED)
    wait_for_value(lambda: retried(core, namespace, lagging), "1", timeout=20)
    # Reports before it were answered before it: a pod not yet on a node, another failure.
    assert retried(core, namespace, later) is None
    assert retried(core, namespace, missing) is None
    # A report this replica read before it saw the pod on its node is answered once it does.
    core.create_namespaced_binding(
        namespace,
        {
            "metadata": {"name": later},
            "target": {"apiVersion": "v1", "kind": "Node", "name": ABSENT_NODE},
        },
        # The apiserver answers a Status, which the client's model of a Binding refuses.
        _preload_content=False,
    )
    wait_for_value(lambda: retried(core, namespace, later), "1", timeout=20)
    # The kubelet's next refusal of the same pod is the same Event, counted once more.
    core.patch_namespaced_event(event, namespace, {"count": 2})
    wait_for_value(lambda: retried(core, namespace, lagging), "2", timeout=20)
    assert retried(core, namespace, missing) is None
