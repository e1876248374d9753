"""Image profiles: their settings rules, how a box renders with one, and how its status
reports it, from plain data."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
from box_specs import atlas_spec
from devboxes_controller.box import template
from devboxes_controller.box.naming import (
    ANNOTATION_IMAGE_PROFILE,
    ANNOTATION_IMAGE_SNAPSHOT,
    MAIN_CONTAINER,
)
from devboxes_controller.box.render import render_deployment
from devboxes_controller.box.spec import BoxSpec, spec_from_deployment
from devboxes_controller.box.status import BoxObjects, derive
from devboxes_controller.config.boxes import ENVIRONMENT_SIDECAR
from devboxes_controller.config.catalog import (
    MAX_DESCRIPTION,
    MAX_DISPLAY_NAME,
    SNAPSHOT_MAX_BYTES,
    SnapshotError,
)
from devboxes_controller.config.images import (
    MAX_ARGS_ITEMS,
    MAX_ARGUMENT_LENGTH,
    MAX_COMMAND_ITEMS,
    MAX_IMAGE_PORTS,
    ImageProfileConfig,
    ImageRejected,
)
from devboxes_controller.config.loading import load_check_target
from devboxes_controller.config.settings import Settings, settings_from_mapping, validate
from devboxes_controller.config.violations import ConfigError
from devboxes_controller.web.api import contract, describe_settings
from gpu_catalog import gpu_profile

from devboxes_sdk.models import DevboxCreate, DevboxState

EXPIRES = datetime(2030, 5, 17, 9, 30, tzinfo=UTC)
NOW = datetime(2030, 5, 16, 9, 30, tzinfo=UTC)

L4 = gpu_profile(
    "nvidia-l4", "NVIDIA L4", workspaceImage="registry.example.com/workspace-cuda:12.8"
)
H100 = gpu_profile("nvidia-h100", "NVIDIA H100")
CUDA: dict[str, Any] = {
    "name": "pytorch",
    "displayName": "PyTorch 2.5 (CUDA)",
    "description": "The workspace with PyTorch and CUDA 12.4",
    "image": "registry.example.com/workspace-pytorch:2.5-cuda12.4",
    "pullPolicy": "IfNotPresent",
    "mode": "workspace",
    "accelerators": ["nvidia-l4"],
    "ports": [{"name": "tensorboard", "containerPort": 6006}],
}
WEB: dict[str, Any] = {
    "name": "docs",
    "displayName": "Docs preview",
    "image": "registry.example.com/nginx-unprivileged@sha256:" + "ab" * 32,
    "mode": "sidecar",
    "runAsUser": 101,
    "command": ["nginx"],
    "args": ["-g", "daemon off;"],
    "resources": {
        "cpuRequest": "25m",
        "memoryRequest": "32Mi",
        "cpuLimit": "500m",
        "memoryLimit": "512Mi",
    },
    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
}


def make_settings(images: dict[str, Any] | None = None) -> Settings:
    return settings_from_mapping(
        {
            "gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4, H100]},
            "images": images or {"enabled": True, "profiles": [CUDA, WEB]},
        }
    )


def problems(images: dict[str, Any]) -> list[tuple[str, str]]:
    settings, found = validate(
        {
            "gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4]},
            "images": images,
        }
    )
    assert settings is None
    return found


def spec(settings: Settings, image: str | None, gpu: str | None = None) -> BoxSpec:
    profile = settings.gpu.profile(gpu) if gpu else None
    return atlas_spec(EXPIRES, profile, ttl_hours=24, image=settings.images.resolve(image, profile))


def containers(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}


# --- settings -------------------------------------------------------------------------------


def test_a_catalog_of_both_modes_is_accepted_and_images_are_off_by_default() -> None:
    settings = make_settings()
    assert [p.mode for p in settings.images.profiles] == ["workspace", "sidecar"]
    assert settings_from_mapping({}).images.enabled is False
    # Like the upstream catalog, a profile without a mode is a sidecar.
    minimal = {k: v for k, v in WEB.items() if k != "mode"}
    assert make_settings({"enabled": True, "profiles": [minimal]}).images.profiles[0].mode == (
        "sidecar"
    )


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"image": "registry.example.com/ws"}, "images.profiles[0].image", "is not pinned"),
        ({"image": "localhost:5000/ws"}, "images.profiles[0].image", "is not pinned"),
        ({"image": "ws:latest"}, "images.profiles[0].image", "':latest' moves"),
        ({"image": "https://example.com/ws:1"}, "images.profiles[0].image", "drop the scheme"),
        ({"name": "PyTorch"}, "images.profiles[0].name", "not a valid profile name"),
        ({"displayName": " "}, "images.profiles[0].displayName", "must not be empty"),
        ({"pullPolicy": "Sometimes"}, "images.profiles[0].pullPolicy", "IfNotPresent"),
        ({"mode": "replace"}, "images.profiles[0].mode", "sidecar"),
        ({"accelerators": []}, "images.profiles[0].accelerators", "names the accelerators"),
        ({"accelerators": ["h100"]}, "images.profiles[0].accelerators[0]", "'h100' is neither"),
        (
            {"accelerators": ["cpu", "cpu"]},
            "images.profiles[0].accelerators[1]",
            "listed more than once",
        ),
        ({"resources": WEB["resources"]}, "images.profiles[0].resources", "only a sidecar"),
        ({"runAsUser": 1000}, "images.profiles[0].runAsUser", "only a sidecar"),
        ({"command": ["sh"]}, "images.profiles[0].command", "only a sidecar"),
        (
            {"homeFolder": {"path": "public", "mountPath": "/srv"}},
            "images.profiles[0].homeFolder",
            "only a sidecar",
        ),
        (
            {"ports": [{"name": "ssh", "containerPort": 2223}]},
            "images.profiles[0].ports[0].name",
            "SSH port",
        ),
        (
            {"ports": [{"name": "web", "containerPort": 2222}]},
            "images.profiles[0].ports[0].containerPort",
            "SSH server",
        ),
        (
            {"ports": [{"name": "web", "containerPort": 80}]},
            "images.profiles[0].ports[0].containerPort",
            "between 1024 and 65535",
        ),
        (
            {"ports": [{"name": "web--ui", "containerPort": 8080}]},
            "images.profiles[0].ports[0].name",
            "not a valid port name",
        ),
        ({"registry": "x"}, "images.profiles[0].registry", "unknown key 'registry'"),
    ],
)
def test_a_broken_workspace_profile_is_refused_with_its_values_path(
    change: dict[str, Any], path: str, words: str
) -> None:
    found = problems({"enabled": True, "profiles": [{**CUDA, **change}]})
    assert [p for p, _ in found] == [path], found
    assert words in found[0][1], found


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"resources": None}, "images.profiles[0].resources", "needs cpu and memory"),
        ({"accelerators": ["cpu"]}, "images.profiles[0].accelerators", "only a workspace"),
        (
            {"resources": {**WEB["resources"], "memoryRequest": "1Gi"}},
            "images.profiles[0].resources.memoryRequest",
            "must not exceed memoryLimit (512Mi)",
        ),
        (
            {"resources": {**WEB["resources"], "cpuLimit": None}},
            "images.profiles[0].resources.cpuLimit",
            "must be a string",
        ),
        ({"runAsUser": 0}, "images.profiles[0].runAsUser", "root"),
        (
            {"ports": [*WEB["ports"], {"name": "alt", "containerPort": 8080}]},
            "images.profiles[0].ports[1].containerPort",
            "TCP port 8080 is declared more than once",
        ),
        (
            {"ports": [*WEB["ports"], {"name": "http", "containerPort": 8081}]},
            "images.profiles[0].ports[1].name",
            "'http' is used more than once",
        ),
        (
            {"args": ["x" * (MAX_ARGUMENT_LENGTH + 1)]},
            "images.profiles[0].args[0]",
            "at most",
        ),
        (
            {"homeFolder": {"path": "../etc", "mountPath": "/srv"}},
            "images.profiles[0].homeFolder.path",
            "should match pattern",
        ),
        (
            {"homeFolder": {"path": "site/public", "mountPath": "/srv"}},
            "images.profiles[0].homeFolder.path",
            "should match pattern",
        ),
        (
            {"homeFolder": {"path": "public", "mountPath": "srv"}},
            "images.profiles[0].homeFolder.mountPath",
            "should match pattern",
        ),
        (
            {"homeFolder": {"path": "public", "mountPath": "/srv/../etc"}},
            "images.profiles[0].homeFolder.mountPath",
            "should match pattern",
        ),
        (
            {"homeFolder": {"path": "public"}},
            "images.profiles[0].homeFolder.mountPath",
            "required",
        ),
    ],
)
def test_a_broken_sidecar_profile_is_refused_with_its_values_path(
    change: dict[str, Any], path: str, words: str
) -> None:
    profile = {k: v for k, v in {**WEB, **change}.items() if v is not None}
    found = problems({"enabled": True, "profiles": [profile]})
    assert [p for p, _ in found] == [path], found
    assert words in found[0][1], found


def test_catalog_rules_name_every_violation_at_once() -> None:
    found = problems({"enabled": True, "profiles": [CUDA, {**CUDA, "image": "ws"}]})
    assert found == [
        ("images.profiles[1].image", found[0][1]),
        (
            "images.profiles[1].name",
            "image profile name 'pytorch' is used more than once (also profiles[0]); image "
            "profile names must be unique",
        ),
    ]
    assert problems({"enabled": True}) == [
        ("images.profiles", "enabled: true needs at least one profile")
    ]


def test_a_values_file_reports_image_problems_under_controller(tmp_path: Any) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        json.dumps(
            {"controller": {"images": {"enabled": True, "profiles": [{**CUDA, "image": "ws"}]}}}
        )
    )
    with pytest.raises(ConfigError) as caught:
        load_check_target(values, {})
    assert [line.split(":")[0] for line in caught.value.violations] == [
        "controller.images.profiles[0].image",
        "controller.images.profiles[0].accelerators[0]",
    ]


def test_a_removed_gpu_profile_breaks_a_catalog_that_still_names_it() -> None:
    settings, found = validate(
        {
            "gpu": {"enabled": False},
            "images": {
                "enabled": True,
                "profiles": [{**CUDA, "accelerators": ["cpu", "nvidia-l4"]}],
            },
        }
    )
    assert settings is None
    assert found == [
        (
            "images.profiles[0].accelerators[1]",
            "'nvidia-l4' is neither 'cpu' nor a configured GPU profile (known: cpu)",
        )
    ]


# --- discovery and choosing -----------------------------------------------------------------


def test_discovery_shows_what_a_profile_is_never_what_it_runs() -> None:
    body = make_settings().capabilities().model_dump(mode="json")
    assert body["images"] == {
        "enabled": True,
        "profiles": [
            {
                "name": "pytorch",
                "display_name": "PyTorch 2.5 (CUDA)",
                "description": "The workspace with PyTorch and CUDA 12.4",
                "mode": "workspace",
                "ports": [{"name": "tensorboard", "container_port": 6006, "protocol": "TCP"}],
                "home_folder": None,
            },
            {
                "name": "docs",
                "display_name": "Docs preview",
                "description": None,
                "mode": "sidecar",
                "ports": [{"name": "http", "container_port": 8080, "protocol": "TCP"}],
                "home_folder": None,
            },
        ],
    }
    text = json.dumps(body)
    for secret in ("registry.example.com", "sha256", "IfNotPresent", "512Mi", "nginx", "101"):
        assert secret not in text
    disabled = make_settings({"enabled": False, "profiles": [CUDA]})
    assert disabled.capabilities().model_dump(mode="json")["images"] == {
        "enabled": False,
        "profiles": [],
    }


def test_resolve_refuses_unknown_disabled_and_unsupported_accelerators() -> None:
    images = make_settings().images
    l4 = make_settings().gpu.profile("nvidia-l4")
    h100 = make_settings().gpu.profile("nvidia-h100")
    assert images.resolve(None, None) is None
    assert images.resolve("pytorch", l4) is images.profile("pytorch")
    # A sidecar runs beside any box.
    assert images.resolve("docs", None) is images.profile("docs")
    assert images.resolve("docs", h100) is images.profile("docs")
    cases = [
        (
            images,
            "jupyter",
            l4,
            "unknown image profile 'jupyter'; available image profiles: pytorch, docs",
        ),
        (
            images,
            "pytorch",
            None,
            "image profile 'pytorch' does not support a box without a GPU; it runs with: nvidia-l4",
        ),
        (
            images,
            "pytorch",
            h100,
            "image profile 'pytorch' does not support GPU profile "
            "'nvidia-h100'; it runs with: nvidia-l4",
        ),
        (
            make_settings({"enabled": False, "profiles": [CUDA]}).images,
            "pytorch",
            l4,
            "image profiles are disabled by the operator",
        ),
    ]
    for catalog, name, gpu, message in cases:
        with pytest.raises(ImageRejected) as caught:
            catalog.resolve(name, gpu)
        assert caught.value.message == message


# --- rendering ------------------------------------------------------------------------------


def test_a_workspace_profile_replaces_the_main_image_and_keeps_the_workspace_contract() -> None:
    settings = make_settings()
    plain = containers(render_deployment(spec(settings, None, "nvidia-l4"), settings))
    deployment = render_deployment(spec(settings, "pytorch", "nvidia-l4"), settings)
    main = containers(deployment)[MAIN_CONTAINER]
    # Over the GPU profile's own workspace image: the operator paired the two.
    assert main["image"] == CUDA["image"]
    assert main["imagePullPolicy"] == "IfNotPresent"
    assert main["ports"] == [
        *plain[MAIN_CONTAINER]["ports"],
        {"name": "tensorboard", "containerPort": 6006, "protocol": "TCP"},
    ]
    # Everything else of the main container (entrypoint, user, mounts, probe, device) stays.
    for key in ("env", "resources", "volumeMounts", "readinessProbe", "securityContext"):
        assert main[key] == plain[MAIN_CONTAINER][key], key
    assert "command" not in main
    assert set(containers(deployment)) == set(plain)


def test_a_sidecar_profile_runs_beside_the_workspace_unprivileged_and_bounded() -> None:
    settings = make_settings()
    plain = render_deployment(spec(settings, None), settings)
    deployment = render_deployment(spec(settings, "docs"), settings)
    found = containers(deployment)
    assert found[MAIN_CONTAINER] == containers(plain)[MAIN_CONTAINER]
    assert found[ENVIRONMENT_SIDECAR] == {
        "name": ENVIRONMENT_SIDECAR,
        "image": WEB["image"],
        "imagePullPolicy": "IfNotPresent",
        "command": ["nginx"],
        "args": ["-g", "daemon off;"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "25m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        },
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "runAsUser": 101,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"] == plain["spec"]["template"]["spec"]["volumes"]
    assert pod["automountServiceAccountToken"] is False


def test_a_sidecar_serves_one_folder_of_the_home_read_only_which_the_box_makes_its_persons() -> (
    None
):
    served = {**WEB, "homeFolder": {"path": "public", "mountPath": "/usr/share/nginx/html"}}
    settings = make_settings({"enabled": True, "profiles": [CUDA, served]})
    deployment = render_deployment(spec(settings, "docs"), settings)
    found = containers(deployment)
    assert found[ENVIRONMENT_SIDECAR]["volumeMounts"] == [
        {
            "name": "home",
            "mountPath": "/usr/share/nginx/html",
            "subPath": "public",
            "readOnly": True,
        }
    ]
    assert {"name": "DEVBOX_SERVED_FOLDER", "value": "public"} in found[MAIN_CONTAINER]["env"]
    box = settings.images.profile("docs")
    assert box is not None
    assert box.to_wire().home_folder == box.allocation().home_folder == "public"
    # Without a home folder, the sidecar has no volume at all.
    plain = containers(render_deployment(spec(make_settings(), "docs"), make_settings()))
    assert "volumeMounts" not in plain[ENVIRONMENT_SIDECAR]
    assert all(e["name"] != "DEVBOX_SERVED_FOLDER" for e in plain[MAIN_CONTAINER]["env"])


def test_the_box_pins_its_image_profile_and_catalog_edits_never_reach_it() -> None:
    settings = make_settings()
    deployment = render_deployment(spec(settings, "docs"), settings)
    annotations = deployment["metadata"]["annotations"]
    assert annotations[ANNOTATION_IMAGE_PROFILE] == "docs"
    assert ImageProfileConfig.from_snapshot(annotations[ANNOTATION_IMAGE_SNAPSHOT]) == (
        settings.images.profile("docs")
    )
    # The operator edits the profile, then disables image profiles and removes it.
    edited = make_settings(
        {"enabled": True, "profiles": [CUDA, {**WEB, "image": "registry.example.com/web:2"}]}
    )
    removed = settings_from_mapping(
        {"gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4, H100]}}
    )
    for later in (edited, removed):
        assert spec_from_deployment(deployment).image == settings.images.profile("docs")
        assert template.changes(deployment, later) == []
        rebuilt = template.desired(deployment, later)
        assert containers(rebuilt)[ENVIRONMENT_SIDECAR]["image"] == WEB["image"]
        assert derive(BoxObjects(deployment=deployment), later, NOW).image is not None


def test_a_workspace_image_stays_pinned_across_rebuilds() -> None:
    settings = make_settings()
    deployment = render_deployment(spec(settings, "pytorch", "nvidia-l4"), settings)
    edited = make_settings({"enabled": True, "profiles": [{**CUDA, "image": "ws:2"}]})
    rebuilt = template.desired(deployment, edited)
    assert containers(rebuilt)[MAIN_CONTAINER]["image"] == CUDA["image"]
    assert template.changes(deployment, edited) == []


def test_boxes_without_an_image_profile_render_as_before() -> None:
    settings = make_settings()
    with_catalog = render_deployment(spec(settings, None), settings)
    without = render_deployment(
        replace(spec(settings, None)), settings_from_mapping({"gpu": settings.gpu.model_dump()})
    )
    assert with_catalog == without
    assert ANNOTATION_IMAGE_SNAPSHOT not in with_catalog["metadata"]["annotations"]


# --- status ---------------------------------------------------------------------------------


def test_status_reports_the_pinned_image_profile() -> None:
    settings = make_settings()
    box = derive(
        BoxObjects(deployment=render_deployment(spec(settings, "docs"), settings, replicas=0)),
        settings,
        NOW,
    )
    assert box.model_dump(mode="json")["image"] == {
        "profile": "docs",
        "display_name": "Docs preview",
        "mode": "sidecar",
        "ports": [{"name": "http", "container_port": 8080, "protocol": "TCP"}],
        "home_folder": None,
    }
    plain = derive(
        BoxObjects(deployment=render_deployment(spec(settings, None), settings)), settings, NOW
    )
    assert plain.image is None


def test_an_unreadable_image_snapshot_degrades_the_box_with_the_reason() -> None:
    settings = make_settings()
    deployment = render_deployment(spec(settings, "docs"), settings)
    deployment["metadata"]["annotations"][ANNOTATION_IMAGE_SNAPSHOT] = '{"name": "docs"}'
    box = derive(BoxObjects(deployment=deployment), settings, NOW)
    assert box.state is DevboxState.DEGRADED
    assert box.message is not None
    assert box.message.startswith("The pinned image profile cannot be read (")
    assert "displayName" in box.message
    with pytest.raises(SnapshotError, match="box 'atlas': the image profile snapshot is invalid"):
        spec_from_deployment(deployment)


def test_the_largest_valid_image_profile_fits_its_snapshot_bound() -> None:
    # Characters JSON escapes to twelve bytes (a surrogate pair), everywhere text may be.
    wide = "\U0001f600"
    largest = {
        "name": "a" * 40,
        "displayName": wide * MAX_DISPLAY_NAME,
        "description": wide * MAX_DESCRIPTION,
        "image": "r/" + "i" * 500 + ":1",
        "pullPolicy": "IfNotPresent",
        "mode": "sidecar",
        "runAsUser": 2**31 - 1,
        "command": [wide * MAX_ARGUMENT_LENGTH] * MAX_COMMAND_ITEMS,
        "args": [wide * MAX_ARGUMENT_LENGTH] * MAX_ARGS_ITEMS,
        "resources": {
            "cpuRequest": "1" * 30,
            "memoryRequest": "1" * 30,
            "cpuLimit": "9" * 30,
            "memoryLimit": "9" * 30,
        },
        "ports": [
            {
                "name": f"port-{index}-abcdefg"[:15],
                "containerPort": 60000 + index,
                "protocol": "UDP",
            }
            for index in range(MAX_IMAGE_PORTS)
        ],
    }
    profile = ImageProfileConfig.model_validate(largest)
    text = profile.snapshot_json()
    assert len(text.encode()) <= SNAPSHOT_MAX_BYTES
    assert ImageProfileConfig.from_snapshot(text) == profile
    with pytest.raises(SnapshotError, match="larger than"):
        ImageProfileConfig.from_snapshot(" " * (SNAPSHOT_MAX_BYTES + 1))


# --- the served OpenAPI document --------------------------------------------------------------


@pytest.mark.parametrize(
    ("images", "body", "accepted"),
    [
        (None, {"name": "a", "image": "docs"}, True),
        (None, {"name": "a", "image": "docs", "gpu": {"profile": "nvidia-h100"}}, True),
        (None, {"name": "a", "image": "pytorch", "gpu": {"profile": "nvidia-l4"}}, True),
        # The default GPU profile is nvidia-l4, which pytorch runs with.
        (None, {"name": "a", "image": "pytorch", "gpu": {}}, True),
        (None, {"name": "a", "image": "pytorch", "gpu": {"profile": None}}, True),
        (None, {"name": "a", "image": "pytorch"}, False),
        (None, {"name": "a", "image": "pytorch", "gpu": None}, False),
        (None, {"name": "a", "image": "pytorch", "gpu": {"profile": "nvidia-h100"}}, False),
        (None, {"name": "a", "image": "jupyter"}, False),
        (None, {"name": "a", "gpu": {"profile": "nvidia-h100"}}, True),
        ({"enabled": False, "profiles": [CUDA]}, {"name": "a", "image": "pytorch"}, False),
        ({"enabled": False, "profiles": [CUDA]}, {"name": "a", "image": None}, True),
    ],
)
def test_the_served_document_states_which_images_a_create_may_name(
    images: dict[str, Any] | None, body: dict[str, Any], accepted: bool
) -> None:
    # Whatever the document accepts, the controller accepts, and the other way round.
    settings = make_settings(images)
    document = describe_settings(contract(), settings)
    schema = {"$ref": "#/components/schemas/DevboxCreate", "components": document["components"]}
    valid = jsonschema.Draft202012Validator(schema).is_valid(body)
    assert valid is accepted
    request = DevboxCreate.model_validate(body)
    gpu = settings.gpu.resolve(request.gpu)
    try:
        settings.images.resolve(request.image, gpu)
    except ImageRejected:
        assert not accepted
    else:
        assert accepted
