"""A box whose node stops reporting names the node: kwok stops standing in for the
kubelet of a node of the test's own, and the testbed's node lifecycle controller, once
the node has been silent for its grace period, marks the node and its pods not ready."""

from __future__ import annotations

from typing import Any

from devboxes_controller.box import naming, status
from devboxes_testbed.nodes import KWOK_ANNOTATION
from kubernetes import client
from support import Api, DevicePool, StartController, wait_for

BOX = "outage"
# kwok's last heartbeat may come up to 45 s after it lets go of the node, then the node
# lifecycle controller waits out its 50 s grace period and looks every 5 s: bounded with
# room to spare for a loaded machine.
SILENCE_SECONDS = 240


def test_a_box_whose_node_stopped_reporting_names_the_node(
    start_controller: StartController, pool: DevicePool, kube: Any, namespace: str
) -> None:
    api = Api(start_controller(pool.settings(namespace)))
    core = client.CoreV1Api(kube)
    api.created(BOX, gpu={"profile": DevicePool.PROFILE})
    try:
        api.wait_ready(BOX)
        (pod,) = core.list_namespaced_pod(
            namespace, label_selector=f"{naming.LABEL_BOX}={BOX}"
        ).items
        assert pod.spec.node_name == pool.node
        # kwok no longer manages the node, and its heartbeat stage no longer matches it.
        core.patch_node(pool.node, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}})
        core.patch_node_status(pool.node, {"status": {"phase": "Pending"}})

        def withdrawn() -> Any:
            """the node lifecycle controller took the pod's readiness away"""
            current = core.read_namespaced_pod(pod.metadata.name, namespace)
            conditions = {c.type: c for c in current.status.conditions}
            return conditions["Ready"] if conditions["Ready"].status == "False" else None

        ready = wait_for(withdrawn, timeout=SILENCE_SECONDS, interval=1)
        node = core.read_node(pool.node)
        assert [c.status for c in node.status.conditions if c.type == "Ready"] == ["Unknown"]
        since = ready.last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        expected = status.NODE_NOT_READY.format(node=pool.node, since=f" since {since}")
        wait_for(lambda: api.box(BOX)["message"] == expected, timeout=30)
        box = api.box(BOX)
        assert (box["state"], box["pod_ready"], box["ssh_command"]) == ("starting", False, None)
    finally:
        # kwok takes the node back and lets the box's pod go.
        core.patch_node(pool.node, {"metadata": {"annotations": {KWOK_ANNOTATION: "fake"}}})
        api.purge(BOX)
