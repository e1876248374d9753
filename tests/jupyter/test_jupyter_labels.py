"""The words the widgets use for profiles, allocations, states and auto-stop times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from devboxes_jupyter import labels

from devboxes_sdk import models

L4 = models.GpuProfile(
    name="nvidia-l4",
    display_name="NVIDIA L4",
    description="One dedicated L4",
    resource_name="nvidia.com/gpu",
    count=1,
    default=True,
)
MIG = models.GpuProfile(
    name="a100-mig-1g",
    display_name="A100 MIG 1g.10gb",
    resource_name="nvidia.com/mig-1g.10gb",
    count=2,
)
ENABLED = models.GpuCapabilities(enabled=True, default_profile="nvidia-l4", profiles=[L4, MIG])
DISABLED = models.GpuCapabilities(enabled=False)
# The label must use the real multiplication sign, not the letter x.
X = "\N{MULTIPLICATION SIGN}"
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_profile_label_names_display_name_count_and_resource() -> None:
    assert labels.profile_label(MIG) == f"A100 MIG 1g.10gb · 2 {X} nvidia.com/mig-1g.10gb"


def test_profile_label_marks_the_default() -> None:
    assert labels.profile_label(L4) == f"NVIDIA L4 · 1 {X} nvidia.com/gpu (default)"


def test_options_put_cpu_only_first_then_profiles_in_catalog_order() -> None:
    assert labels.accelerator_options(ENABLED) == [
        ("CPU only", ""),
        (f"NVIDIA L4 · 1 {X} nvidia.com/gpu (default)", "nvidia-l4"),
        (f"A100 MIG 1g.10gb · 2 {X} nvidia.com/mig-1g.10gb", "a100-mig-1g"),
    ]


def test_options_offer_only_cpu_when_gpu_is_disabled() -> None:
    # Even a catalog that still lists profiles must not offer them once disabled.
    stale = models.GpuCapabilities(enabled=False, profiles=[L4])
    assert labels.accelerator_options(stale) == [("CPU only", "")]


@pytest.mark.parametrize(
    ("gpu", "key", "expected"),
    [
        (ENABLED, "nvidia-l4", "One dedicated L4"),
        (
            ENABLED,
            "a100-mig-1g",
            f"A100 MIG 1g.10gb · 2 {X} nvidia.com/mig-1g.10gb",
        ),
        (ENABLED, "", labels.CPU_NOTE),
        (DISABLED, "", labels.GPU_DISABLED_NOTE),
    ],
)
def test_accelerator_help(gpu: models.GpuCapabilities, key: str, expected: str) -> None:
    assert labels.accelerator_help(gpu, key) == expected


def test_allocation_label_reads_like_the_profile_label() -> None:
    pinned = models.GpuAllocation(
        profile="nvidia-l4", display_name="NVIDIA L4", resource_name="nvidia.com/gpu", count=1
    )
    assert labels.allocation_label(pinned) == f"NVIDIA L4 · 1 {X} nvidia.com/gpu"
    assert labels.allocation_label(None) == "CPU only"


def test_status_line_keeps_the_scheduler_words_verbatim() -> None:
    message = "Scheduling blocked: 0/6 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert labels.status_line(models.DevboxState.STARTING, message) == f"starting — {message}"


@pytest.mark.parametrize("message", [None, "", "   "])
def test_status_line_without_message_is_the_state(message: str | None) -> None:
    assert labels.status_line(models.DevboxState.READY, message) == "ready"


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(days=1, hours=3, minutes=5), "in 1 d 3 h"),
        (timedelta(days=2), "in 2 d"),
        (timedelta(hours=3, minutes=20), "in 3 h 20 min"),
        (timedelta(hours=5), "in 5 h"),
        (timedelta(minutes=45, seconds=30), "in 45 min"),
        (timedelta(seconds=20), "in 1 min"),
        (timedelta(0), "due now"),
        (timedelta(minutes=-3), "due now"),
    ],
)
def test_auto_stop_label_counts_down(delta: timedelta, expected: str) -> None:
    assert labels.auto_stop_label(models.DevboxState.READY, NOW + delta, NOW) == expected


def test_auto_stop_label_for_stopped_and_unlimited_boxes() -> None:
    later = NOW + timedelta(hours=1)
    assert labels.auto_stop_label(models.DevboxState.STOPPED, later, NOW) == "stopped"
    assert labels.auto_stop_label(models.DevboxState.STARTING, None, NOW) == "never"
