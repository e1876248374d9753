"""``devbox usage`` and ``Client.usage`` against a real controller reading a usage record
on the testbed, with people logged in through a real OpenID provider: the caller's own
hours this week and this month, everyone's by person for an admin, the CSV and the JSON
agreeing, someone who is not an admin refused everyone's, and ``--cluster``."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from support import StartController, wait_for
from test_cli_live import UNREACHABLE_URL, devbox
from test_clusters_live import write_config
from usage_rows import row, seed

from devboxes_sdk import Client, PermissionDenied

TODAY = datetime.now(UTC).date()
WEEK_START = TODAY - timedelta(days=6)
MONTH_START = TODAY.replace(day=1)
L4 = "nvidia-l4"
MIG = "nvidia-a100-mig-1g10gb"
ROWS = [
    # The operator's own: 2.5 h of L4 (1.5 busy, 0.5 idle, 0.5 unknown, 10 min waited)
    # and 1 h of a MIG slice nobody measured.
    row("op-l4", "operator", L4, TODAY, busy=5400, idle=1800, unknown=1800, waiting=600),
    row("op-mig", "operator", MIG, TODAY, unknown=3600),
    # Before the first day of any month that holds today.
    row("op-old", "operator", L4, TODAY - timedelta(days=40), busy=7200),
    row("alice-l4", "alice", L4, TODAY, groups=("ml",), busy=7200, idle=3600),
    row("bob-l4", "bob", L4, TODAY - timedelta(days=1), groups=("vision",), idle=3600),
]
# Everything but op-old.
RECENT_SECONDS = 9000 + 3600 + 10_800 + 3600


def _settings(issuer: Issuer, namespace: str) -> dict[str, Any]:
    settings = example_settings(namespace)
    settings["auth"] = {
        "adminGroups": ["gpu-admins"],
        "oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID},
    }
    return settings


@pytest.fixture
def served(
    start_controller: StartController, issuer: Issuer, kube: Any, namespace: str
) -> Controller:
    """A controller trusting the issuer, its usage record holding ``ROWS``."""
    controller = start_controller(_settings(issuer, namespace))
    seed(kube, namespace, ROWS)
    with Client(controller.url, controller.token) as client:

        def loaded() -> bool:
            """the report shows every recent row seeded"""
            since = TODAY - timedelta(days=1)
            found = client.usage(since, TODAY, everyone=True)
            return found.total.allocated_seconds == RECENT_SECONDS

        wait_for(loaded, 30)
    return controller


def env_of(controller: Controller, token: str | None = None) -> dict[str, str]:
    return {"DEVBOX_URL": controller.url, "DEVBOX_TOKEN": token or controller.token}


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The rows of the table under ``heading``, each split at its columns' blanks."""
    block = text.split(f"{heading}:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split() for line in block.splitlines()]


HEADER = ["PROFILE", "ALLOCATED", "H", "BUSY", "H", "IDLE", "H", "UNKNOWN", "H", "BUSY", "SHARE"]
OWN_ROWS = [
    [*HEADER, "WAITED", "H"],
    [L4, "2.5", "1.5", "0.5", "0.5", "75%", "0.2"],
    [MIG, "1.0", "0.0", "0.0", "1.0", "-", "0.0"],
    ["(total)", "3.5", "1.5", "0.5", "1.5", "75%", "0.2"],
]


def test_my_usage_this_week_and_this_month_per_profile(served: Controller) -> None:
    shown = devbox(env_of(served), "usage")
    assert (shown.returncode, shown.stderr) == (0, "")
    text = shown.stdout
    assert text.splitlines()[0] == "GPU usage of operator, by profile"
    week = f"This week ({WEEK_START} to {TODAY})"
    month = f"This month ({MONTH_START} to {TODAY})"
    assert table_rows(text, week) == OWN_ROWS
    assert table_rows(text, month) == OWN_ROWS
    # Every seeded row's cursor is the last second of its day.
    assert text.splitlines()[-1] == "Reports are whole UTC days; recorded until 23:59 UTC."


def test_everyones_usage_by_person_for_the_operator(served: Controller) -> None:
    shown = devbox(env_of(served), "usage", "--all", "--group-by", "person", "--since", "2d")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.splitlines()[0] == "Everyone's GPU usage, by person"
    assert table_rows(text, f"{TODAY - timedelta(days=1)} to {TODAY}") == [
        ["PERSON", *HEADER[1:], "WAITED", "H"],
        ["operator", "3.5", "1.5", "0.5", "1.5", "75%", "0.2"],
        ["alice", "3.0", "2.0", "1.0", "0.0", "67%", "0.0"],
        ["bob", "1.0", "0.0", "1.0", "0.0", "0%", "0.0"],
        ["(total)", "7.5", "3.5", "2.5", "1.5", "58%", "0.2"],
    ]


def test_the_csv_says_what_the_json_says(served: Controller) -> None:
    args = ("usage", "--all", "--group-by", "group", "--since", "50d")
    as_json = devbox(env_of(served), *args, "--json")
    as_csv = devbox(env_of(served), *args, "--csv")
    assert as_json.returncode == as_csv.returncode == 0, as_json.stderr + as_csv.stderr
    lines = json.loads(as_json.stdout)["lines"]
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [line["key"] for line in lines] == ["(none)", "ml", "vision"]
    assert [row["group"] for row in rows] == [line["key"] for line in lines]
    for line, found in zip(lines, rows, strict=True):
        for name in ("allocated", "busy", "idle", "unknown", "waiting"):
            seconds = line[f"{name}_seconds"]
            assert int(found[f"{name}_seconds"]) == seconds
            assert found[f"{name}_hours"] == f"{seconds / 3600:.2f}"
        assert (int(found["people"]), int(found["boxes"])) == (line["people"], line["boxes"])
    assert lines[0]["allocated_seconds"] == 9000 + 3600 + 7200


def test_someone_who_is_not_an_admin_sees_their_own_and_is_refused_everyones(
    served: Controller, issuer: Issuer
) -> None:
    alice = env_of(served, issuer.token_for("alice"))
    own = json.loads(devbox(alice, "usage", "--json").stdout)
    assert own["scope"] == "alice"
    assert [(line["key"], line["allocated_seconds"]) for line in own["lines"]] == [(L4, 10_800)]
    refused = devbox(alice, "usage", "--all")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        "Devboxes API returned 403: only admins may see everyone's usage; "
        "leave out --all for your own\n"
    )
    olivia = env_of(served, issuer.token_for("olivia"))
    everyone = json.loads(devbox(olivia, "usage", "--all", "--since", "2d", "--json").stdout)
    assert everyone["total"]["allocated_seconds"] == RECENT_SECONDS


def test_the_sdk_answers_the_typed_report(served: Controller, issuer: Issuer) -> None:
    with Client(served.url, served.token) as client:
        found = client.usage(TODAY - timedelta(days=1), TODAY, "box", everyone=True)
    assert [line.key for line in found.lines] == ["alice-l4", "op-l4", "bob-l4", "op-mig"]
    assert found.lines[1].busy_share == 0.75
    assert found.lines[3].busy_share is None
    assert {(day.day, day.profile) for day in found.days} == {
        (str(TODAY), L4),
        (str(TODAY), MIG),
        (str(TODAY - timedelta(days=1)), L4),
    }
    assert found.scope is None
    with Client(served.url, issuer.token_for("bob")) as bob:
        assert [line.key for line in bob.usage(TODAY - timedelta(days=1), TODAY).lines] == [L4]
        with pytest.raises(PermissionDenied, match="only admins may see everyone's usage"):
            bob.usage(everyone=True)


def test_the_cluster_named_is_the_one_asked(served: Controller, tmp_path: Path) -> None:
    # The first cluster, the default, answers nothing: only --cluster reaches the report.
    env = write_config(
        tmp_path, {"lab-x": (UNREACHABLE_URL, "x" * 40), "lab-y": (served.url, served.token)}
    )
    shown = devbox(env, "usage", "--cluster", "lab-y", "--json")
    assert shown.returncode == 0, shown.stdout
    assert json.loads(shown.stdout)["scope"] == "operator"
