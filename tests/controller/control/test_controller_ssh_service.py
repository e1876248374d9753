"""A stopped box holds no SSH Service, and gets its node port back when it starts: on the
real testbed, through the controller's API and its reconciler."""

from __future__ import annotations

from typing import Any

from devboxes_controller.box import naming, render, ssh_port
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_testbed.controller import example_settings
from kubernetes import client
from live_objects import live_object
from support import Api, StartController, event_messages, two_hour_spec, wait_for


def node_port(kube: Any, namespace: str, name: str) -> int | None:
    """The node port of the box's SSH Service; None when it has no Service."""
    service = live_object(
        client.CoreV1Api(kube).read_namespaced_service, naming.object_names(name).service, namespace
    )
    return None if service is None else int(service.spec.ports[0].node_port)


def recorded_port(kube: Any, namespace: str, name: str) -> str | None:
    deployment = client.AppsV1Api(kube).read_namespaced_deployment(
        naming.object_names(name).deployment, namespace
    )
    return (deployment.metadata.annotations or {}).get(ssh_port.ANNOTATION_SSH_NODE_PORT)


def squat(kube: Any, namespace: str, port: int) -> bool:
    """Take the node port with another Service; False while the port is still allocated."""
    try:
        client.CoreV1Api(kube).create_namespaced_service(
            namespace,
            {
                "metadata": {"name": "squatter"},
                "spec": {
                    "type": "NodePort",
                    "selector": {"app": "squatter"},
                    "ports": [{"port": 22, "nodePort": port}],
                },
            },
        )
    except client.ApiException as err:
        if err.status == 422 and "already allocated" in str(err.body):
            return False
        raise
    return True


def test_stop_frees_the_service_and_start_brings_it_back_on_the_same_port(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    api = Api(start_controller())
    api.created("parked")
    api.created("busy")
    port = api.wait_ready("parked")["ssh_port"]
    assert api.wait_ready("busy")["state"] == "ready"
    assert node_port(kube, namespace, "parked") == port

    stopped = api.call("POST", "/devboxes/parked/stop")
    assert stopped["state"] == "stopped"
    assert (stopped["ssh_host"], stopped["ssh_command"]) == (None, None)
    # Deleted before the stop answered: the node port is free for other Services.
    assert node_port(kube, namespace, "parked") is None
    assert recorded_port(kube, namespace, "parked") == str(port)

    # The running box's missing Service is repaired; the pass that repairs it passes
    # over the stopped box too and leaves it without one.
    client.CoreV1Api(kube).delete_namespaced_service(naming.object_names("busy").service, namespace)
    wait_for(lambda: event_messages(kube, namespace, "busy", "Repaired"), timeout=60)
    assert node_port(kube, namespace, "busy") is not None
    assert api.wait_ready("busy")["state"] == "ready"
    assert node_port(kube, namespace, "parked") is None
    assert event_messages(kube, namespace, "parked", "Repaired") == []
    assert api.box("parked")["state"] == "stopped"

    api.call("POST", "/devboxes/parked/start")
    ready = api.wait_ready("parked")
    assert ready["state"] == "ready", ready
    assert ready["ssh_port"] == port
    assert ready["ssh_command"] == f"ssh -p {port} dev@{ready['ssh_host']}"
    assert node_port(kube, namespace, "parked") == port
    assert event_messages(kube, namespace, "parked", "SshPortChanged") == []

    # Deleting a stopped box, which has no Service, deletes it all the same.
    api.call("POST", "/devboxes/parked/stop")
    assert api.delete("parked", purge=True).status_code == 200
    assert api.get("parked").status_code == 404


def test_a_port_taken_while_the_box_was_stopped_is_replaced_and_said(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    api = Api(start_controller())
    api.created("moved")
    port = api.wait_ready("moved")["ssh_port"]
    api.call("POST", "/devboxes/moved/stop")
    wait_for(lambda: node_port(kube, namespace, "moved") is None)
    # The apiserver frees a deleted Service's node port a moment after the delete.
    wait_for(lambda: squat(kube, namespace, port))

    api.call("POST", "/devboxes/moved/start")
    ready = api.wait_ready("moved")
    assert ready["state"] == "ready", ready
    assert ready["ssh_port"] != port
    assert node_port(kube, namespace, "moved") == ready["ssh_port"]
    messages = wait_for(lambda: event_messages(kube, namespace, "moved", "SshPortChanged"))
    assert messages == [
        f"SSH node port {port} was taken while the box was stopped; it now has node port "
        f"{ready['ssh_port']}, and its ssh command changed"
    ]


def test_a_stopped_box_that_kept_its_service_gives_it_back(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    """A box stopped by a release that kept the Services of stopped boxes."""
    settings = settings_from_mapping(example_settings(namespace))
    spec = two_hour_spec("older")
    core = client.CoreV1Api(kube)
    core.create_namespaced_persistent_volume_claim(namespace, render.render_pvc(spec, settings))
    deployment = client.AppsV1Api(kube).create_namespaced_deployment(
        namespace, render.render_deployment(spec, settings, replicas=0)
    )
    service = render.render_service(spec, settings)
    service["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment.metadata.name,
            "uid": deployment.metadata.uid,
        }
    ]
    port = int(core.create_namespaced_service(namespace, service).spec.ports[0].node_port)

    api = Api(start_controller())
    wait_for(lambda: node_port(kube, namespace, "older") is None, timeout=60)
    assert recorded_port(kube, namespace, "older") == str(port)
    assert wait_for(lambda: event_messages(kube, namespace, "older", "ServiceRemoved")) == [
        f"Removed the SSH Service of the stopped box; node port {port} is kept for its next start"
    ]
    assert api.box("older")["state"] == "stopped"

    api.call("POST", "/devboxes/older/start")
    ready = api.wait_ready("older")
    assert ready["state"] == "ready", ready
    assert ready["ssh_port"] == port
