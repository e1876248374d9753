"""Which pod template a box should have under the current release, from plain data."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from box_specs import atlas_spec
from devboxes_controller.box import naming, render, template
from devboxes_controller.config.settings import Settings, settings_from_mapping
from gpu_catalog import gpu_profile

EXPIRES = datetime(2030, 5, 17, 9, 30, 0, tzinfo=UTC)
L4 = gpu_profile(
    "nvidia-l4",
    "NVIDIA L4",
    workspaceImage="registry.example.com/workspace-cuda:12.8",
    runtimeClassName="nvidia",
    nodeSelector={"accelerator": "nvidia-l4"},
)


def release(**changes: Any) -> Settings:
    base: dict[str, Any] = {
        "namespace": "boxes",
        "workspaceImage": "registry.example.com/workspace:1.0",
        "gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4]},
    }
    return settings_from_mapping({**base, **changes})


def deployed(settings: Settings, gpu: bool = True) -> dict[str, Any]:
    """A box's Deployment as the apiserver returns it: with a uid and some defaults."""
    spec = atlas_spec(EXPIRES, settings.gpu.profile("nvidia-l4") if gpu else None)
    deployment = render.render_deployment(spec, settings, replicas=0)
    deployment["metadata"]["uid"] = "d1"
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        container["imagePullPolicy"] = "IfNotPresent"
        container["terminationMessagePath"] = "/dev/termination-log"
    deployment["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirst"
    return deployment


def rebuilt(deployment: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The Deployment after the rebuild patch, applied here by hand."""
    patch = template.rebuild_patch(deployment, settings)
    assert patch[0] == {"op": "test", "path": "/metadata/uid", "value": "d1"}
    result = copy.deepcopy(deployment)
    result["spec"]["template"] = patch[1]["value"]
    for op in patch[2:]:
        key = op["path"].removeprefix("/metadata/annotations/").replace("~1", "/")
        result["metadata"]["annotations"][key] = op["value"]
    return result


def containers(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}


def test_a_box_of_the_current_release_needs_nothing() -> None:
    settings = release()
    assert template.changes(deployed(settings), settings) == []
    assert template.restart_reason(deployed(settings), settings) is None


def test_an_added_sidecar_is_reported_and_rebuilt_without_touching_the_pinned_parts() -> None:
    old = release()
    box = deployed(old)
    new = release(
        workspaceImage="registry.example.com/workspace:2.0",
        sidecars=[{"name": "agent", "command": ["devbox-activity-agent"]}],
        presets={
            "small": {"cpu": "1", "memoryRequest": "1Gi", "memoryLimit": "2Gi", "storage": "9Gi"},
            "medium": {"cpu": "1", "memoryRequest": "1Gi", "memoryLimit": "2Gi", "storage": "9Gi"},
            "large": {"cpu": "1", "memoryRequest": "1Gi", "memoryLimit": "2Gi", "storage": "9Gi"},
        },
        gpu={"enabled": False, "defaultProfile": None, "profiles": []},
    )
    # With GPUs turned off no device is counted, so the line's scheduling gate goes too.
    assert template.changes(box, new) == [
        "sidecar agent added",
        "the pod's security or scheduling settings changed",
    ]
    reason = template.restart_reason(box, new)
    assert reason is not None
    assert "sidecar agent added" in reason

    after = rebuilt(box, new)
    sidecar = containers(after)["agent"]
    assert sidecar["image"] == "registry.example.com/workspace:2.0"
    assert "resources" not in sidecar
    before_main, after_main = containers(box)["devbox"], containers(after)["devbox"]
    assert after_main["image"] == before_main["image"] == L4["workspaceImage"]
    assert after_main["resources"] == before_main["resources"]
    assert after_main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    pod = after["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"accelerator": "nvidia-l4"}
    assert template.changes(after, new) == []


def test_removed_and_changed_parts_are_named() -> None:
    old = release(sidecars=[{"name": "lab", "args": ["--port=8888"]}, {"name": "logs"}])
    box = deployed(old, gpu=False)
    new = release(
        sidecars=[{"name": "lab", "args": ["--port=9999"]}],
        ssh={"authorizedKeysSecret": "team-keys"},
    )
    assert template.changes(box, new) == [
        "the main container's environment, mounts or security settings changed",
        "sidecar lab changed",
        "the pod's volumes changed",
        "sidecar logs removed",
    ]
    after = rebuilt(box, new)
    assert set(containers(after)) == {"devbox", "lab"}
    assert template.changes(after, new) == []


def test_a_box_from_before_the_template_record_is_compared_with_its_pod() -> None:
    settings = release()
    legacy = deployed(settings, gpu=False)
    for key in (naming.ANNOTATION_TEMPLATE, naming.ANNOTATION_PINNED_MAIN):
        del legacy["metadata"]["annotations"][key]
    # Its image stays what it runs, even though the release moved on.
    moved = release(workspaceImage="registry.example.com/workspace:3.0")
    assert template.changes(legacy, moved) == []
    with_sidecar = release(sidecars=[{"name": "agent"}])
    assert template.changes(legacy, with_sidecar) == ["sidecar agent added"]
    after = rebuilt(legacy, with_sidecar)
    assert containers(after)["devbox"]["image"] == "registry.example.com/workspace:1.0"
    assert template.changes(after, with_sidecar) == []
