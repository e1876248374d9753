"""GPU-hour budgets from plain rows: which budgets hold for a box, whether one is used
up, the sentence a refusal gives and the UTC midnight at which enough hours come back."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from devboxes_controller.config.limits import LimitSettings
from devboxes_controller.k8s.kube import Conflict
from devboxes_controller.placement import budgets
from devboxes_controller.placement.budgets import Tally
from devboxes_controller.placement.limits import Asker
from devboxes_controller.placement.usage_report import by_day
from usage_rows import row

TODAY = date(2026, 12, 8)
HOUR = 3600
ALICE = Asker("alice", frozenset({"ml", "unlimited"}))
BOB = Asker("bob", frozenset({"vision"}))


def limits(raw: dict[str, Any]) -> LimitSettings:
    return LimitSettings.model_validate(raw)


def day(back: int) -> date:
    return TODAY - timedelta(days=back)


GROUP_ML = limits(
    {"groups": {"ml": {"budgets": [{"profile": "nvidia-l4", "hours": 400, "days": 7}]}}}
)
# Group ml's members used 401.5 nvidia-l4 hours over the last 7 days, 12 of them on the
# oldest day of the window.
ML_ROWS = by_day(
    [
        row("old", "carol", "nvidia-l4", day(6), groups=("ml",), busy=12 * HOUR),
        row("a", "alice", "nvidia-l4", day(3), groups=("ml",), count=2, busy=200 * HOUR),
        row("b", "alice", "nvidia-l4", day(1), groups=("ml",), idle=89 * HOUR + 1800),
        row("c", "bob", "nvidia-l4", TODAY, groups=("ml", "vision"), unknown=100 * HOUR),
        # Outside the window, of another profile, of another group: not counted.
        row("gone", "alice", "nvidia-l4", day(7), groups=("ml",), busy=500 * HOUR),
        row("mig", "alice", "mig", TODAY, groups=("ml",), busy=500 * HOUR),
        row("vis", "bob", "nvidia-l4", TODAY, groups=("vision",), busy=500 * HOUR),
    ]
)


def refusal(settings: LimitSettings, rows: Any, asker: Asker, profile: str | None) -> str:
    with pytest.raises(Conflict) as caught:
        budgets.check(settings, rows, asker, profile, TODAY)
    assert caught.value.status == 409
    return caught.value.detail


def test_a_group_budget_used_up_refuses_in_one_sentence_with_when_hours_come_back() -> None:
    assert refusal(GROUP_ML, ML_ROWS, ALICE, "nvidia-l4") == (
        "group ml's members used 401.5 of their 400 nvidia-l4 hours in the last 7 days; "
        "12.0 hours come back at 2026-12-09 00:00 UTC"
    )
    # Bob is not in ml (his box's row was recorded with ml, which counts towards ml).
    budgets.check(GROUP_ML, ML_ROWS, BOB, "nvidia-l4", TODAY)
    # Another profile, or a box without a GPU, has no budget here.
    budgets.check(GROUP_ML, ML_ROWS, ALICE, "mig", TODAY)
    budgets.check(GROUP_ML, ML_ROWS, ALICE, None, TODAY)


def test_a_budget_holds_until_its_usage_reaches_it() -> None:
    under = by_day([row("a", "alice", "nvidia-l4", TODAY, groups=("ml",), busy=400 * HOUR - 1)])
    budgets.check(GROUP_ML, under, ALICE, "nvidia-l4", TODAY)
    reached = by_day([row("a", "alice", "nvidia-l4", TODAY, groups=("ml",), busy=400 * HOUR)])
    assert refusal(GROUP_ML, reached, ALICE, "nvidia-l4") == (
        "group ml's members used 400.0 of their 400 nvidia-l4 hours in the last 7 days; "
        "400.0 hours come back at 2026-12-15 00:00 UTC"
    )


def test_hours_come_back_at_the_first_midnight_usage_drops_below_the_budget() -> None:
    settings = limits(
        {"perPerson": {"budgets": [{"profile": "nvidia-l4", "hours": 10, "days": 5}]}}
    )
    rows = by_day(
        [
            row("a", "alice", "nvidia-l4", day(4), busy=1 * HOUR),
            row("b", "alice", "nvidia-l4", day(3), busy=1 * HOUR + 1),
            row("c", "alice", "nvidia-l4", day(2), busy=9 * HOUR),
            # Someone else's hours are not alice's.
            row("d", "bob", "nvidia-l4", day(2), busy=50 * HOUR),
        ]
    )
    # 11 hours and a second; the first day's hour leaves at the 9th, the next at the 10th.
    assert refusal(settings, rows, ALICE, "nvidia-l4") == (
        "you used 11.0 of your 10 nvidia-l4 hours in the last 5 days; "
        "2.1 hours come back at 2026-12-10 00:00 UTC"
    )


def test_a_budget_of_every_gpu_profile_counts_them_all_and_holds_for_each() -> None:
    settings = limits({"perPerson": {"budgets": [{"hours": 3, "days": 1}]}})
    rows = by_day(
        [
            row("a", "alice", "nvidia-l4", TODAY, busy=2 * HOUR),
            row("b", "alice", "mig", TODAY, busy=1 * HOUR),
            row("y", "alice", "mig", day(1), busy=50 * HOUR),
        ]
    )
    assert refusal(settings, rows, ALICE, "amd-rocm") == (
        "you used 3.0 of your 3 GPU hours in today (UTC); "
        "3.0 hours come back at 2026-12-09 00:00 UTC"
    )


def test_hours_recorded_for_a_day_still_ahead_come_back_only_after_the_window() -> None:
    """A leader whose clock ran ahead wrote a row of tomorrow: it stays in the window."""
    settings = limits({"perPerson": {"budgets": [{"profile": "nvidia-l4", "hours": 1, "days": 2}]}})
    rows = by_day([row("a", "alice", "nvidia-l4", TODAY + timedelta(days=1), busy=2 * HOUR)])
    assert refusal(settings, rows, ALICE, "nvidia-l4") == (
        "you used 2.0 of your 1 nvidia-l4 hours in the last 2 days; "
        "hours come back only as days leave the 2-day window"
    )


def test_the_operator_and_groups_without_budgets_have_none() -> None:
    settings = limits(
        {
            "perPerson": {"budgets": [{"hours": 1, "days": 7}]},
            "groups": {"unlimited": {"boxes": 3}},
        }
    )
    assert budgets.applying(settings, None, {"ml"}, "nvidia-l4") == []
    found = budgets.applying(settings, "alice", {"unlimited", "ml"}, "nvidia-l4")
    assert [(a.group, a.budget.hours) for a in found] == [(None, 1)]
    assert budgets.used_up(settings, Tally({}), None, (), "nvidia-l4", TODAY) == []


def test_the_person_comes_first_then_each_group_by_name() -> None:
    settings = limits(
        {
            "perPerson": {"budgets": [{"hours": 1, "days": 7}]},
            "groups": {
                "vision": {"budgets": [{"hours": 1, "days": 7}]},
                "ml": {"budgets": [{"profile": "nvidia-l4", "hours": 1, "days": 3}]},
            },
        }
    )
    rows = by_day([row("a", "alice", "nvidia-l4", TODAY, groups=("ml", "vision"), busy=HOUR)])
    spent = budgets.used_up(settings, Tally(rows), "alice", {"vision", "ml"}, "nvidia-l4", TODAY)
    assert [s.key for s in spent] == [
        "person * 1h/7d",
        "group ml nvidia-l4 1h/3d",
        "group vision * 1h/7d",
    ]
    assert spent[0].back_at == datetime(2026, 12, 15, tzinfo=UTC)


def test_what_the_box_and_its_events_say_of_the_owner() -> None:
    spent = budgets.used_up(GROUP_ML, Tally(ML_ROWS), "alice", {"ml"}, "nvidia-l4", TODAY)[0]
    assert spent.stopped() == (
        "Stopped: group ml used its 400 nvidia-l4 hours of the last 7 days; "
        "hours come back at 2026-12-09 00:00 UTC."
    )
    own = limits({"perPerson": {"budgets": [{"profile": "nvidia-l4", "hours": 2, "days": 3}]}})
    rows = by_day([row("a", "alice", "nvidia-l4", day(1), count=2, busy=2 * HOUR + 1800)])
    mine = budgets.used_up(own, Tally(rows), "alice", (), "nvidia-l4", TODAY)[0]
    assert mine.sentence(own=False) == (
        "alice used 2.5 of their 2 nvidia-l4 hours in the last 3 days; "
        "2.5 hours come back at 2026-12-10 00:00 UTC"
    )
    assert mine.stopped() == (
        "Stopped: alice used their 2 nvidia-l4 hours of the last 3 days; "
        "hours come back at 2026-12-10 00:00 UTC."
    )


def test_the_rows_a_check_reads_start_where_the_longest_window_does() -> None:
    settings = limits(
        {
            "perPerson": {"budgets": [{"hours": 1, "days": 7}]},
            "groups": {"ml": {"budgets": [{"hours": 1, "days": 30}]}},
        }
    )
    assert budgets.first_day(settings, TODAY) == TODAY - timedelta(days=29)
    assert budgets.first_day(limits({}), TODAY) == TODAY
