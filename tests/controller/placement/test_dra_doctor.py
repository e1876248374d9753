"""The GPU doctor and availability for DRA profiles, from plain data."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.placement import capacity, devices, doctor, doctor_facts
from dra_profiles import GPU_40G, H100_OR_A100, NVIDIA

from devboxes_sdk.models import GpuAvailability

STANDARD: dict[str, Any] = {
    "metadata": {
        "name": "standard",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
    }
}
SETTINGS: Settings = settings_from_mapping(
    {
        "gpu": {
            "enabled": True,
            "defaultProfile": "h100-or-a100",
            "profiles": [H100_OR_A100, GPU_40G],
        }
    }
)


NVIDIA_CLASS = {
    "metadata": {"name": NVIDIA},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{NVIDIA}'"}}]},
}


def published(*products: str, node: str = "n") -> dict[str, Any]:
    return devices.strip_slice(
        {
            "metadata": {"name": f"{node}-slice", "resourceVersion": "1"},
            "spec": {
                "driver": NVIDIA,
                "nodeName": node,
                "pool": {"name": node, "generation": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {"productName": {"string": product}},
                        "capacity": {"memory": {"value": memory}},
                    }
                    for i, (product, memory) in enumerate(p.split("/") for p in products)
                ],
            },
        }
    )


H100 = "NVIDIA H100 80GB HBM3/80Gi"
A100 = "NVIDIA A100-SXM4-40GB/40Gi"
L4 = "NVIDIA L4/24Gi"


def facts(**overrides: Any) -> doctor_facts.Facts:
    values: dict[str, Any] = {
        "nodes": [],
        "runtime_classes": [],
        "storage_classes": [STANDARD],
        "quotas": [],
        "limit_ranges": [],
        "device_classes": [NVIDIA_CLASS],
        "slices": [published(H100, A100)],
        "claim_refusals": {"h100-or-a100": None, "gpu-40g": None},
        **overrides,
    }
    return doctor_facts.Facts(**values)


def checks(report: Any, profile: str) -> dict[str, tuple[str, str]]:
    return {c.check: (c.verdict, c.message) for c in report.checks if c.profile == profile}


def test_a_dra_profile_is_checked_by_device_class_and_dry_run_not_by_node_resources() -> None:
    report = doctor.diagnose(SETTINGS, facts())
    assert report.ok, report
    found = checks(report, "h100-or-a100")
    assert found["device-class"] == ("pass", "DeviceClass gpu.nvidia.com exists")
    assert found["claim-template"][0] == "pass"
    assert "resource" not in found
    assert "count" not in found


def test_a_missing_device_class_fails() -> None:
    report = doctor.diagnose(SETTINGS, facts(device_classes=[{"metadata": {"name": "other"}}]))
    assert not report.ok
    verdict, message = checks(report, "gpu-40g")["device-class"]
    assert verdict == "fail"
    assert message == (
        "DeviceClass gpu.nvidia.com does not exist: the scheduler refuses every box of this profile"
    )


def test_unreadable_device_classes_and_an_unasked_dry_run_warn() -> None:
    report = doctor.diagnose(
        SETTINGS,
        facts(
            device_classes=None,
            claim_refusals={},
            unreadable={"DeviceClasses": "forbidden", "claim template dry run": "forbidden"},
        ),
    )
    found = checks(report, "gpu-40g")
    assert found["device-class"] == ("warn", "cannot read DeviceClasses: forbidden")
    assert found["claim-template"][0] == "warn"
    assert found["claim-template"][1].endswith(": forbidden")


def test_a_refused_claim_template_fails_with_the_apiservers_words() -> None:
    refusal = "Kubernetes rejected the object: spec.spec.devices.requests[0]: compilation failed"
    report = doctor.diagnose(
        SETTINGS, facts(claim_refusals={"h100-or-a100": None, "gpu-40g": refusal})
    )
    assert checks(report, "gpu-40g")["claim-template"] == (
        "fail",
        f"the apiserver refuses this profile's claim template: {refusal}",
    )


def test_the_doctor_says_which_choices_published_devices_match() -> None:
    found = checks(doctor.diagnose(SETTINGS, facts()), "h100-or-a100")
    assert found["devices"] == (
        "pass",
        "published devices match h100-or-a100: its own choice (gpu.nvidia.com): 1, "
        "alternative 1 (gpu.nvidia.com): 1",
    )
    report = doctor.diagnose(SETTINGS, facts(slices=[published(A100, L4)]))
    verdict, message = checks(report, "h100-or-a100")["devices"]
    assert verdict == "warn"
    assert message == (
        "published devices match h100-or-a100 (alternative 1 (gpu.nvidia.com): 1), but its "
        "own choice (gpu.nvidia.com) matches no published device"
    )


def test_no_published_device_matching_a_profile_fails() -> None:
    report = doctor.diagnose(SETTINGS, facts(slices=[published(L4)]))
    assert not report.ok
    verdict, message = checks(report, "gpu-40g")["devices"]
    assert verdict == "fail"
    assert message.startswith("no published device matches gpu-40g: ")
    assert checks(report, "h100-or-a100")["devices"][0] == "fail"


def test_unreadable_slices_warn() -> None:
    report = doctor.diagnose(
        SETTINGS, facts(slices=None, unreadable={"ResourceSlices": "forbidden"})
    )
    assert checks(report, "gpu-40g")["devices"] == (
        "warn",
        "cannot read ResourceSlices: forbidden",
    )


def counted(published_: devices.Published | str) -> GpuAvailability:
    profiles = SETTINGS.gpu.profiles
    waiting = {"gpu-40g": 2}
    by_nodes = capacity.availability(profiles, NODES, {}, waiting, datetime.now(UTC))
    return devices.with_devices(profiles, by_nodes, published_, NODES, {}, devices.Matcher())


NODES = [
    capacity.strip_node(
        {
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
]


def test_availability_counts_free_devices_of_dra_profiles() -> None:
    slices = [published(H100, A100, A100)]
    held = devices.strip_claim(
        {
            "metadata": {"name": "c", "namespace": "x"},
            "status": {
                "allocation": {
                    "devices": {"results": [{"driver": NVIDIA, "pool": "n", "device": "gpu-1"}]}
                }
            },
        }
    )
    answer = counted(devices.Published(slices, [held], [devices.strip_device_class(NVIDIA_CLASS)]))
    found = {e.name: (e.available, e.capacity, e.waiting, e.reason) for e in answer.profiles}
    assert found == {"h100-or-a100": (1, 1, 0, None), "gpu-40g": (2, 3, 2, None)}


def test_free_devices_not_read_leave_dra_profiles_unknown_with_the_reason() -> None:
    answer = counted("the controller may not list resourceclaims")
    _, second = answer.profiles
    assert (second.available, second.capacity, second.waiting) == (None, None, 2)
    assert second.reason == (
        "Free devices of DRA profiles are not counted: the controller may not list resourceclaims"
    )


def test_with_a_preset_a_box_counts_only_where_its_cpu_and_memory_fit() -> None:
    node = capacity.strip_node(
        {
            "metadata": {"name": "n"},
            "status": {
                "allocatable": {"cpu": "3", "memory": "64Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    profiles = SETTINGS.gpu.profiles
    large = SETTINGS.preset("large")
    # Another pod takes 2 of the 3 CPUs: a large box (2 CPUs) fits only on an empty node.
    usage = {"n": {"cpu": Decimal(2)}}
    by_nodes = capacity.availability(profiles, [node], usage, {}, datetime.now(UTC), large)
    answer = devices.with_devices(
        profiles,
        by_nodes,
        devices.Published(
            [published(H100, A100, A100)], [], [devices.strip_device_class(NVIDIA_CLASS)]
        ),
        [node],
        {},
        devices.Matcher(),
        usage,
        large,
    )
    found = {e.name: (e.available, e.capacity) for e in answer.profiles}
    assert found == {"h100-or-a100": (0, 1), "gpu-40g": (0, 1)}


def test_denied_dra_reads_say_that_availability_suffers() -> None:
    denied = [
        p for p in doctor_facts.PERMISSIONS if p.resource == "resourceclaims" and not p.namespaced
    ]
    report = doctor.diagnose(SETTINGS, facts(denied=denied))
    (warning,) = [c for c in report.checks if c.check == "permissions" and c.verdict == "warn"]
    assert warning.message == (
        "the controller may not list resourceclaims.resource.k8s.io cluster-wide; watch "
        "resourceclaims.resource.k8s.io cluster-wide (availability reports unknown)"
    )
