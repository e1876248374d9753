"""What the controller promised of a profile, from plain data: which profiles can be
booked, and which boxes are one too many where a booking opens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.control.promises import Sitting, ledger_of, overrunning, unbookable, uses
from devboxes_controller.k8s.timestamps import format_timestamp
from devboxes_controller.state.bookings import Record

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


NOW = datetime(2030, 5, 17, 8, 0, tzinfo=UTC)


def _at(hours: float) -> datetime:
    return NOW + timedelta(hours=hours)


def _booking(name: str, owner: str, start: float, end: float) -> Record:
    return Record(
        name=name,
        owner=owner,
        groups=(),
        profile="nvidia-l4",
        starts_at=format_timestamp(_at(start)),
        ends_at=format_timestamp(_at(end)),
        box=None,
        created_at=format_timestamp(NOW),
    )


def test_where_a_booking_opens_over_too_many_boxes_those_running_longest_are_cut():
    # Two devices, both held; alice's booking opens at 2 h, into which both boxes run.
    records = [_booking("bk-alice000", "alice", 2, 3)]
    holding = [
        Sitting("short", "bob", _at(4), True),
        Sitting("long", "carol", _at(9), True),
    ]
    ledger = ledger_of(2, 0, records, holding, NOW)
    at = ledger.first_broken(NOW)
    assert at == _at(2)
    assert [s.name for s in overrunning(ledger, holding, uses(records, holding, NOW), at)] == [
        "long"
    ]


def test_a_box_using_a_booking_open_at_the_opening_is_never_the_one_cut():
    # bob's box uses his booking, open now until 3 h; alice's opens at 2 h; one device
    # is also held by a pod that is not a box (capacity 3, one available).
    records = [_booking("bk-bob00000", "bob", -1, 3), _booking("bk-alice000", "alice", 2, 4)]
    holding = [Sitting("bobs", "bob", _at(9), True), Sitting("carols", "carol", _at(5), True)]
    ledger = ledger_of(3, 0, records, holding, NOW)
    at = ledger.first_broken(NOW)
    assert at == _at(2)
    cut = overrunning(ledger, holding, uses(records, holding, NOW), at)
    assert [s.name for s in cut] == ["carols"]
