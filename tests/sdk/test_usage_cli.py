"""``devbox usage`` with plain data: the table and the CSV of a report, the days as typed,
the query the SDK checks before it asks, and every refused command line exiting 2 with
one line, before any request."""

from __future__ import annotations

import argparse
import csv
import io
import json
from datetime import date
from typing import Any

import pytest
from test_cli_live import UNREACHABLE_URL, devbox, usage_error

from devboxes_sdk import ValidationError
from devboxes_sdk._cli_parser import _day, _first_day
from devboxes_sdk._render import hours, recorded_text, usage_csv, usage_table, usage_text
from devboxes_sdk.client import usage_query
from devboxes_sdk.models import UsageReport


def report(*lines: dict[str, Any], **fields: Any) -> UsageReport:
    """A week's report of alice's, by profile, of ``lines`` (a total of their sums)."""
    names = ("allocated", "busy", "idle", "unknown", "waiting")
    total = {
        f"{name}_seconds": sum(line.get(f"{name}_seconds", 0) for line in lines) for name in names
    }
    return UsageReport.model_validate(
        {
            "since": "2026-12-02T00:00:00Z",
            "until": "2026-12-09T00:00:00Z",
            "group_by": "profile",
            "scope": "alice",
            "lines": list(lines),
            "total": {"key": "total", **total},
            "recorded_until": "2026-12-08T14:05:31Z",
            "bound_seconds": 60,
            **fields,
        }
    )


L4 = {
    "key": "nvidia-l4",
    "allocated_seconds": 27_000,
    "busy_seconds": 18_000,
    "idle_seconds": 7_200,
    "unknown_seconds": 1_800,
    "waiting_seconds": 900,
    "people": 1,
    "boxes": 2,
}
MIG = {
    "key": "nvidia-a100-mig-1g10gb",
    "allocated_seconds": 3_600,
    "unknown_seconds": 3_600,
    "people": 1,
    "boxes": 1,
}


@pytest.mark.parametrize(
    ("seconds", "decimals", "shown"),
    [(0, 1, "0.0"), (900, 1, "0.3"), (900, 2, "0.25"), (27_000, 2, "7.50"), (1, 2, "0.00")],
)
def test_hours_round_halves_up(seconds: int, decimals: int, shown: str) -> None:
    assert hours(seconds, decimals) == shown


def test_a_report_reads_as_a_table_of_hours_with_a_total() -> None:
    assert usage_table(report(L4, MIG)).splitlines() == [
        "PROFILE                 ALLOCATED H  BUSY H  IDLE H  UNKNOWN H  BUSY SHARE  WAITED H",
        "nvidia-l4               7.5          5.0     2.0     0.5        71%         0.3",
        "nvidia-a100-mig-1g10gb  1.0          0.0     0.0     1.0        -           0.0",
        "(total)                 8.5          5.0     2.0     1.5        71%         0.3",
    ]


def test_one_line_needs_no_total_and_the_column_names_the_grouping() -> None:
    lines = usage_table(report(L4, group_by="person")).splitlines()
    assert [line.split()[0] for line in lines] == ["PERSON", "nvidia-l4"]


def test_the_text_names_whose_usage_each_span_and_how_far_it_is_recorded() -> None:
    week = report(L4)
    month = report(L4, since="2026-12-01T00:00:00Z")
    text = usage_text([("This week", week), ("This month", month)])
    assert text.splitlines()[0] == "GPU usage of alice, by profile"
    assert "This week (2026-12-02 to 2026-12-08):" in text.splitlines()
    assert "This month (2026-12-01 to 2026-12-08):" in text.splitlines()
    assert text.splitlines()[-1] == "Reports are whole UTC days; recorded until 14:05 UTC."


def test_a_span_without_a_title_is_named_by_its_days_and_an_empty_one_says_so() -> None:
    text = usage_text([("", report(scope=None))])
    assert text.splitlines()[:4] == [
        "Everyone's GPU usage, by profile",
        "",
        "2026-12-02 to 2026-12-08:",
        "No GPU usage.",
    ]


@pytest.mark.parametrize(
    ("recorded", "said"),
    [
        ("2026-12-07T23:59:59Z", "recorded until 2026-12-07 23:59 UTC"),
        (None, "nothing is recorded in this span yet"),
    ],
)
def test_a_recording_that_ends_before_the_last_day_names_its_day(
    recorded: str | None, said: str
) -> None:
    assert recorded_text([report(recorded_until=recorded)]) == said


def test_the_csv_gives_the_seconds_of_the_json_and_hours_with_two_decimals() -> None:
    given = report(L4, MIG)
    rows = list(csv.DictReader(io.StringIO(usage_csv(given))))
    assert rows[0] == {
        "profile": "nvidia-l4",
        "allocated_seconds": "27000",
        "busy_seconds": "18000",
        "idle_seconds": "7200",
        "unknown_seconds": "1800",
        "waiting_seconds": "900",
        "allocated_hours": "7.50",
        "busy_hours": "5.00",
        "idle_hours": "2.00",
        "unknown_hours": "0.50",
        "waiting_hours": "0.25",
        "busy_share": "0.7143",
        "people": "1",
        "boxes": "2",
    }
    assert rows[1]["busy_share"] == ""
    wire = json.loads(given.model_dump_json())["lines"]
    assert [int(row["unknown_seconds"]) for row in rows] == [
        line["unknown_seconds"] for line in wire
    ]


def test_a_key_with_a_comma_stays_one_field() -> None:
    text = usage_csv(report({**L4, "key": "ml,vision"}, group_by="group"))
    assert next(csv.reader(io.StringIO(text.splitlines()[1])))[0] == "ml,vision"


@pytest.mark.parametrize(
    ("typed", "day"), [("2026-12-01", date(2026, 12, 1)), (" 2024-02-29 ", date(2024, 2, 29))]
)
def test_a_day_is_yyyy_mm_dd(typed: str, day: date) -> None:
    assert _day(typed) == day


@pytest.mark.parametrize("typed", ["2026-13-01", "2025-02-29", "20261201", "yesterday", ""])
def test_anything_else_is_not_a_day(typed: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a date; give YYYY-MM-DD"):
        _day(typed)


def test_since_also_takes_a_number_of_days() -> None:
    assert (_first_day("7d"), _first_day("30d"), _first_day("2026-12-01")) == (
        7,
        30,
        date(2026, 12, 1),
    )
    with pytest.raises(argparse.ArgumentTypeError, match="1 to 400 days, got '401d'"):
        _first_day("401d")


def test_the_query_leaves_the_missing_days_to_the_server() -> None:
    assert usage_query() == {"group_by": "profile"}
    assert usage_query(date(2026, 12, 1), date(2026, 12, 8), "person", everyone=True) == {
        "group_by": "person",
        "since": "2026-12-01",
        "until": "2026-12-08",
        "all": "true",
    }


@pytest.mark.parametrize(
    ("since", "until", "group_by", "says"),
    [
        (date(2026, 12, 9), date(2026, 12, 8), "profile", "must not be after until (2026-12-08)"),
        (date(2025, 1, 1), date(2026, 12, 8), "profile", "a report covers at most 400 days"),
        (None, None, "team", "must be one of person, group, profile, box, got 'team'"),
    ],
)
def test_a_query_the_server_would_refuse_is_refused_without_a_request(
    since: date | None, until: date | None, group_by: str, says: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        usage_query(since, until, group_by)
    assert refused.value.local
    assert [error.msg for error in refused.value.errors] == [says]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--since", "2026-13-01"],
            "argument --since: '2026-13-01' is not a date; give YYYY-MM-DD (a UTC day) or a "
            "number of days, as 7d",
        ),
        (
            ["--until", "tomorrow"],
            "argument --until: 'tomorrow' is not a date; give YYYY-MM-DD (a UTC day)",
        ),
        (
            ["--since", "2026-12-09", "--until", "2026-12-08"],
            "--since 2026-12-09 is after --until 2026-12-08",
        ),
        (
            ["--since", "2025-01-01", "--until", "2026-12-08"],
            "--since: a report covers at most 400 days",
        ),
        (
            ["--group-by", "team"],
            "argument --group-by: invalid choice: 'team' (choose from 'person', 'group', "
            "'profile', 'box')",
        ),
    ],
)
def test_a_refused_command_line_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    # Nothing listens at the URL: exit 2 means the command was refused before any request.
    env = {"DEVBOX_URL": UNREACHABLE_URL, "DEVBOX_TOKEN": "t" * 40}
    refused = devbox(env, "usage", *args)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == usage_error("devbox usage", message)


def test_json_with_csv_is_refused_as_json() -> None:
    env = {"DEVBOX_URL": UNREACHABLE_URL, "DEVBOX_TOKEN": "t" * 40}
    refused = devbox(env, "usage", "--json", "--csv")
    assert (refused.returncode, refused.stderr) == (2, "")
    assert json.loads(refused.stdout) == {
        "error": {
            "kind": "usage",
            "message": "--json and --csv cannot be combined: give one",
            "status": None,
        }
    }
