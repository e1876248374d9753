"""Per-person and per-group limits: the settings' rules and what a create or start may do."""

from __future__ import annotations

import json
from typing import Any

import pytest
from devboxes_controller.box import naming, ownership
from devboxes_controller.config.limits import LimitSettings
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.config.violations import ConfigError
from devboxes_controller.k8s.kube import Conflict, Invalid
from devboxes_controller.placement import limits
from devboxes_controller.placement.limits import Ask, Asker, Holding
from gpu_catalog import gpu_profile

L4 = gpu_profile("nvidia-l4", "NVIDIA L4")
DRA: dict[str, Any] = {
    "name": "gpu-40g",
    "displayName": "Any NVIDIA GPU",
    "deviceClassName": "gpu.nvidia.com",
    "count": 1,
}


def settings(raw_limits: dict[str, Any], ttl: dict[str, Any] | None = None) -> LimitSettings:
    raw: dict[str, Any] = {
        "gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4, DRA]},
        "limits": raw_limits,
    }
    if ttl is not None:
        raw["ttl"] = ttl
    return settings_from_mapping(raw).limits


def refused(raw_limits: dict[str, Any], ttl: dict[str, Any] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        settings(raw_limits, ttl)
    return caught.value.violations


ALICE = Asker("alice", frozenset({"ml"}))
BOB = Asker("bob", frozenset({"ml", "interns"}))


def held(owner: str, running: bool = True, count: int = 1, groups: tuple[str, ...] = ()) -> Holding:
    return Holding(owner, frozenset(groups), running, "nvidia.com/gpu", count)


def create(asker: Asker, count: int = 1) -> Ask:
    return Ask(asker, new_box=True, device="nvidia.com/gpu", count=count)


# --- settings -----------------------------------------------------------------------------


def test_no_limits_by_default() -> None:
    assert not settings({}).enabled


def test_limits_read_per_person_and_per_group_quotas() -> None:
    found = settings(
        {
            "perPerson": {"boxes": 3, "devices": {"nvidia.com/gpu": 2}},
            "groups": {"interns": {"devices": {"gpu.nvidia.com": 1}, "presets": ["small"]}},
        }
    )
    assert found.enabled
    assert found.per_person.boxes == 3
    assert found.per_person.devices == {"nvidia.com/gpu": 2}
    assert found.groups["interns"].presets == ["small"]


def test_a_device_limit_must_name_what_a_profile_requests() -> None:
    found = refused({"perPerson": {"devices": {"amd.com/gpu": 1}}})
    assert any(
        'limits.perPerson.devices["amd.com/gpu"]' in line
        and "no GPU profile requests 'amd.com/gpu'" in line
        and "gpu.nvidia.com, nvidia.com/gpu" in line
        for line in found
    ), found


def test_a_group_may_not_outlast_the_longest_ttl() -> None:
    found = refused({"groups": {"ml": {"maxTtlHours": 200}}}, ttl={"maxHours": 100})
    assert any(
        "limits.groups.ml.maxTtlHours" in line and "ttl.maxHours (100)" in line for line in found
    )


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"perPerson": {"boxes": -1}}, "limits.perPerson.boxes"),
        ({"perPerson": {"boxes": "three"}}, "limits.perPerson.boxes"),
        ({"perPerson": {"gpus": 1}}, "limits.perPerson.gpus"),
        ({"groups": {"ml": {"presets": []}}}, "limits.groups.ml.presets"),
        ({"groups": {"ml": {"presets": ["huge"]}}}, "limits.groups.ml.presets"),
        ({"groups": {"ml": {"maxTtlHours": 0}}}, "limits.groups.ml.maxTtlHours"),
    ],
)
def test_bad_limits_are_refused_with_their_place(raw: dict[str, Any], where: str) -> None:
    assert any(where in line for line in refused(raw)), refused(raw)


# --- quotas -------------------------------------------------------------------------------


def test_a_person_may_hold_up_to_their_box_limit_counting_stopped_boxes() -> None:
    quota = settings({"perPerson": {"boxes": 2}})
    limits.check_quota(quota, create(ALICE), [held("alice", running=False), held("bob")])
    with pytest.raises(Conflict) as caught:
        limits.check_quota(
            quota, create(ALICE), [held("alice", running=False), held("alice"), held("bob")]
        )
    assert "you have 2 boxes, and the limit is 2" in caught.value.detail


def test_devices_count_only_running_boxes_of_that_resource() -> None:
    quota = settings({"perPerson": {"devices": {"nvidia.com/gpu": 2}}})
    other_kind = Holding("alice", frozenset(), True, "gpu.nvidia.com", 4)
    limits.check_quota(
        quota, create(ALICE), [held("alice"), held("alice", running=False), other_kind]
    )
    with pytest.raises(Conflict) as caught:
        limits.check_quota(quota, create(ALICE, count=2), [held("alice")])
    assert "hold 1 nvidia.com/gpu, this box needs 2, and the limit is 2" in caught.value.detail


def test_a_start_adds_devices_but_no_box() -> None:
    quota = settings({"perPerson": {"boxes": 1, "devices": {"nvidia.com/gpu": 1}}})
    start = Ask(ALICE, new_box=False, device="nvidia.com/gpu", count=1)
    limits.check_quota(quota, start, [held("alice", running=False)])
    with pytest.raises(Conflict, match="stop a box first"):
        limits.check_quota(quota, start, [held("alice")])


def test_a_group_quota_counts_every_member_recorded_on_the_boxes() -> None:
    quota = settings({"groups": {"ml": {"devices": {"nvidia.com/gpu": 2}}}})
    members = [held("carol", groups=("ml",)), held("dave", groups=("ml",))]
    limits.check_quota(quota, create(ALICE), [held("carol", groups=("ml",))])
    with pytest.raises(Conflict) as caught:
        limits.check_quota(quota, create(ALICE), members)
    assert "group ml's members have" in caught.value.detail
    # Someone outside the group is not held by its quota.
    limits.check_quota(quota, create(Asker("erin", frozenset())), members)


def test_a_box_with_no_device_passes_device_limits() -> None:
    quota = settings({"perPerson": {"devices": {"nvidia.com/gpu": 0}}})
    limits.check_quota(quota, Ask(ALICE, new_box=True, device=None, count=0), [held("alice")])


# --- presets and time to live -------------------------------------------------------------


def test_a_preset_outside_every_group_bound_is_refused() -> None:
    quota = settings({"groups": {"interns": {"presets": ["small"]}}})
    limits.check_request(quota, BOB, "small", 8)
    limits.check_request(quota, ALICE, "large", 8)
    with pytest.raises(Invalid) as caught:
        limits.check_request(quota, BOB, "large", 8)
    assert "preset large is not allowed for your groups (interns); allowed: small" in (
        caught.value.detail
    )


def test_the_longest_ttl_of_the_askers_groups_bounds_the_request() -> None:
    quota = settings({"groups": {"ml": {"maxTtlHours": 24}, "interns": {"maxTtlHours": 8}}})
    limits.check_request(quota, BOB, "small", 24)
    with pytest.raises(Invalid) as caught:
        limits.check_request(quota, BOB, "small", 25)
    assert "must be at most 24" in caught.value.detail


# --- what a box holds ---------------------------------------------------------------------


def test_a_holding_is_read_from_the_deployment() -> None:
    deployment = {
        "metadata": {
            "labels": {ownership.LABEL_OWNER: ownership.owner_label("alice")},
            "annotations": {
                ownership.ANNOTATION_OWNER: "alice",
                ownership.ANNOTATION_OWNER_GROUPS: json.dumps(["ml"]),
                naming.ANNOTATION_GPU_RESOURCE: "nvidia.com/gpu",
                naming.ANNOTATION_GPU_COUNT: "2",
            },
        },
        "spec": {"replicas": 0},
    }
    assert limits.holding(deployment) == Holding(
        "alice", frozenset({"ml"}), False, "nvidia.com/gpu", 2
    )


def test_a_damaged_groups_record_counts_towards_no_group() -> None:
    deployment = {
        "metadata": {"annotations": {ownership.ANNOTATION_OWNER_GROUPS: "{not json"}},
        "spec": {"replicas": 1},
    }
    found = limits.holding(deployment)
    assert (found.owner, found.groups, found.running, found.count) == (
        ownership.OPERATOR,
        frozenset(),
        True,
        0,
    )


def _recorded(name: str, version: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": version,
            "annotations": {
                naming.ANNOTATION_GPU_RESOURCE: "nvidia.com/gpu",
                naming.ANNOTATION_GPU_COUNT: str(count),
            },
        },
        "spec": {"replicas": 1},
    }


def test_holdings_read_each_record_once_per_resource_version() -> None:
    holdings = limits.Holdings()
    assert [h.count for h in holdings.of([_recorded("a", "1", 1), _recorded("b", "1", 2)])] == [
        1,
        2,
    ]
    # The same version is not read again: what it held stands.
    assert [h.count for h in holdings.of([_recorded("a", "1", 9), _recorded("b", "2", 3)])] == [
        1,
        3,
    ]
    assert [h.count for h in holdings.of([_recorded("a", "1", 9)], leaving_out="a")] == []


def test_holdings_forget_boxes_that_are_gone() -> None:
    holdings = limits.Holdings()
    holdings.of([_recorded("a", "1", 1)])
    holdings.of([])
    # Deleted and created again with a version that happens to repeat: read afresh.
    assert [h.count for h in holdings.of([_recorded("a", "1", 4)])] == [4]
