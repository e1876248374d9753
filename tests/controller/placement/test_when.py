"""When a new box of a profile would get a device, from plain counts and stop times
(docs/api.md, "When a device comes free")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devboxes_controller.placement.ledger import Ledger, Span
from devboxes_controller.placement.when import after_bookings, when

from devboxes_sdk.models import ProfileAvailability

NOW = datetime(2030, 1, 1, 9, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return NOW + timedelta(minutes=minutes)


STOPS = [NOW + timedelta(hours=3), NOW + timedelta(hours=1), NOW + timedelta(hours=2)]


def counts(available: int | None, capacity: int | None, waiting: int) -> ProfileAvailability:
    return ProfileAvailability(
        name="nvidia-l4", available=available, capacity=capacity, waiting=waiting
    )


def test_a_device_free_beyond_the_line_is_free_now() -> None:
    found = when(counts(1, 3, 0), STOPS[:2], NOW, shared=False)
    assert (found.free_at, found.bound) == (NOW, True)
    assert found.basis == "Now: 1 of 3 free."


def test_a_new_box_waits_behind_the_line_for_the_stop_that_frees_its_turn() -> None:
    # None free, one waiting: the second stop, counted from the earliest, is the new box's.
    found = when(counts(0, 3, 1), STOPS, NOW, shared=False)
    assert found.free_at == NOW + timedelta(hours=2)
    assert found.bound
    assert found.basis == (
        "By 2030-01-01 11:00 UTC at the latest: the 2nd of the 3 boxes holding one reaches "
        "the end of its time to live then (1 waiting ahead); sooner if a box stops earlier, "
        "later only if its owner extends it or someone holding fewer of these devices joins "
        "the line first."
    )


def test_a_free_device_the_line_takes_first_counts_towards_the_turn() -> None:
    # One free, two waiting: the first waiting box takes it, the second the first stop
    # (in an hour), the new box the next (in three).
    found = when(counts(1, 3, 2), STOPS[:2], NOW, shared=False)
    assert found.free_at == NOW + timedelta(hours=3)


def test_devices_held_by_pods_that_are_not_boxes_make_it_an_estimate() -> None:
    found = when(counts(0, 4, 0), STOPS, NOW, shared=False)
    assert (found.free_at, found.bound) == (NOW + timedelta(hours=1), False)
    assert found.basis.startswith("About 2030-01-01 10:00 UTC, an estimate: ")
    assert found.basis.endswith("but pods that are not boxes hold some of these devices.")


def test_another_profile_on_the_same_devices_makes_it_an_estimate() -> None:
    found = when(counts(0, 3, 0), STOPS, NOW, shared=True)
    assert not found.bound
    assert found.basis.endswith("but another profile asks for the same devices.")


def test_a_dra_profile_is_an_estimate_even_when_its_boxes_hold_every_device() -> None:
    found = when(counts(0, 3, 0), STOPS, NOW, shared=False, dra=True)
    assert (found.free_at, found.bound) == (NOW + timedelta(hours=1), False)
    assert found.basis.endswith(
        "but the scheduler, not the controller's line, hands out DRA devices."
    )


def test_bookings_move_the_answer_to_when_a_box_could_run_before_the_next_one() -> None:
    # One device; its box stops at 10:00 and a booking holds it from 10:10 to 12:00.
    stops = Ledger(1, [Span(NOW, NOW + timedelta(hours=1)), Span(at(70), at(180), "bk-a")])
    found = when(counts(0, 1, 0), [NOW + timedelta(hours=1)], NOW, shared=False)
    moved = after_bookings(found, stops, timedelta(minutes=15), NOW + timedelta(days=1))
    assert (moved.free_at, moved.bound) == (at(180), False)
    assert moved.basis.startswith("About 2030-01-01 12:00 UTC, an estimate: ")
    # A box that could run 15 min before the booking keeps the first answer.
    early = Ledger(1, [Span(NOW, NOW + timedelta(hours=1)), Span(at(75), at(180), "bk-a")])
    assert after_bookings(found, early, timedelta(minutes=15), NOW + timedelta(days=1)) == found
    full = after_bookings(found, stops, timedelta(minutes=15), at(120))
    assert (full.free_at, full.basis.startswith("Unknown: bookings hold")) == (None, True)


def test_more_waiting_than_boxes_hold_devices_is_unknown() -> None:
    found = when(counts(0, 4, 3), STOPS[:1], NOW, shared=False)
    assert found.free_at is None
    assert found.basis.startswith("Unknown: 3 waiting for 1 boxes that hold these devices")


def test_a_profile_whose_devices_are_not_counted_is_unknown_with_the_reason() -> None:
    uncounted = ProfileAvailability(name="a100", reason="the scheduler places DRA devices")
    found = when(uncounted, STOPS, NOW, shared=False)
    assert (found.free_at, found.bound) == (None, False)
    assert found.basis == "Unknown: the scheduler places DRA devices."
