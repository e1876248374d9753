"""Booking records: read from their ConfigMap, their state and sentence, and the keeper's
pass, with plain data."""

from datetime import UTC, datetime, timedelta

from devboxes_controller.control.bookings import booked_hours, settle, to_start
from devboxes_controller.k8s.timestamps import format_timestamp
from devboxes_controller.state.bookings import Record, records_of, state, to_model

from devboxes_sdk.models import BookingState

NOW = datetime(2030, 5, 17, 8, 0, tzinfo=UTC)
GRACE = timedelta(minutes=15)


def at(minutes: float) -> str:
    return format_timestamp(NOW + timedelta(minutes=minutes))


def record(name: str = "bk-aaaaaaaa", start: float = 60, end: float = 180, **kw: object) -> Record:
    fields: dict[str, object] = {
        "name": name,
        "owner": "bob",
        "groups": ("ml",),
        "profile": "l4",
        "starts_at": at(start),
        "ends_at": at(end),
        "box": None,
        "created_at": at(0),
        **kw,
    }
    return Record(**fields)  # type: ignore[arg-type]


def test_records_round_trip_through_their_config_map_and_bad_entries_are_skipped():
    late, early = record("bk-late0000", 120, 180), record("bk-early000", 0, 60)
    config_map = {
        "data": {r.name: r.to_json() for r in (late, early)} | {"bk-broken00": "{not json"}
    }
    assert records_of(config_map) == [early, late]
    assert records_of(None) == []
    assert Record.from_json('{"name": "x"}') is None
    assert Record.from_json(record(start=0).to_json().replace(at(0), "yesterday")) is None


def test_state_follows_the_clock_and_the_record():
    booked = record()
    assert state(booked, NOW) is BookingState.BOOKED
    assert state(booked, NOW + timedelta(minutes=60)) is BookingState.OPEN
    assert state(record(used_by="train"), NOW + timedelta(minutes=61)) is BookingState.USED
    assert state(booked, NOW + timedelta(minutes=180)) is BookingState.ENDED
    released = record(released_at=at(75), released_why="no box")
    assert state(released, NOW + timedelta(minutes=90)) is BookingState.RELEASED
    model = to_model(booked, NOW, GRACE)
    assert model.message == (
        "Booked: l4 from 2030-05-17 09:00 UTC to 2030-05-17 11:00 UTC; any of bob's boxes "
        "of it gets the device ahead of the line then."
    )
    assert to_model(record(box="train"), NOW, GRACE).message == (
        "Booked: l4 from 2030-05-17 09:00 UTC to 2030-05-17 11:00 UTC; train is started then "
        "if it is stopped, and gets the device ahead of the line."
    )
    opened = to_model(record(box="train"), NOW + timedelta(minutes=61), GRACE)
    assert opened.state is BookingState.OPEN
    assert "train gets the device ahead of the line if started by 2030-05-17 09:15 UTC" in (
        opened.message
    )
    started = to_model(record(box="train", started_at=at(60)), NOW + timedelta(minutes=61), GRACE)
    assert "; train was started at 2030-05-17 09:00 UTC; train gets the device" in (started.message)


def test_the_keeper_records_the_box_that_used_a_booking():
    open_now = record(start=-5)
    settled = settle([open_now], lambda r: "train", NOW, GRACE)
    assert settled == [record(start=-5, used_by="train")]
    # A used booking stays used when its box stops: the window is still the owner's.
    assert settle(settled, lambda r: None, NOW, GRACE) == settled


def test_a_box_uses_one_booking_at_a_time_and_the_one_naming_it_first():
    anybox = record("bk-anybox00", start=-5)
    named = record("bk-named000", start=-3, box="train")
    settled = settle([anybox, named], lambda r: "train", NOW, GRACE)
    assert settled == [anybox, record("bk-named000", start=-3, box="train", used_by="train")]
    # Once recorded, a later pass gives it no second booking either.
    assert settle(settled, lambda r: "train", NOW, GRACE) == settled


def test_the_keeper_releases_a_booking_unused_after_the_grace_time_and_keeps_it_before():
    fresh = record(start=-14)
    assert settle([fresh], lambda r: None, NOW, GRACE) == [fresh]
    (late,) = settle([record(start=-15)], lambda r: None, NOW, GRACE)
    assert late.released_at == at(0)
    assert late.released_why == "no box of it had the device within 15 min of the window's opening"
    assert state(late, NOW) is BookingState.RELEASED
    # Released, it is not released again, nor given to a box that starts later.
    assert settle([late], lambda r: "train", NOW, GRACE) == [late]


def test_the_keeper_forgets_bookings_a_day_after_they_ended_and_leaves_future_ones():
    old = record("bk-old00000", -2000, -1441)
    recent = record("bk-recent00", -200, -100)
    future = record("bk-future00", 600, 700)
    assert settle([old, recent, future], lambda r: None, NOW, GRACE) == [recent, future]


def test_booked_hours_count_only_what_is_still_ahead():
    assert booked_hours([record(start=-60, end=120), record(start=600, end=660)], NOW) == 3
    assert booked_hours([record(start=-60, end=120, released_at=at(0))], NOW) == 0


def test_a_booked_box_stopped_when_its_window_opens_is_started_once_until_the_release():
    named = record(start=-1, box="train")
    stopped = {"train"}
    due = to_start(
        [named, record("bk-anybox00", start=-1), record("bk-later000", start=5, box="train")],
        lambda r: r.box in stopped,
        NOW,
        GRACE,
    )
    assert due == [named]
    # Running already, started once before, used, released, or past the grace: nothing.
    assert to_start([named], lambda r: False, NOW, GRACE) == []
    for done in (
        record(start=-1, box="train", started_at=at(-1)),
        record(start=-1, box="train", used_by="train"),
        record(start=-1, box="train", released_at=at(0), released_why="cancelled"),
        record(start=-15, box="train"),
    ):
        assert to_start([done], lambda r: True, NOW, GRACE) == []
