"""A profile's next hours laid out in lanes, with plain segments."""

from datetime import UTC, datetime, timedelta

from devboxes_controller.placement.timeline import lanes

from devboxes_sdk.models import TimelineSegment

NOW = datetime(2030, 5, 17, 8, 0, tzinfo=UTC)
END = NOW + timedelta(hours=24)


def at(hours: float) -> datetime:
    return NOW + timedelta(hours=hours)


def segment(kind: str, start: float, end: float, label: str) -> TimelineSegment:
    return TimelineSegment(kind=kind, starts_at=at(start), ends_at=at(end), label=label)  # type: ignore[arg-type]


def test_boxes_and_bookings_share_lanes_where_they_do_not_overlap():
    box = segment("box", 0, 3, "atlas")
    other = segment("box", 0, 10, "a box")
    booking = segment("booking", 4, 6, "bob's booking")
    laid = lanes(2, [booking, other, box], NOW, END)
    assert [[s.label for s in lane] for lane in laid] == [["atlas", "bob's booking"], ["a box"]]


def test_segments_are_clipped_to_the_hours_shown_and_unused_units_are_empty_lanes():
    long = segment("box", -5, 30, "long")
    gone = segment("booking", -5, -1, "over")
    later = segment("booking", 25, 26, "too late")
    laid = lanes(3, [long, gone, later], NOW, END)
    assert laid[1:] == [[], []]
    (shown,) = laid[0]
    assert (shown.starts_at, shown.ends_at) == (NOW, END)


def test_more_overlapping_than_units_shows_the_extra_lane():
    laid = lanes(1, [segment("box", 0, 5, "a"), segment("booking", 1, 2, "b")], NOW, END)
    assert len(laid) == 2
