"""Usage reports from plain rows: lines by person, group, profile and box, a person's own
only, the days of a span, and the device-seconds a budget counts."""

from __future__ import annotations

from datetime import date, timedelta

from devboxes_controller.placement import usage_ledger as ledger
from devboxes_controller.placement.usage_ledger import Row
from devboxes_controller.placement.usage_report import device_seconds_of, report

MONDAY = date(2026, 12, 7)
TUESDAY = MONDAY + timedelta(days=1)


def row(owner: str, profile: str, busy: int, idle: int, groups: tuple[str, ...] = ()) -> Row:
    return Row(
        box=f"{owner}-{profile}",
        owner=owner,
        groups=groups,
        profile=profile,
        count=1,
        held=None,
        until=ledger.day_start(MONDAY) + 3600,
        allocated=busy + idle,
        busy=busy,
        idle=idle,
        waiting=10,
    )


ROWS = {
    MONDAY: {
        "ann-l4.1": row("ann", "l4", 3600, 1800, ("ml",)),
        "bob-l4.1": row("bob", "l4", 0, 7200, ("ml", "vision")),
    },
    TUESDAY: {"ann-a100.1": row("ann", "a100", 600, 0, ("ml",))},
    MONDAY - timedelta(days=1): {"cy-l4.1": row("cy", "l4", 100, 0)},
}


def test_lines_add_up_by_person_most_allocated_first() -> None:
    found = report(ROWS, MONDAY, TUESDAY, "person", None, 60)
    assert [(line.key, line.allocated_seconds, line.boxes) for line in found.lines] == [
        ("bob", 7200, 1),
        ("ann", 6000, 2),
    ]
    assert found.total.allocated_seconds == 13_200
    assert found.total.waiting_seconds == 30
    assert found.total.people == 2
    assert found.lines[1].busy_share == 4200 / 6000


def test_a_box_counts_for_each_group_of_its_owner() -> None:
    groups = {
        line.key: line.allocated_seconds
        for line in report(ROWS, MONDAY, TUESDAY, "group", None, 60).lines
    }
    assert groups == {"ml": 13_200, "vision": 7200}
    ungrouped = report(
        ROWS, MONDAY - timedelta(days=1), MONDAY - timedelta(days=1), "group", None, 60
    )
    assert [line.key for line in ungrouped.lines] == ["(none)"]


def test_a_persons_report_has_their_rows_only_and_each_day_by_profile() -> None:
    mine = report(ROWS, MONDAY, TUESDAY, "profile", "ann", 60)
    assert {line.key: line.busy_seconds for line in mine.lines} == {"l4": 3600, "a100": 600}
    assert [(d.day, d.profile, d.allocated_seconds) for d in mine.days] == [
        ("2026-12-07", "l4", 5400),
        ("2026-12-08", "a100", 600),
    ]
    assert mine.scope == "ann"
    assert mine.since.date() == MONDAY
    assert mine.until.date() == TUESDAY + timedelta(days=1)


def test_an_empty_span_reports_nothing_and_no_record_time() -> None:
    empty = report(ROWS, date(2025, 1, 1), date(2025, 1, 7), "box", None, 60)
    assert empty.lines == []
    assert empty.total.allocated_seconds == 0
    assert empty.recorded_until is None
    assert empty.total.busy_share is None


def test_a_budget_counts_one_persons_or_one_groups_device_seconds_from_a_day_on() -> None:
    assert device_seconds_of(ROWS, MONDAY, "ann", None, None) == 6000
    assert device_seconds_of(ROWS, MONDAY, "ann", None, "l4") == 5400
    assert device_seconds_of(ROWS, TUESDAY, None, "ml", None) == 600
    assert device_seconds_of(ROWS, MONDAY - timedelta(days=1), None, None, "l4") == 12_700


def test_a_boxs_line_names_its_owner_and_profile() -> None:
    boxes = report(ROWS, MONDAY, TUESDAY, "box", None, 60).lines
    assert [(line.key, line.owner, line.profile) for line in boxes] == [
        ("bob-l4", "bob", "l4"),
        ("ann-l4", "ann", "l4"),
        ("ann-a100", "ann", "a100"),
    ]
    people = report(ROWS, MONDAY, TUESDAY, "person", None, 60).lines
    assert {(line.owner, line.profile) for line in people} == {(None, None)}
