"""``devbox book``'s times as typed, and the bookings table, with plain data."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from devboxes_sdk._cli_parser import build_parser, moment
from devboxes_sdk._render import bookings_table
from devboxes_sdk.models import Booking, BookingState

NOW = datetime(2030, 5, 17, 8, 30, tzinfo=UTC)


@pytest.fixture
def in_utc() -> Iterator[None]:
    """The local clock of these cases is UTC, whatever the machine's is."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.mark.usefixtures("in_utc")
@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("now", NOW),
        ("+30m", NOW + timedelta(minutes=30)),
        ("+2h", NOW + timedelta(hours=2)),
        ("+1d", NOW + timedelta(days=1)),
        ("14:00", datetime(2030, 5, 17, 14, 0, tzinfo=UTC)),
        # Past on today's clock: tomorrow's.
        ("08:00", datetime(2030, 5, 18, 8, 0, tzinfo=UTC)),
        ("2030-05-20 09:00", datetime(2030, 5, 20, 9, 0, tzinfo=UTC)),
        ("2030-05-20T09:00+02:00", datetime(2030, 5, 20, 7, 0, tzinfo=UTC)),
    ],
)
def test_a_time_is_read_as_people_type_it(typed: str, expected: datetime) -> None:
    assert moment(typed, NOW) == expected


@pytest.mark.parametrize("typed", ["tomorrow", "25:00", "+2w", "14h", ""])
def test_a_time_that_is_none_of_the_forms_is_refused_naming_them(typed: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"now, \+30m, \+2h|not a time of day"):
        moment(typed, NOW)


def test_book_needs_a_time_and_hours() -> None:
    parser = build_parser()
    with pytest.raises(Exception, match="--at"):
        parser.parse_args(["book", "nvidia-l4", "--hours", "2"])


@pytest.mark.usefixtures("in_utc")
def test_bookings_read_in_a_table_with_owners_for_an_admin() -> None:
    booking = Booking(
        name="bk-4k2m9x7q",
        owner="alice",
        profile="nvidia-l4",
        starts_at=NOW,
        ends_at=NOW + timedelta(hours=3),
        box="train",
        state=BookingState.BOOKED,
        created_at=NOW,
        message="Booked.",
    )
    assert bookings_table([booking], owners=False).splitlines() == [
        "NAME         PROFILE    FROM              TO                STATE   BOX",
        "bk-4k2m9x7q  nvidia-l4  2030-05-17 08:30  2030-05-17 11:30  booked  train",
    ]
    assert bookings_table([booking], owners=True).splitlines()[1].startswith("alice  bk-")
