"""What the usage page shows, from plain reports: the functions of the dashboard's
``static/usage_view.js``, run by node, against reports the controller's own ``report``
makes from plain rows, so that the page reads the same numbers the API sends."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from devboxes_controller.placement.usage_report import by_day, report
from usage_rows import row

from devboxes_sdk.models import UsageLine

ROOT = Path(__file__).resolve().parents[2]
VIEW = ROOT / "controller" / "devboxes_controller" / "web" / "static" / "usage_view.js"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None, reason="node is needed: `make node-deps` installs it"
)

# Reads calls as [[name, args], ...] from stdin and writes their results as JSON; a Map or
# Set result is written as a list of its entries.
HARNESS = f"""
const view = await import({json.dumps(VIEW.as_uri())});
let input = "";
for await (const chunk of process.stdin) input += chunk;
const plain = (value) => value instanceof Set ? [...value].sort((a, b) => a - b) : value;
const out = JSON.parse(input).map(([name, args]) => plain(view[name](...args)));
process.stdout.write(JSON.stringify(out));
"""


def run(*calls: tuple[str, list[Any]]) -> list[Any]:
    result = subprocess.run(
        ["node", "--input-type=module", "-e", HARNESS],
        input=json.dumps([[name, args] for name, args in calls]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer: list[Any] = json.loads(result.stdout)
    return answer


def one(name: str, *args: Any) -> Any:
    return run((name, list(args)))[0]


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


H = 3600
DAY = date(2026, 12, 8)


def week_report(scope: str | None = None) -> dict[str, Any]:
    """A week's report by profile as the route answers it, from plain rows."""
    rows = [
        row("ann-train", "ann", "nvidia-l4", DAY, busy=3 * H, idle=1 * H),
        row("bob-notebook", "bob", "nvidia-l4", date(2026, 12, 6), busy=H // 2, idle=6 * H),
        row("cara-sweep", "cara", "nvidia-a100", date(2026, 12, 5), busy=8 * H, unknown=H),
    ]
    made = report(by_day(rows), date(2026, 12, 2), DAY, "profile", scope, 60)
    body: dict[str, Any] = made.model_dump(mode="json")
    return body


@pytest.mark.parametrize(
    ("span", "now", "since", "until"),
    [
        ("7d", "2026-12-08T10:00:00", "2026-12-02", "2026-12-08"),
        ("30d", "2026-12-08T10:00:00", "2026-11-09", "2026-12-08"),
        ("month", "2026-12-08T10:00:00", "2026-12-01", "2026-12-08"),
        ("month", "2026-12-01T00:00:00", "2026-12-01", "2026-12-01"),
        # Across a year's end, and the UTC day whatever the browser's own zone says.
        ("7d", "2027-01-03T23:59:59", "2026-12-28", "2027-01-03"),
    ],
)
def test_a_span_is_whole_utc_days_ending_today(span: str, now: str, since: str, until: str) -> None:
    assert one("spanDays", span, ms(now)) == {"since": since, "until": until}


def test_the_query_asks_for_everyone_only_when_told() -> None:
    days = {"since": "2026-12-02", "until": "2026-12-08"}
    mine, everyone = run(("usageQuery", [days, "box", False]), ("usageQuery", [days, "box", True]))
    assert mine == "since=2026-12-02&until=2026-12-08&group_by=box"
    assert everyone == mine + "&all=true"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0"),
        (60, "<0.1"),
        (360, "0.1"),
        (1200, "0.3"),
        (5400, "1.5"),
        (360_000, "100"),
        (1_123_200, "312"),
    ],
)
def test_hours_in_one_decimal(seconds: int, shown: str) -> None:
    assert one("hoursText", seconds) == shown


@pytest.mark.parametrize(
    ("busy", "idle", "unknown"), [(3, 1, 0), (0, 5, 2), (2, 0, 9), (0, 0, 4), (1, 2, 0)]
)
def test_the_busy_share_is_the_sdks(busy: int, idle: int, unknown: int) -> None:
    line = UsageLine(key="k", busy_seconds=busy, idle_seconds=idle, unknown_seconds=unknown)
    share, text = run(("busyShare", [line.model_dump()]), ("shareText", [line.model_dump()]))
    assert share == line.busy_share
    expected = "—" if line.busy_share is None else f"{round(line.busy_share * 100)}%"
    assert text == expected


def test_the_coverage_names_the_whole_days_and_where_the_record_reached() -> None:
    body = week_report()
    everyone, bobs = run(("coverageText", [body]), ("coverageText", [week_report("bob")]))
    assert everyone == (
        "Everyone's GPU usage over the whole UTC days 2026-12-02 to 2026-12-08 (7 days); "
        "recorded until 23:59 UTC."
    )
    assert bobs.startswith("GPU usage of bob over the whole UTC days 2026-12-02 to 2026-12-08")
    earlier = {**body, "recorded_until": "2026-12-07T14:05:30Z"}
    nothing = {**body, "recorded_until": None}
    assert run(("recordedText", [earlier]), ("recordedText", [nothing])) == [
        "recorded until 2026-12-07 14:05 UTC",
        "nothing recorded yet",
    ]


def test_a_report_without_usage_is_empty() -> None:
    body = week_report()
    empty = report({}, date(2026, 12, 2), DAY, "profile", None, 60).model_dump(mode="json")
    assert run(("isEmpty", [body]), ("isEmpty", [empty])) == [False, True]


def test_each_profile_has_every_day_of_the_span() -> None:
    series = one("dailySeries", week_report())
    assert [s["profile"] for s in series] == ["nvidia-a100", "nvidia-l4"]
    for entry in series:
        assert [d["day"] for d in entry["days"]] == [f"2026-12-0{n}" for n in range(2, 9)]
    l4 = {d["day"]: d for d in series[1]["days"]}
    assert l4["2026-12-08"]["allocated_seconds"] == 4 * H
    assert l4["2026-12-06"]["idle_seconds"] == 6 * H
    assert l4["2026-12-07"] == {
        "day": "2026-12-07",
        "profile": "nvidia-l4",
        "allocated_seconds": 0,
        "busy_seconds": 0,
        "idle_seconds": 0,
        "unknown_seconds": 0,
        "waiting_seconds": 0,
    }


def test_bars_stand_in_proportion_under_a_round_top() -> None:
    days = one("dailySeries", week_report())[1]["days"]
    chart = one("chartBars", days, 700, 100)
    assert chart["top"] == 10
    assert len(chart["bars"]) == 7
    heights = [bar["allocated"]["height"] for bar in chart["bars"]]
    assert heights == pytest.approx([0, 0, 0, 0, 65, 0, 40])
    busy = chart["bars"][6]["busy"]
    assert busy == {"y": 70, "height": 30}
    # Side by side, each in its own slot of the width.
    lefts = [bar["x"] for bar in chart["bars"]]
    assert lefts == sorted(lefts)
    assert all(bar["x"] + bar["width"] <= (n + 1) * 100 for n, bar in enumerate(chart["bars"]))
    assert chart["bars"][6]["title"] == "2026-12-08: 4.0 h allocated, 3.0 h busy (75% busy)"
    assert [one("axisTop", h) for h in (0, 0.4, 3, 10, 11, 49, 51, 240)] == [
        1,
        1,
        5,
        10,
        20,
        50,
        100,
        500,
    ]


def test_a_month_labels_about_six_days_and_always_the_last() -> None:
    week, month = run(("labelledDays", [7]), ("labelledDays", [30]))
    assert week == list(range(7))
    assert 29 in month
    assert 5 <= len(month) <= 7


def test_idle_holders_are_ordered_by_idle_hours() -> None:
    lines = [
        {"key": "b", "idle_seconds": 10, "busy_seconds": 0},
        {"key": "a", "idle_seconds": 10, "busy_seconds": 0},
        {"key": "c", "idle_seconds": 0, "busy_seconds": 99},
        {"key": "d", "idle_seconds": 30, "busy_seconds": 1},
    ]
    holders = one("idleHolders", lines)
    assert [line["key"] for line in holders] == ["d", "a", "b"]
    assert [line["key"] for line in one("idleHolders", lines, 1)] == ["d"]


def test_the_profile_table_reads_a_line() -> None:
    line = UsageLine(
        key="nvidia-l4",
        allocated_seconds=13 * H,
        busy_seconds=5 * H + H // 2,
        idle_seconds=7 * H + H // 2,
        waiting_seconds=1200,
    )
    assert one("profileCells", line.model_dump()) == ["13.0", "5.5", "7.5", "0", "42%", "0.3"]


def test_the_apis_message_is_shown() -> None:
    refused = {"detail": "only admins may see everyone's usage; leave out all for your own"}
    invalid = {"detail": [{"loc": ["query", "since"], "msg": "a report covers at most 400 days"}]}
    assert run(("detailText", [refused]), ("detailText", [invalid]), ("detailText", [None])) == [
        refused["detail"],
        "a report covers at most 400 days",
        "unknown error",
    ]
