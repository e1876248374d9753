"""Boxes follow the release: a changed settings file reaches existing boxes' pods, from
their pinned record, against the real testbed."""

from __future__ import annotations

import json
from typing import Any

import requests
from devboxes_controller.box import naming
from devboxes_testbed import MIG, ROCM
from devboxes_testbed.controller import Controller, example_settings, without_gpu_profiles
from kubernetes import client
from support import StartController, event_messages, wait_for


def call(process: Controller, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    response = requests.request(
        method, f"{process.url}/api/v1{path}", headers=process.headers(), timeout=150, **kwargs
    )
    assert response.ok, response.text
    return dict(response.json())


def ready(process: Controller, name: str) -> dict[str, Any]:
    box = call(process, "GET", f"/devboxes/{name}", params={"wait": "ready", "timeout": 120})
    assert box["state"] == "ready", box
    return box


def pod_template(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    response = client.AppsV1Api(kube).read_namespaced_deployment(
        naming.object_names(name).deployment, namespace, _preload_content=False
    )
    template: dict[str, Any] = json.loads(response.data)["spec"]["template"]
    return template


def containers(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in spec["containers"]}


def live_pod(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    pods = client.CoreV1Api(kube).list_namespaced_pod(
        namespace, label_selector=f"{naming.LABEL_BOX}={name}", _preload_content=False
    )
    live = [p for p in json.loads(pods.data)["items"] if not p["metadata"].get("deletionTimestamp")]
    return live[0] if len(live) == 1 else None


def test_a_new_sidecar_reaches_stopped_boxes_at_once_and_running_ones_on_restart(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    settings = example_settings(namespace)
    first = start_controller(settings)
    call(first, "POST", "/devboxes", json={"name": "parked", "gpu": {"profile": MIG}})
    call(first, "POST", "/devboxes", json={"name": "busy", "gpu": {"profile": ROCM}})
    ready(first, "parked")
    ready(first, "busy")
    call(first, "POST", "/devboxes/parked/stop")
    before = {name: pod_template(kube, namespace, name) for name in ("parked", "busy")}
    first.stop()

    # The next release adds a sidecar, and the MIG profile is gone from the catalog.
    release = without_gpu_profiles(settings, MIG)
    release["sidecars"] = [{"name": "agent", "command": ["sleep", "infinity"]}]
    second = start_controller(release)

    def parked_rebuilt() -> dict[str, Any] | None:
        """the reconciler adds the sidecar to the stopped box's pod template"""
        template = pod_template(kube, namespace, "parked")
        return template if "agent" in containers(template["spec"]) else None

    template = wait_for(parked_rebuilt, timeout=60)
    agent = containers(template["spec"])["agent"]
    assert agent["image"] == "devboxes/workspace:0.1.0", "sidecars run the release image"
    assert agent.get("resources", {}) == {}, "a sidecar never gets the GPU"
    main = containers(template["spec"])["devbox"]
    old_main = containers(before["parked"]["spec"])["devbox"]
    assert main["image"] == old_main["image"] == "devboxes/workspace-cuda:12.8"
    assert main["resources"] == old_main["resources"]
    assert main["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert template["spec"]["runtimeClassName"] == "nvidia"
    assert template["spec"]["tolerations"] == before["parked"]["spec"]["tolerations"]
    assert any(
        "sidecar agent added" in m
        for m in wait_for(lambda: event_messages(kube, namespace, "parked", "Rebuilt"), timeout=60)
    )
    assert call(second, "GET", "/devboxes/parked")["restart_required"] is False

    # The running box keeps its pod until a restart, and says why.
    busy = call(second, "GET", "/devboxes/busy")
    assert busy["state"] == "ready", busy
    assert busy["restart_required"] is True
    assert "sidecar agent added" in busy["restart_reason"]
    assert "agent" not in containers(pod_template(kube, namespace, "busy")["spec"])

    call(second, "POST", "/devboxes/busy/stop")
    call(second, "POST", "/devboxes/busy/start")
    busy = ready(second, "busy")
    assert busy["restart_required"] is False
    assert busy["restart_reason"] is None
    pod = wait_for(lambda: live_pod(kube, namespace, "busy"), timeout=60)
    assert set(containers(pod["spec"])) == {"devbox", "agent"}
    main = containers(pod["spec"])["devbox"]
    assert main["image"] == "devboxes/workspace-rocm:6.4"
    assert main["resources"]["limits"]["amd.com/gpu"] == "1"
    assert pod["spec"]["securityContext"]["supplementalGroups"] == [44, 109]

    # The box whose profile was removed starts from its snapshot, with the sidecar.
    call(second, "POST", "/devboxes/parked/start")
    parked = ready(second, "parked")
    assert parked["gpu"]["profile"] == MIG
    pod = wait_for(lambda: live_pod(kube, namespace, "parked"), timeout=60)
    assert set(containers(pod["spec"])) == {"devbox", "agent"}
    assert containers(pod["spec"])["devbox"]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    for name in ("parked", "busy"):
        call(second, "DELETE", f"/devboxes/{name}", params={"purge": "true"})
