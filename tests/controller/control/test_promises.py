"""Which profiles can be booked: a pure answer from the profile and the catalog."""

from __future__ import annotations

from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.control.promises import unbookable

L4 = {"name": "nvidia-l4", "displayName": "L4", "resourceName": "nvidia.com/gpu", "count": 1}
DRA = {"name": "h100-dra", "displayName": "H100", "deviceClassName": "gpu.nvidia.com", "count": 1}
GPU = settings_from_mapping(
    {"gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4, DRA]}}
).gpu


def test_a_counted_profile_of_its_own_devices_can_be_booked() -> None:
    assert unbookable(GPU.profile("nvidia-l4"), counted=True) is None


def test_each_profile_the_controller_could_not_keep_a_booking_of_says_why() -> None:
    assert unbookable(None, counted=True) == "no such GPU profile is offered"
    assert unbookable(GPU.profile("h100-dra"), counted=True) == (
        "h100-dra is a DRA profile: the scheduler places its devices, so the controller "
        "could not keep a booking of it"
    )
    assert unbookable(GPU.profile("nvidia-l4"), counted=False) == (
        "the controller does not count devices (availability is off), so it could not "
        "keep a booking"
    )
    assert unbookable(GPU.profile("nvidia-l4"), counted=True, sharing=["nvidia-l4-pair"]) == (
        "nvidia-l4 shares its devices (nvidia.com/gpu) with nvidia-l4-pair: a box of either "
        "may take the booked device, so the controller could not keep a booking of it"
    )
