"""``GET /api/v1/usage`` on a real controller reading a usage record on the testbed: the
span's whole days, each grouping, the caller's own by default, and bad queries refused
with the rule they broke."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from devboxes_testbed.controller import Controller, example_settings
from support import StartController, wait_for
from usage_rows import row, seed

TODAY = datetime.now(UTC).date()


@pytest.fixture
def served(start_controller: StartController, kube: Any, namespace: str) -> Controller:
    controller = start_controller(example_settings(namespace))
    seed(
        kube,
        namespace,
        [
            row("ann-l4", "ann", "nvidia-l4", TODAY, groups=("ml",), busy=3600, idle=1800),
            row("bob-l4", "bob", "nvidia-l4", TODAY, groups=("ml",), idle=7200, waiting=60),
            row("op-l4", "operator", "nvidia-l4", TODAY - timedelta(days=1), busy=900),
            # Outside the default span of seven days.
            row("old-l4", "ann", "nvidia-l4", TODAY - timedelta(days=7), busy=999),
        ],
    )

    def loaded() -> bool:
        return usage(controller, all="true").json()["total"]["allocated_seconds"] == 13_500

    wait_for(loaded, 30)
    return controller


def usage(controller: Controller, **params: str) -> requests.Response:
    return requests.get(
        f"{controller.url}/api/v1/usage", params=params, headers=controller.headers(), timeout=30
    )


def test_everyones_usage_by_person_gives_each_persons_seconds(served: Controller) -> None:
    body = usage(served, all="true", group_by="person").json()
    assert body["scope"] is None
    assert body["since"] == f"{TODAY - timedelta(days=6)}T00:00:00Z"
    assert body["until"] == f"{TODAY + timedelta(days=1)}T00:00:00Z"
    by_person = {line["key"]: line for line in body["lines"]}
    assert [line["key"] for line in body["lines"]] == ["bob", "ann", "operator"]
    assert by_person["ann"]["busy_seconds"] == 3600
    assert by_person["ann"]["idle_seconds"] == 1800
    assert by_person["bob"]["waiting_seconds"] == 60
    assert body["bound_seconds"] == 60
    older = usage(served, all="true", since=str(TODAY - timedelta(days=7))).json()
    assert older["total"]["allocated_seconds"] == 13_500 + 999


def test_the_callers_own_usage_is_the_default(served: Controller) -> None:
    body = usage(served).json()
    assert body["scope"] == "operator"
    assert [(line["key"], line["allocated_seconds"]) for line in body["lines"]] == [
        ("nvidia-l4", 900)
    ]
    assert [day["day"] for day in body["days"]] == [str(TODAY - timedelta(days=1))]


def test_groups_and_boxes_are_lines_of_their_own(served: Controller) -> None:
    groups = usage(served, all="true", group_by="group").json()["lines"]
    assert {line["key"]: line["allocated_seconds"] for line in groups} == {
        "ml": 12_600,
        "(none)": 900,
    }
    boxes = usage(served, all="true", group_by="box").json()["lines"]
    assert [line["key"] for line in boxes] == ["bob-l4", "ann-l4", "op-l4"]


@pytest.mark.parametrize(
    ("params", "where", "says"),
    [
        ({"since": str(TODAY), "until": str(TODAY - timedelta(days=1))}, "since", "after until"),
        ({"since": str(TODAY - timedelta(days=400))}, "since", "at most 400 days"),
        ({"group_by": "team"}, "group_by", "person"),
        ({"since": "yesterday"}, "since", "date"),
        ({"until": "0001-01-01"}, "until", "must be a UTC day from 2000-01-01"),
        ({"until": "9999-12-31"}, "until", "must be a UTC day from 2000-01-01"),
    ],
)
def test_a_bad_query_is_refused_with_the_rule_it_broke(
    served: Controller, params: dict[str, str], where: str, says: str
) -> None:
    answer = usage(served, **params)
    assert answer.status_code == 422, answer.text
    (error, *_) = answer.json()["detail"]
    assert error["loc"][-1] == where
    assert says in error["msg"]
