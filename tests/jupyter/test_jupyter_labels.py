"""The words the widgets use for the accelerator choice."""

from __future__ import annotations

import pytest
from devboxes_jupyter import labels
from support import L4_PROFILE

from devboxes_sdk import models

L4 = L4_PROFILE
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
