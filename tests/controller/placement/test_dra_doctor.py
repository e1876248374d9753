"""The GPU doctor and availability for DRA profiles, from plain data."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.placement import capacity, doctor
from dra_profiles import GPU_40G, H100_OR_A100

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


def facts(**overrides: Any) -> doctor.Facts:
    values: dict[str, Any] = {
        "nodes": [],
        "runtime_classes": [],
        "storage_classes": [STANDARD],
        "quotas": [],
        "limit_ranges": [],
        "device_classes": [{"metadata": {"name": "gpu.nvidia.com"}}],
        "claim_refusals": {"h100-or-a100": None, "gpu-40g": None},
        **overrides,
    }
    return doctor.Facts(**values)


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


def test_free_devices_of_dra_profiles_are_not_counted_yet() -> None:
    profile = SETTINGS.gpu.profile("gpu-40g")
    assert profile is not None
    answer = capacity.availability([profile], [], {}, {"gpu-40g": 2}, datetime.now(UTC))
    (entry,) = answer.profiles
    assert (entry.available, entry.capacity, entry.waiting) == (None, None, 2)
    assert entry.reason == capacity.DRA_NOT_COUNTED
