"""Where ``--cluster auto`` puts a box, from plain answers of each cluster."""

from __future__ import annotations

import pytest

from devboxes_sdk.models import GpuCapabilities, GpuProfile, ProfileAvailability
from devboxes_sdk.placement import NoPlacement, Offer, choose, offer


def counts(available: int | None, capacity: int | None, waiting: int = 0) -> ProfileAvailability:
    return ProfileAvailability(
        name="nvidia-l4", available=available, capacity=capacity, waiting=waiting
    )


def l4(cluster: str, available: int | None, capacity: int | None, waiting: int = 0) -> Offer:
    return Offer(cluster, "nvidia-l4", counts(available, capacity, waiting))


def test_a_free_device_wins_over_configuration_order() -> None:
    placed = choose([l4("a", 0, 2, 1), l4("b", 1, 1)], "nvidia-l4")
    assert placed.cluster == "b"
    assert placed.reason == "b: nvidia-l4 has 1 free now"


def test_a_device_free_but_promised_to_those_waiting_is_not_free() -> None:
    placed = choose([l4("a", 1, 2, 1), l4("b", 1, 4, 0)], "nvidia-l4")
    assert placed.cluster == "b"


def test_with_none_free_the_fewest_waiting_ahead_per_device_wins_then_the_first() -> None:
    assert choose([l4("a", 0, 1, 2), l4("b", 0, 4, 4)], "nvidia-l4").cluster == "b"
    tied = choose([l4("a", 0, 2, 2), l4("b", 0, 1, 1)], "nvidia-l4")
    assert tied.cluster == "a"
    assert "2 waiting for 2" in tied.reason


def test_clusters_that_cannot_count_or_have_no_device_come_last() -> None:
    unknown = Offer("a", "nvidia-l4", counts(None, None))
    none_there = l4("b", 0, 0)
    assert choose([unknown, none_there, l4("c", 0, 1, 5)], "nvidia-l4").cluster == "c"
    only_unknown = choose([unknown, none_there], "nvidia-l4")
    assert only_unknown.cluster == "a"
    assert "could count" in only_unknown.reason


def test_no_cluster_offering_the_profile_is_an_error_naming_those_asked() -> None:
    with pytest.raises(NoPlacement, match=r"offers nvidia-l4 \(asked: a, b\)"):
        choose([Offer("a", None, None), Offer("b", None, None)], "nvidia-l4")


def catalog(*names: str, default: str | None = None, enabled: bool = True) -> GpuCapabilities:
    profiles = [
        GpuProfile(
            name=name,
            display_name=name,
            resource_name="nvidia.com/gpu",
            count=1,
            default=name == default,
        )
        for name in names
    ]
    return GpuCapabilities(enabled=enabled, default_profile=default, profiles=profiles)


def test_an_offer_is_the_asked_profile_or_the_clusters_own_default() -> None:
    counted = [counts(1, 2)]
    assert offer("a", catalog("nvidia-l4"), counted, "nvidia-l4").availability == counts(1, 2)
    defaulted = offer("a", catalog("nvidia-l4", default="nvidia-l4"), counted, None)
    assert defaulted.profile == "nvidia-l4"
    assert offer("a", catalog("h100"), counted, "nvidia-l4").profile is None
    assert offer("a", catalog("nvidia-l4", enabled=False), counted, "nvidia-l4").profile is None
    assert offer("a", catalog("nvidia-l4"), None, "nvidia-l4").availability is None
