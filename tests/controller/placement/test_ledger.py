"""The promises on a profile's devices over time, with plain spans."""

from datetime import UTC, datetime, timedelta

from devboxes_controller.placement.ledger import Ledger, Span

NOW = datetime(2030, 5, 17, 8, 0, tzinfo=UTC)


def at(hours: float) -> datetime:
    return NOW + timedelta(hours=hours)


def booking(start: float, end: float, name: str) -> Span:
    return Span(at(start), at(end), name)


def box(until: float) -> Span:
    return Span(NOW, at(until))


def test_two_overlapping_bookings_fit_two_devices_and_a_third_is_refused_with_the_earliest_fit():
    ledger = Ledger(2, [booking(1, 3, "a"), booking(2, 4, "b")])
    assert ledger.first_full(at(2.5), at(3.5)) == at(2.5)
    assert ledger.first_full(at(0), at(1)) is None
    # Full from 2 h to 3 h; a one-hour window fits again once "a" ends.
    assert ledger.first_full(at(1.5), at(2.5)) == at(2)
    assert ledger.earliest(at(1.5), timedelta(hours=1), at(48)) == at(3)


def test_running_boxes_count_until_their_time_to_live_ends():
    ledger = Ledger(2, [box(5), box(1)])
    assert ledger.first_full(at(0), at(2)) == at(0)
    assert ledger.earliest(at(0), timedelta(hours=2), at(48)) == at(1)
    assert ledger.promised(at(1)) == 1


def test_a_span_ending_when_another_starts_leaves_room():
    ledger = Ledger(1, [booking(1, 2, "a")])
    assert ledger.first_full(at(0), at(1)) is None
    assert ledger.first_full(at(2), at(3)) is None
    assert ledger.first_full(at(0), at(1.01)) == at(1)


def test_booked_only_ignores_instants_where_boxes_alone_fill_the_profile():
    ledger = Ledger(1, [box(1), booking(3, 4, "a")])
    assert ledger.first_full(at(0), at(5)) == at(0)
    assert ledger.first_full(at(0), at(5), booked_only=True) == at(3)
    assert [s.booking for s in ledger.bookings_at(at(3))] == ["a"]


def test_no_window_fits_before_the_latest_start():
    ledger = Ledger(1, [box(30)])
    assert ledger.earliest(at(0), timedelta(hours=2), at(24)) is None
    assert ledger.earliest(at(0), timedelta(hours=2), at(48)) == at(30)


def test_a_profile_without_devices_fits_nothing():
    assert Ledger(0, []).first_full(at(0), at(1)) == at(0)
    assert Ledger(0, []).earliest(at(0), timedelta(hours=1), at(48)) is None


def test_units_held_from_before_count_like_spans_and_free_where_they_end():
    apart = Ledger(2, [booking(2, 3, "a")], [at(1), at(4)])
    together = Ledger(2, [box(1), box(4), booking(2, 3, "a")])
    for ledger in (apart, together):
        assert ledger.promised(at(0.5)) == 2
        assert ledger.first_full(at(1), at(5)) == at(2)
        assert ledger.earliest(at(0), timedelta(hours=1), at(48)) == at(1)
        assert ledger.earliest(at(0), timedelta(hours=2), at(48)) == at(3)


def test_a_booking_opening_over_more_promises_than_devices_is_found_and_no_other():
    # Two devices: a box extended to 5 h and a booking admitted at once for 2 h to 3 h,
    # beside a box running to 4 h: three units promised at 2 h.
    ledger = Ledger(2, [booking(2, 3, "a"), booking(6, 7, "b")], [at(5), at(4)])
    assert ledger.first_broken(NOW) == at(2)
    # Openings already past are not looked at; "b" opens with room to spare.
    assert ledger.first_broken(at(2)) is None
    assert Ledger(3, [booking(2, 3, "a")], [at(5), at(4)]).first_broken(NOW) is None
