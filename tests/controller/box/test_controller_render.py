"""Rendering a box's Kubernetes objects, from plain data."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from devboxes_controller.box import render
from devboxes_controller.box.naming import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_GPU_COUNT,
    ANNOTATION_GPU_PROFILE,
    ANNOTATION_GPU_RESOURCE,
    ANNOTATION_GPU_SNAPSHOT,
    ANNOTATION_PRESET,
    ANNOTATION_REPOSITORY,
    ANNOTATION_TEMPLATE,
    ANNOTATION_TTL_HOURS,
    LABEL_BOX,
    MANAGED_SELECTOR,
    box_name_of,
    object_names,
)
from devboxes_controller.box.render import render_deployment, render_pvc, render_service
from devboxes_controller.box.spec import BoxSpec, spec_from_deployment
from devboxes_controller.config.catalog import SnapshotError
from devboxes_controller.config.gpu import GpuProfileConfig
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.k8s.timestamps import format_timestamp
from gpu_catalog import DEDICATED_L4, gpu_profile
from hypothesis import given, settings
from hypothesis import strategies as st

from devboxes_sdk.models import PRESETS

EXPIRES = datetime(2030, 5, 17, 9, 30, 0, tzinfo=UTC)

L4: dict[str, Any] = {
    **DEDICATED_L4,
    # A second toleration, with a value and a time limit that the pod must keep.
    "tolerations": [
        *DEDICATED_L4["tolerations"],
        {"key": "maintenance", "value": "soon", "effect": "NoExecute", "tolerationSeconds": 600},
    ],
}
MIG = gpu_profile(
    "a100-1g-10gb", "A100 MIG 1g.10gb", resourceName="nvidia.com/mig-1g.10gb", count=2
)
RELEASE: dict[str, Any] = {
    "namespace": "boxes",
    "workspaceImage": "registry.example.com/devboxes/workspace:1.4",
    "storageClassName": "fast-ssd",
    "sidecars": [
        {"name": "lab", "command": ["jupyter-lab"], "args": ["--port=8888"], "env": {"A": "1"}},
        {"name": "logs", "image": "registry.example.com/log-shipper:2"},
    ],
}


def make_settings(gpu: dict[str, Any] | None = None, **changes: Any) -> Settings:
    gpu = gpu or {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4, MIG]}
    return settings_from_mapping({**RELEASE, **changes, "gpu": gpu})


SETTINGS = make_settings()


def box(
    gpu: str | None = "nvidia-l4",
    *,
    name: str = "atlas",
    preset: Any = "medium",
    repository: str | None = None,
    config: Settings = SETTINGS,
) -> BoxSpec:
    return BoxSpec(
        name=name,
        preset=preset,
        ttl_hours=12,
        repository=repository,
        expires_at=EXPIRES,
        gpu=config.gpu.profile(gpu) if gpu else None,
    )


def pod_of(deployment: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def main_of(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = pod_of(deployment)["containers"]
    assert containers[0]["name"] == "devbox"
    main: dict[str, Any] = containers[0]
    return main


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {entry["name"]: entry["value"] for entry in container.get("env", [])}


def walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair of a nested document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


# --- names, labels, PVC, Service ---------------------------------------------------------


def test_object_names() -> None:
    names = object_names("atlas")
    assert (names.deployment, names.pvc, names.service) == (
        "devbox-atlas",
        "devbox-atlas-home",
        "devbox-atlas-ssh",
    )


def test_every_object_is_labelled_for_the_box_and_the_manager() -> None:
    spec = box()
    key, value = MANAGED_SELECTOR.split("=")
    for obj in (
        render_pvc(spec, SETTINGS),
        render_deployment(spec, SETTINGS),
        render_service(spec, SETTINGS),
    ):
        labels = obj["metadata"]["labels"]
        assert labels[key] == value
        assert labels[LABEL_BOX] == "atlas"
        assert labels["app.kubernetes.io/name"] == "devbox"
        assert obj["metadata"]["namespace"] == "boxes"
        assert box_name_of(obj) == "atlas"
        json.dumps(obj)
    components = {
        render_pvc(spec, SETTINGS)["metadata"]["labels"]["app.kubernetes.io/component"],
        render_deployment(spec, SETTINGS)["metadata"]["labels"]["app.kubernetes.io/component"],
        render_service(spec, SETTINGS)["metadata"]["labels"]["app.kubernetes.io/component"],
    }
    assert len(components) == 3


def test_box_name_of_foreign_objects() -> None:
    assert box_name_of({}) is None
    assert box_name_of({"metadata": {"labels": None}}) is None
    assert box_name_of({"metadata": {"labels": {"app": "other"}}}) is None


@pytest.mark.parametrize(("preset", "size"), [("small", "20Gi"), ("large", "50Gi")])
def test_pvc(preset: str, size: str) -> None:
    pvc = render_pvc(box(preset=preset), SETTINGS)
    assert pvc["kind"] == "PersistentVolumeClaim"
    assert pvc["metadata"]["name"] == "devbox-atlas-home"
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
        "storageClassName": "fast-ssd",
    }
    assert "ownerReferences" not in pvc["metadata"]


def test_pvc_without_storage_class_uses_the_cluster_default() -> None:
    pvc = render_pvc(box(), make_settings(storageClassName=None))
    assert "storageClassName" not in pvc["spec"]


@pytest.mark.parametrize("service_type", ["NodePort", "LoadBalancer"])
def test_service(service_type: str) -> None:
    config = make_settings(ssh={"serviceType": service_type})
    service = render_service(box(config=config), config)
    assert service["metadata"]["name"] == "devbox-atlas-ssh"
    assert service["spec"] == {
        "type": service_type,
        "selector": {LABEL_BOX: "atlas"},
        "ports": [{"name": "ssh", "protocol": "TCP", "port": 22, "targetPort": 2222}],
    }


def test_without_services_a_box_is_rendered_without_one() -> None:
    config = make_settings(ssh={"serviceType": "None"})
    owner = {"metadata": {"name": "devbox-atlas", "uid": "u-1"}}
    rendered = render.box(box(config=config), config, owned_by=owner)
    assert rendered.service is None
    assert rendered.deployment["metadata"]["name"] == "devbox-atlas"


# --- the Deployment ----------------------------------------------------------------------


def test_deployment_shape() -> None:
    deployment = render_deployment(box(), SETTINGS, replicas=0)
    spec = deployment["spec"]
    assert deployment["metadata"]["name"] == "devbox-atlas"
    assert spec["replicas"] == 0
    assert spec["strategy"] == {"type": "Recreate"}
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (2, 600)
    selector = spec["selector"]["matchLabels"]
    assert selector == {LABEL_BOX: "atlas"}
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()
    assert render_deployment(box(), SETTINGS)["spec"]["replicas"] == 1


def test_main_container() -> None:
    main = main_of(render_deployment(box(gpu=None, repository="octo/repo"), SETTINGS))
    assert main["image"] == "registry.example.com/devboxes/workspace:1.4"
    assert main["ports"] == [{"name": "ssh", "containerPort": 2222, "protocol": "TCP"}]
    assert main["volumeMounts"] == [{"name": "home", "mountPath": "/home/dev"}, NOTICE_MOUNT]
    assert main["readinessProbe"]["tcpSocket"] == {"port": 2222}
    # Until sshd first answers it is asked every second, for 15 minutes at most.
    startup = main["startupProbe"]
    assert startup["tcpSocket"] == {"port": 2222}
    assert (startup["periodSeconds"], startup["failureThreshold"]) == (1, 900)
    assert main["resources"] == {
        "requests": {"cpu": "750m", "memory": "2Gi"},
        "limits": {"memory": "8Gi"},
    }
    assert env_of(main) == {
        "DEVBOX_NAME": "atlas",
        "DEVBOX_REPOSITORY": "octo/repo",
        "DEVBOX_STOP_NOTICE": "/run/devbox-notice/stop",
    }


NOTICE_MOUNT = {"name": "stop-notice", "mountPath": "/run/devbox-notice", "readOnly": True}
NOTICE_VOLUME = {
    "name": "stop-notice",
    "downwardAPI": {
        "items": [
            {
                "path": "stop",
                "fieldRef": {"fieldPath": "metadata.annotations['devboxes.io/stop-notice']"},
            }
        ],
        "defaultMode": 0o444,
    },
}


def test_with_warnings_off_no_stop_notice_reaches_the_box() -> None:
    config = make_settings(stopWarnings={"leadMinutes": 0})
    pod = pod_of(render_deployment(box(), config))
    assert NOTICE_VOLUME not in pod["volumes"]
    assert NOTICE_MOUNT not in main_of(render_deployment(box(), config))["volumeMounts"]
    assert "DEVBOX_STOP_NOTICE" not in env_of(main_of(render_deployment(box(), config)))


def test_gpu_resource_in_requests_and_limits_of_the_main_container_only() -> None:
    deployment = render_deployment(box("a100-1g-10gb"), SETTINGS)
    resources = main_of(deployment)["resources"]
    assert resources["requests"]["nvidia.com/mig-1g.10gb"] == "2"
    assert resources["limits"]["nvidia.com/mig-1g.10gb"] == "2"
    assert resources["requests"]["cpu"] == "750m"
    for sidecar in pod_of(deployment)["containers"][1:]:
        assert "nvidia.com" not in json.dumps(sidecar)
        assert "resources" not in sidecar


def test_sidecars_keep_the_release_image() -> None:
    deployment = render_deployment(box("nvidia-l4"), SETTINGS)
    lab, logs = pod_of(deployment)["containers"][1:]
    assert lab == {
        "name": "lab",
        "image": "registry.example.com/devboxes/workspace:1.4",
        "command": ["jupyter-lab"],
        "args": ["--port=8888"],
        "env": [{"name": "A", "value": "1"}],
        "securityContext": main_of(deployment)["securityContext"],
    }
    assert logs["image"] == "registry.example.com/log-shipper:2"
    assert not any(env_name.startswith("DEVBOX_") for env_name in env_of(lab))


def test_profile_image_replaces_the_main_image_only() -> None:
    with_image = render_deployment(box("nvidia-l4"), SETTINGS)
    assert main_of(with_image)["image"] == "ghcr.io/example/devboxes-workspace-cuda:12.8"
    assert "cuda" not in json.dumps(pod_of(with_image)["containers"][1:])
    without_image = render_deployment(box("a100-1g-10gb"), SETTINGS)
    assert main_of(without_image)["image"] == "registry.example.com/devboxes/workspace:1.4"


def test_pod_scheduling_and_groups_from_the_profile() -> None:
    pod = pod_of(render_deployment(box("nvidia-l4"), SETTINGS))
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"},
        "supplementalGroups": [44, 109],
    }
    assert pod["nodeSelector"] == {"accelerator": "nvidia-l4"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "maintenance",
            "operator": "Equal",
            "value": "soon",
            "effect": "NoExecute",
            "tolerationSeconds": 600,
        },
    ]


def test_gpu_environment_for_the_entrypoint() -> None:
    main = main_of(render_deployment(box("nvidia-l4"), SETTINGS))
    assert env_of(main) == {
        "DEVBOX_NAME": "atlas",
        "DEVBOX_GPU_PROFILE": "nvidia-l4",
        "DEVBOX_GPU_RESOURCE": "nvidia.com/gpu",
        "DEVBOX_GPU_COUNT": "1",
        "DEVBOX_GPU_SUPPLEMENTAL_GROUPS": "44,109",
        "DEVBOX_STOP_NOTICE": "/run/devbox-notice/stop",
    }
    without_groups = env_of(main_of(render_deployment(box("a100-1g-10gb"), SETTINGS)))
    assert without_groups["DEVBOX_GPU_COUNT"] == "2"
    assert "DEVBOX_GPU_SUPPLEMENTAL_GROUPS" not in without_groups


def test_minimal_profile_sets_no_optional_pod_fields() -> None:
    pod = pod_of(render_deployment(box("a100-1g-10gb"), SETTINGS))
    assert "runtimeClassName" not in pod
    assert "nodeSelector" not in pod
    assert "tolerations" not in pod
    assert "supplementalGroups" not in pod["securityContext"]


@pytest.mark.parametrize("gpu", [None, "nvidia-l4"])
def test_hardening(gpu: str | None) -> None:
    deployment = render_deployment(box(gpu), SETTINGS)
    pod = pod_of(deployment)
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert (pod["hostNetwork"], pod["hostPID"], pod["hostIPC"]) == (False, False, False)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["volumes"] == [
        {"name": "home", "persistentVolumeClaim": {"claimName": "devbox-atlas-home"}},
        NOTICE_VOLUME,
    ]
    assert "hostPath" not in {key for key, _ in walk(deployment)}
    assert len(pod["containers"]) == 3
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["privileged"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert set(security["capabilities"]["add"]) == {
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "SETGID",
            "SETUID",
            "SYS_CHROOT",
            "AUDIT_WRITE",
        }
        # sudo is part of the workspace contract and needs setuid to work.
        assert security["allowPrivilegeEscalation"] is True


def test_rendered_keys_are_kubernetes_camel_case() -> None:
    deployment = render_deployment(box("nvidia-l4"), SETTINGS)
    free_form = {"labels", "annotations", "nodeSelector", "requests", "limits", "matchLabels"}
    checked: list[str] = []

    def check(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                assert "_" not in key, key
                checked.append(key)
                if key not in free_form:
                    check(item)
        elif isinstance(value, list):
            for item in value:
                check(item)

    check(deployment)
    assert "tolerationSeconds" in checked


# --- annotations and the pinned snapshot -------------------------------------------------


def test_gpu_box_annotations() -> None:
    spec = box("nvidia-l4", repository="https://github.com/octo/repo")
    deployment = render_deployment(spec, SETTINGS)
    annotations = deployment["metadata"]["annotations"]
    assert spec.gpu is not None
    assert annotations[ANNOTATION_GPU_SNAPSHOT] == spec.gpu.snapshot_json()
    # The full resolved profile: defaults such as the Equal operator are written out.
    resolved = copy.deepcopy(L4)
    resolved["tolerations"][1]["operator"] = "Equal"
    assert json.loads(annotations[ANNOTATION_GPU_SNAPSHOT]) == resolved
    assert annotations[ANNOTATION_GPU_PROFILE] == "nvidia-l4"
    assert annotations[ANNOTATION_GPU_RESOURCE] == "nvidia.com/gpu"
    assert annotations[ANNOTATION_GPU_COUNT] == "1"
    assert annotations[ANNOTATION_PRESET] == "medium"
    assert annotations[ANNOTATION_TTL_HOURS] == "12"
    assert annotations[ANNOTATION_EXPIRES_AT] == "2030-05-17T09:30:00Z"
    assert annotations[ANNOTATION_REPOSITORY] == "https://github.com/octo/repo"
    assert all(isinstance(value, str) for value in annotations.values())
    template = deployment["spec"]["template"]["metadata"]
    assert template["annotations"] == {ANNOTATION_GPU_PROFILE: "nvidia-l4"}


def test_cpu_box_carries_no_gpu_fields() -> None:
    deployment = render_deployment(box(None), SETTINGS)
    annotations = deployment["metadata"]["annotations"]
    assert not [key for key in annotations if key.startswith("devboxes.io/gpu")]
    assert ANNOTATION_REPOSITORY not in annotations
    assert "annotations" not in deployment["spec"]["template"]["metadata"]
    pod = pod_of(deployment)
    assert {"runtimeClassName", "nodeSelector", "tolerations"}.isdisjoint(pod)
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    text = json.dumps(deployment)
    assert "nvidia" not in text
    assert "DEVBOX_GPU" not in text


def test_expiry_is_written_in_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert format_timestamp(datetime(2030, 1, 1, 2, 0, 5, 999, tzinfo=plus_two)) == (
        "2030-01-01T00:00:05Z"
    )
    with pytest.raises(ValueError, match="time zone"):
        format_timestamp(datetime(2030, 1, 1))


def test_lease_times_carry_the_six_fractional_digits_kubernetes_reads() -> None:
    moment = datetime(2030, 1, 1, 2, 0, 5, 999, tzinfo=timezone(timedelta(hours=2)))
    assert format_timestamp(moment, microseconds=True) == "2030-01-01T00:00:05.000999Z"
    on_the_second = datetime(2030, 1, 1, tzinfo=UTC)
    assert format_timestamp(on_the_second, microseconds=True) == "2030-01-01T00:00:00.000000Z"


@pytest.mark.parametrize("gpu", [None, "nvidia-l4", "a100-1g-10gb"])
def test_spec_round_trips_through_the_deployment(gpu: str | None) -> None:
    spec = box(gpu, repository="octo/repo")
    rebuilt = spec_from_deployment(render_deployment(spec, SETTINGS))
    # The main container's image and resources come back pinned, as rendered.
    assert replace(rebuilt, pinned=None) == spec
    assert rebuilt.pinned is not None
    assert rebuilt.pinned.image == main_of(render_deployment(spec, SETTINGS))["image"]


def test_rendering_from_the_snapshot_survives_catalog_changes() -> None:
    original = render_deployment(box("nvidia-l4"), SETTINGS)
    edited = {**L4, "count": 4, "workspaceImage": "example/other:1", "tolerations": []}
    catalogs: list[dict[str, Any]] = [
        {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [edited]},
        {"enabled": True, "defaultProfile": "renamed", "profiles": [{**L4, "name": "renamed"}]},
        {"enabled": True, "defaultProfile": "a100-1g-10gb", "profiles": [MIG]},
        {"enabled": False},
    ]
    for catalog in catalogs:
        later = make_settings(gpu=catalog)
        stored = copy.deepcopy(original)
        stored["spec"]["replicas"] = 0
        rebuilt = render_deployment(spec_from_deployment(stored), later, replicas=1)
        expected = copy.deepcopy(original)
        if not later.counts_devices:
            # No device is counted with GPUs off, so no line holds the pod back; the
            # record of the template follows the template.
            del expected["spec"]["template"]["spec"]["schedulingGates"]
            for record in (expected, rebuilt):
                del record["metadata"]["annotations"][ANNOTATION_TEMPLATE]
        assert rebuilt == expected


def test_new_boxes_get_the_edited_profile() -> None:
    edited = make_settings(
        gpu={"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [{**L4, "count": 4}]}
    )
    deployment = render_deployment(box("nvidia-l4", config=edited), edited)
    assert main_of(deployment)["resources"]["limits"]["nvidia.com/gpu"] == "4"


def broken(**annotation_changes: str | None) -> dict[str, Any]:
    deployment = render_deployment(box("nvidia-l4"), SETTINGS)
    annotations = deployment["metadata"]["annotations"]
    for key, value in annotation_changes.items():
        full = "devboxes.io/" + key.replace("_", "-")
        if value is None:
            del annotations[full]
        else:
            annotations[full] = value
    return deployment


@pytest.mark.parametrize(
    ("deployment", "message"),
    [
        ({"metadata": {"name": "devbox-x"}}, "'devbox-x' has no devboxes.io/box label"),
        (broken(preset=None), "the devboxes.io/preset annotation is missing"),
        (broken(preset="huge"), "devboxes.io/preset is 'huge', not one of small, medium, large"),
        (broken(ttl_hours="0"), "devboxes.io/ttl-hours is '0', not a whole number"),
        (broken(ttl_hours="12h"), "devboxes.io/ttl-hours is '12h'"),
        (broken(expires_at="tomorrow"), "devboxes.io/expires-at is 'tomorrow'"),
        (broken(expires_at="2030-01-01T00:00:00"), "not an RFC 3339 time"),
        (broken(gpu_profile_snapshot="{"), "box 'atlas': the GPU profile snapshot is not valid"),
        (broken(gpu_profile_snapshot='{"name":"x"}'), "displayName: is required"),
    ],
)
def test_unreadable_deployments_are_refused(deployment: dict[str, Any], message: str) -> None:
    with pytest.raises(SnapshotError, match=message.replace("(", r"\(")):
        spec_from_deployment(deployment)


PROFILES = st.sampled_from([GpuProfileConfig.model_validate(p) for p in (L4, MIG)])


@settings(max_examples=100, deadline=None)
@given(
    name=st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?\Z"),
    preset=st.sampled_from(PRESETS),
    ttl=st.integers(min_value=1, max_value=10_000),
    repository=st.none() | st.sampled_from(["octo/repo", "https://github.com/a/b.git"]),
    expires=st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
    ),
    gpu=st.none() | PROFILES,
    replicas=st.sampled_from([0, 1]),
)
def test_any_box_round_trips_and_renders_stably(
    name: str,
    preset: Any,
    ttl: int,
    repository: str | None,
    expires: datetime,
    gpu: GpuProfileConfig | None,
    replicas: int,
) -> None:
    spec = BoxSpec(
        name=name,
        preset=preset,
        ttl_hours=ttl,
        repository=repository,
        expires_at=expires.replace(microsecond=0),
        gpu=gpu,
    )
    deployment = render_deployment(spec, SETTINGS, replicas=replicas)
    rebuilt = spec_from_deployment(json.loads(json.dumps(deployment)))
    assert replace(rebuilt, pinned=None) == spec
    assert render_deployment(rebuilt, SETTINGS, replicas=replicas) == deployment


def test_authorized_keys_secret_is_mounted_read_only_into_the_main_container_only() -> None:
    settings = make_settings(ssh={"authorizedKeysSecret": "team-keys"})
    deployment = render_deployment(box(), settings)
    pod = deployment["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v.get("secret"))
    assert volume["secret"]["secretName"] == "team-keys"
    main = pod["containers"][0]
    mount = next(m for m in main["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": volume["name"], "mountPath": "/etc/devbox", "readOnly": True}


def test_no_keys_secret_means_no_extra_volume() -> None:
    pod = pod_of(render_deployment(box(), make_settings()))
    assert [v["name"] for v in pod["volumes"]] == ["home", "stop-notice"]


# --- the activity agent and the GPU samples it reads -------------------------------------

IDLE = {"stopAfterMinutes": 60, "controllerUrl": "http://devboxes.boxes.svc:8080"}


def container_of(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in pod_of(deployment)["containers"] if c["name"] == name)
    return found


def mounts_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {mount["name"]: mount for mount in container.get("volumeMounts", [])}


def test_gpu_samples_reach_the_agent_without_the_gpu() -> None:
    deployment = render_deployment(box("nvidia-l4"), make_settings(idle=IDLE))
    main, agent = main_of(deployment), container_of(deployment, "activity")
    volumes = {v["name"]: v for v in pod_of(deployment)["volumes"]}
    assert volumes["gpu-samples"] == {
        "name": "gpu-samples",
        "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"},
    }
    # The profile's image, which holds the GPU, writes; the agent only reads.
    assert mounts_of(main)["gpu-samples"] == {
        "name": "gpu-samples",
        "mountPath": "/run/devbox-gpu-samples",
    }
    assert mounts_of(agent)["gpu-samples"] == {
        "name": "gpu-samples",
        "mountPath": "/run/devbox-gpu-samples",
        "readOnly": True,
    }
    assert env_of(main)["DEVBOX_GPU_SAMPLES"] == "/run/devbox-gpu-samples"
    assert env_of(agent)["DEVBOX_GPU_SAMPLES"] == "/run/devbox-gpu-samples"
    assert main["image"] == "ghcr.io/example/devboxes-workspace-cuda:12.8"
    assert agent["image"] == "registry.example.com/devboxes/workspace:1.4"
    assert "resources" not in agent
    assert "nvidia.com" not in json.dumps(agent)
    # The whole Secret as a directory, never a subPath: the kubelet then replaces the
    # file in place when a rotated key rewrites the Secret.
    assert mounts_of(agent)["activity-credential"] == {
        "name": "activity-credential",
        "mountPath": "/var/run/devbox-activity",
        "readOnly": True,
    }
    assert "activity-credential" not in mounts_of(main)


def test_boxes_without_a_gpu_or_without_an_agent_get_no_samples() -> None:
    cpu_idle = make_settings(idle={**IDLE, "cpuStopAfterMinutes": 30})
    cpu = render_deployment(box(None), cpu_idle)
    assert [c["name"] for c in pod_of(cpu)["containers"]] == ["devbox", "lab", "logs", "activity"]
    assert "gpu-samples" not in json.dumps(cpu)
    assert "DEVBOX_GPU_SAMPLES" not in env_of(container_of(cpu, "activity"))

    # A window for one profile only: the other profile's boxes are never stopped.
    l4_only = make_settings(
        idle={"profiles": {"nvidia-l4": 30}, "controllerUrl": IDLE["controllerUrl"]}
    )
    for deployment in (
        render_deployment(box("nvidia-l4"), SETTINGS),
        render_deployment(box("a100-1g-10gb"), l4_only),
    ):
        assert "activity" not in [c["name"] for c in pod_of(deployment)["containers"]]
        assert "gpu-samples" not in json.dumps(deployment)
    assert "gpu-samples" in json.dumps(render_deployment(box("nvidia-l4"), l4_only))


def test_a_box_rendered_from_its_snapshot_gains_the_samples_with_its_pinned_image() -> None:
    before = render_deployment(box("nvidia-l4"), SETTINGS)
    spec = spec_from_deployment(before)
    after = render_deployment(spec, make_settings(idle=IDLE))
    assert main_of(after)["image"] == main_of(before)["image"]
    assert main_of(after)["resources"] == main_of(before)["resources"]
    assert "gpu-samples" in mounts_of(main_of(after))


def test_the_agent_asks_a_jupyter_sidecar_with_its_token() -> None:
    lab = {"name": "lab", "command": ["jupyter-lab"], "env": {"JUPYTER_TOKEN": "lab-token"}}
    with_lab = make_settings(idle=IDLE, sidecars=[lab])
    assert (
        env_of(container_of(render_deployment(box(), with_lab), "activity"))["JUPYTER_TOKEN"]
        == "lab-token"
    )
    # The release's sidecars here set no token: the agent gets none.
    assert "JUPYTER_TOKEN" not in env_of(
        container_of(render_deployment(box(), make_settings(idle=IDLE)), "activity")
    )
