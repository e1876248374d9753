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


# -- several clusters -------------------------------------------------------------------

OBSERVED = "2026-12-04T08:00:00Z"


def counted(*entries: dict[str, object]) -> models.GpuAvailability:
    return models.GpuAvailability.model_validate({"observed_at": OBSERVED, "profiles": entries})


LAB_A = labels.ClusterOffer(
    "lab-a",
    ENABLED,
    counted({"name": "nvidia-l4", "available": 0, "capacity": 2, "waiting": 1}),
)
LAB_B = labels.ClusterOffer(
    "lab-b",
    models.GpuCapabilities(enabled=True, default_profile="nvidia-l4", profiles=[L4]),
    counted({"name": "nvidia-l4", "available": 1, "capacity": 1}),
)
# Counts nothing: a controller without the availability route, or one that cannot see.
LAB_C = labels.ClusterOffer("lab-c", ENABLED, None)


def test_cluster_options_put_all_clusters_first_and_choose_it_when_there_are_several() -> None:
    assert labels.cluster_options(["lab-a", "lab-b"]) == [
        ("All clusters", "auto"),
        ("lab-a", "lab-a"),
        ("lab-b", "lab-b"),
    ]
    assert labels.default_cluster_key(["lab-a", "lab-b"]) == "auto"
    assert labels.default_cluster_key(["lab-a"]) == "lab-a"


def test_every_cluster_says_its_own_free_count_never_summed() -> None:
    assert labels.merged_accelerator_options([LAB_A, LAB_B]) == [
        ("CPU only", ""),
        ("NVIDIA L4 — lab-a: 0 of 2 free, 1 waiting · lab-b: 1 of 1 free", "nvidia-l4"),
        ("A100 MIG 1g.10gb — lab-a: free count unknown", "a100-mig-1g"),
    ]


def test_a_cluster_that_cannot_count_says_so_and_one_without_gpus_is_left_out() -> None:
    off = labels.ClusterOffer("lab-d", DISABLED, None)
    assert labels.merged_profile_label(L4, [LAB_C, off, LAB_B]) == (
        "NVIDIA L4 — lab-c: free count unknown · lab-b: 1 of 1 free"
    )


def test_profiles_are_merged_by_name_in_configuration_order() -> None:
    assert [p.name for p in labels.merged_profiles([LAB_B, LAB_A])] == ["nvidia-l4", "a100-mig-1g"]
    merged = labels.merged_gpu([LAB_B, LAB_A])
    assert merged.enabled
    assert merged.default_profile is None
    assert not labels.merged_gpu([labels.ClusterOffer("lab-d", DISABLED)]).enabled


def test_the_help_over_every_cluster_says_where_the_box_goes() -> None:
    assert labels.merged_accelerator_help([LAB_A, LAB_B], "nvidia-l4") == (
        f"One dedicated L4. {labels.AUTO_NOTE}"
    )
    assert labels.merged_accelerator_help([LAB_A], "") == labels.AUTO_CPU_NOTE
    disabled = [labels.ClusterOffer("lab-d", DISABLED)]
    assert labels.merged_accelerator_help(disabled, "") == labels.GPU_DISABLED_EVERYWHERE_NOTE


def test_environments_over_every_cluster_are_merged_by_name() -> None:
    web = {"name": "web", "display_name": "Web preview", "mode": "sidecar"}
    cuda = {"name": "cuda", "display_name": "CUDA 12.8 workspace", "mode": "workspace"}
    a = models.ImageCapabilities.model_validate({"enabled": True, "profiles": [web]})
    b = models.ImageCapabilities.model_validate({"enabled": True, "profiles": [cuda, web]})
    offers = [
        labels.ClusterOffer("lab-a", DISABLED, images=a),
        labels.ClusterOffer("lab-b", DISABLED, images=b),
    ]
    assert labels.merged_environment_options(offers) == [
        ("Default workspace", ""),
        ("Web preview (beside the workspace)", "web"),
        ("CUDA 12.8 workspace (as the workspace)", "cuda"),
    ]


def test_where_a_box_went_and_a_silent_cluster_read_as_one_line() -> None:
    assert labels.placement_line("atlas", "lab-b: nvidia-l4 has 1 free now") == (
        "created atlas on lab-b: nvidia-l4 has 1 free now"
    )
    assert labels.cluster_problem("lab-c", "did not answer in 3 s") == (
        "lab-c: did not answer in 3 s"
    )
    assert labels.box_on("atlas", "lab-b") == "atlas@lab-b"
    assert labels.box_on("atlas", None) == "atlas"
