"""DRA GPU profiles in the settings: the two kinds of profile, selector checks, the
catalog and the pinned snapshot."""

from __future__ import annotations

import json
from typing import Any

import pytest
from config_errors import violations
from devboxes_controller.config.catalog import SNAPSHOT_MAX_BYTES
from devboxes_controller.config.gpu import GpuProfileConfig
from devboxes_controller.config.settings import settings_from_mapping
from dra_profiles import GPU_40G, H100_OR_A100, MI300X, NVIDIA, PRODUCT
from gpu_catalog import gpu_profile

L4 = gpu_profile("nvidia-l4", "NVIDIA L4")


def load(*profiles: dict[str, Any]) -> list[str]:
    return violations(
        lambda: settings_from_mapping(
            {"gpu": {"enabled": True, "defaultProfile": "p", "profiles": list(profiles)}}
        )
    )


def profile(**fields: Any) -> dict[str, Any]:
    return {"name": "p", "displayName": "P", "count": 1, **fields}


def test_both_kinds_load_side_by_side() -> None:
    gpu = settings_from_mapping(
        {
            "gpu": {
                "enabled": True,
                "defaultProfile": "nvidia-l4",
                "profiles": [L4, *[H100_OR_A100, GPU_40G, MI300X]],
            }
        }
    ).gpu
    dra = gpu.profile("h100-or-a100")
    assert dra is not None
    assert dra.is_dra
    assert [c.device_class_name for c in dra.choices()] == [NVIDIA, NVIDIA]
    legacy = gpu.profile("nvidia-l4")
    assert legacy is not None
    assert not legacy.is_dra
    assert legacy.choices() == []


def test_a_profile_needs_exactly_one_kind() -> None:
    assert load(profile()) == [
        "gpu.profiles[0].resourceName: is required, or deviceClassName for a profile of DRA devices"
    ]
    assert load(profile(resourceName="nvidia.com/gpu", deviceClassName=NVIDIA)) == [
        "gpu.profiles[0].deviceClassName: a profile has either resourceName or "
        "deviceClassName, not both"
    ]


def test_dra_fields_are_refused_on_an_extended_resource_profile() -> None:
    found = load(
        profile(
            resourceName="nvidia.com/gpu",
            selectors=["device.driver == 'x'"],
            alternatives=[{"deviceClassName": NVIDIA}],
            devices="anything",
        )
    )
    assert found == [
        f"gpu.profiles[0].{key}: {key} is only for DRA profiles (with deviceClassName)"
        for key in ("selectors", "alternatives", "devices")
    ]


def test_unguarded_attribute_reads_are_refused_with_the_guarded_form() -> None:
    unguarded = f"{PRODUCT} == 'NVIDIA L4'"
    found = load(profile(deviceClassName=NVIDIA, selectors=["device.driver != ''", unguarded]))
    assert found == [
        f"gpu.profiles[0].selectors[1]: {PRODUCT} is read without a guard: a device that "
        "does not publish it fails the scheduling of the box instead of not matching; write "
        f"has({PRODUCT}) && ... instead"
    ]
    capacity = "device.capacity['gpu.amd.com'].memory.compareTo(quantity('1Gi')) > 0"
    found = load(
        profile(
            deviceClassName=NVIDIA,
            alternatives=[{"deviceClassName": "gpu.amd.com", "selectors": [capacity]}],
        )
    )
    assert len(found) == 1
    assert found[0].startswith(
        "gpu.profiles[0].alternatives[0].selectors[0]: "
        "device.capacity['gpu.amd.com'].memory is read without a guard"
    )


def test_a_guard_of_another_path_does_not_count() -> None:
    other = f"has(device.attributes['{NVIDIA}'].uuid) && {PRODUCT} == 'x'"
    assert "is read without a guard" in load(profile(deviceClassName=NVIDIA, selectors=[other]))[0]


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("device.driver ==", "not a CEL expression"),
        ("   ", "a selector must not be empty"),
        ("device.driver == 'é'", "only printable ASCII"),
        ("device.driver == '" + "x" * 600 + "'", "at most 512 characters"),
    ],
)
def test_bad_selectors_are_refused(selector: str, message: str) -> None:
    found = load(profile(deviceClassName=NVIDIA, selectors=[selector]))
    assert len(found) == 1
    assert found[0].startswith("gpu.profiles[0].selectors[0]: ")
    assert message in found[0]


def test_alternatives_are_bounded_and_checked() -> None:
    many = [{"deviceClassName": NVIDIA}] * 4
    assert load(profile(deviceClassName=NVIDIA, alternatives=many)) == [
        "gpu.profiles[0].alternatives: at most 3 entries are allowed, got 4"
    ]
    found = load(profile(deviceClassName=NVIDIA, alternatives=[{"deviceClassName": "Bad_Class"}]))
    assert found[0].startswith("gpu.profiles[0].alternatives[0].deviceClassName: 'Bad_Class'")


def test_catalog_shows_kind_and_devices_never_the_cel() -> None:
    gpu = settings_from_mapping(
        {
            "gpu": {
                "enabled": True,
                "defaultProfile": "nvidia-l4",
                "profiles": [L4, H100_OR_A100, GPU_40G],
            }
        }
    ).gpu
    body = gpu.capabilities().model_dump(mode="json")["profiles"]
    assert [(p["name"], p["kind"], p["resource_name"], p["devices"]) for p in body] == [
        ("nvidia-l4", "extended-resource", "nvidia.com/gpu", None),
        # Old clients that know only extended resources show the device class.
        ("h100-or-a100", "dra", NVIDIA, "NVIDIA H100 80GB, else A100 40GB"),
        # Derived plainly when the operator wrote no devices line.
        ("gpu-40g", "dra", NVIDIA, f"1 × {NVIDIA}"),
    ]
    text = json.dumps(body)
    for secret in ("device.", "has(", "quantity", "startsWith"):
        assert secret not in text


def test_extended_resource_snapshot_is_unchanged() -> None:
    # The snapshot of a box created before DRA profiles existed, byte for byte.
    assert GpuProfileConfig.model_validate(L4).snapshot_json() == (
        '{"count":1,"displayName":"NVIDIA L4","name":"nvidia-l4","resourceName":"nvidia.com/gpu"}'
    )


def test_dra_snapshot_pins_every_field() -> None:
    pinned = GpuProfileConfig.model_validate(H100_OR_A100)
    text = pinned.snapshot_json()
    assert json.loads(text) == H100_OR_A100
    assert GpuProfileConfig.from_snapshot(text) == pinned
    assert pinned.allocation().kind == "dra"
    assert pinned.allocation().devices == "NVIDIA H100 80GB, else A100 40GB"


def test_largest_dra_profile_fits_the_snapshot_bound() -> None:
    domain = ".".join(["c" * 60] * 3 + ["c" * 61])
    selector = "has(device.attributes['a'].b) && device.attributes['a'].b == '"
    selector += "\\\\" * ((512 - len(selector) - 1) // 2) + "'"
    assert len(selector) <= 512
    choice = {"deviceClassName": domain, "selectors": [selector] * 4, "count": 64}
    largest = GpuProfileConfig.model_validate(
        {
            "name": "a" * 40,
            "displayName": "\U0001f680" * 80,
            "description": "\U0001f680" * 160,
            "devices": "\U0001f680" * 160,
            **choice,
            "alternatives": [choice] * 3,
            "workspaceImage": "\U0001f680" * 512,
            "runtimeClassName": domain,
            "supplementalGroups": list(range(1, 9)),
            "nodeSelector": {f"{domain}/{i:02d}{'n' * 61}": "v" * 63 for i in range(16)},
            "tolerations": [
                {
                    "key": f"{domain}/{i:02d}{'t' * 61}",
                    "operator": "Equal",
                    "value": "v" * 63,
                    "effect": "NoExecute",
                    "tolerationSeconds": -(2**63),
                }
                for i in range(16)
            ],
        }
    )
    text = largest.snapshot_json()
    assert SNAPSHOT_MAX_BYTES * 0.6 < len(text.encode()) <= SNAPSHOT_MAX_BYTES
    assert GpuProfileConfig.from_snapshot(text) == largest
