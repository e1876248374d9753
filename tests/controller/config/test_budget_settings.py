"""GPU-hour budgets in the ``limits`` block: their shape and defaults, the switch that
stops running boxes over budget, and every mistake named by its path."""

from __future__ import annotations

from typing import Any

import pytest
from config_errors import violations
from devboxes_controller.config.limits import Budget
from devboxes_controller.config.settings import settings_from_mapping
from gpu_catalog import gpu_profile

L4 = gpu_profile("nvidia-l4", "NVIDIA L4")
MIG = gpu_profile("mig", "MIG 1g.10gb", resourceName="nvidia.com/mig-1g.10gb")


def raw(limits: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4, MIG]},
        "limits": limits,
    }
    if usage is not None:
        found["usage"] = usage
    return found


def test_no_budgets_and_no_stops_unless_given() -> None:
    limits = settings_from_mapping({}).limits
    assert limits.per_person.budgets == []
    assert limits.stop_over_budget is False
    assert not limits.has_budgets
    assert not limits.enabled


def test_budgets_per_person_and_per_group_of_a_profile_or_of_every_gpu_profile() -> None:
    limits = settings_from_mapping(
        raw(
            {
                "stopOverBudget": True,
                "perPerson": {"budgets": [{"profile": "nvidia-l4", "hours": 40, "days": 7}]},
                "groups": {
                    "ml": {
                        "budgets": [
                            {"profile": "nvidia-l4", "hours": 400, "days": 7},
                            {"profile": None, "hours": 1000.0, "days": 30.0},
                            {"hours": 5, "days": 1},
                        ]
                    }
                },
            }
        )
    ).limits
    assert limits.per_person.budgets == [Budget(profile="nvidia-l4", hours=40, days=7)]
    assert limits.groups["ml"].budgets == [
        Budget(profile="nvidia-l4", hours=400, days=7),
        Budget(profile=None, hours=1000, days=30),
        Budget(profile=None, hours=5, days=1),
    ]
    assert limits.stop_over_budget is True
    assert limits.has_budgets
    assert limits.enabled


def test_a_person_budget_alone_turns_the_limits_on() -> None:
    limits = settings_from_mapping(raw({"perPerson": {"budgets": [{"hours": 1, "days": 1}]}}))
    assert limits.limits.enabled
    assert limits.limits.has_budgets


def test_every_mistake_of_a_budget_is_named_by_its_path() -> None:
    found = violations(
        lambda: settings_from_mapping(
            raw(
                {
                    "stopOverBudget": "yes",
                    "perPerson": {
                        "budgets": [
                            {"profile": "a100", "hours": 10, "days": 7},
                            {"profile": "nvidia-l4", "hours": 0, "days": 0},
                            {"hours": 1.5, "days": 7, "window": "week"},
                            {"days": 7},
                        ]
                    },
                    "groups": {"ml": {"budgets": [{"profile": "mig", "hours": 4, "days": 41}]}},
                },
                usage={"retentionDays": 40},
            )
        )
    )
    assert sorted(found) == sorted(
        [
            'limits.stopOverBudget: must be true or false, got "yes"',
            "limits.perPerson.budgets[0].profile: 'a100' is not a configured GPU profile "
            "(configured: mig, nvidia-l4)",
            "limits.perPerson.budgets[1].hours: must be between 1 and 10000000, got 0",
            "limits.perPerson.budgets[1].days: must be between 1 and 3660, got 0",
            "limits.perPerson.budgets[2].hours: must be an integer, got 1.5",
            "limits.perPerson.budgets[2].window: unknown key 'window' (allowed: profile, "
            "hours, days)",
            "limits.perPerson.budgets[3].hours: is required",
            "limits.groups.ml.budgets[0].days: 41 must not exceed usage.retentionDays (40): "
            "the record of older days is deleted",
        ]
    )


def test_a_window_as_long_as_the_record_is_kept_is_allowed() -> None:
    settings = settings_from_mapping(
        raw({"perPerson": {"budgets": [{"hours": 1, "days": 400}]}}, usage={})
    )
    assert settings.limits.per_person.budgets[0].days == settings.usage.retention_days
    assert violations(
        lambda: settings_from_mapping(raw({"perPerson": {"budgets": [{"hours": 1, "days": 401}]}}))
    ) == [
        "limits.perPerson.budgets[0].days: 401 must not exceed usage.retentionDays (400): "
        "the record of older days is deleted"
    ]


@pytest.mark.parametrize("budgets", [None, {"hours": 1, "days": 1}, [None]])
def test_budgets_are_a_list_of_mappings(budgets: Any) -> None:
    found = violations(lambda: settings_from_mapping(raw({"perPerson": {"budgets": budgets}})))
    assert len(found) == 1, found
    assert found[0].startswith("limits.perPerson.budgets"), found
