"""Which enforced stop of a box comes next, when it is warned of and what people read,
from plain Deployments (docs/controller.md, "Warnings before a stop")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from box_specs import atlas_spec
from devboxes_controller.box import activity, naming, render, stop_warning
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.k8s.timestamps import format_timestamp
from gpu_catalog import gpu_profile

Obj = dict[str, Any]
NOW = datetime(2030, 1, 1, 9, tzinfo=UTC)
EXPIRES = datetime(2030, 1, 1, 12, tzinfo=UTC)
L4 = gpu_profile("nvidia-l4", "NVIDIA L4")


def settings(lead: int = 10, idle_minutes: float | None = 60) -> Settings:
    return settings_from_mapping(
        {
            "gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4]},
            "idle": {
                "stopAfterMinutes": idle_minutes,
                "controllerUrl": "http://devboxes.devboxes.svc:8080",
            },
            "stopWarnings": {"leadMinutes": lead},
        }
    )


SETTINGS = settings()


def deployment(
    *, waiting: bool = False, stopped: bool = False, idle_since: datetime | None = None,
    utilization: float | None = None, **extra: str,
) -> Obj:  # fmt: skip
    spec = atlas_spec(EXPIRES, SETTINGS.gpu.profile("nvidia-l4"))
    obj = render.render_deployment(spec, SETTINGS, replicas=0 if stopped else 1)
    annotations = obj["metadata"]["annotations"]
    if not waiting:
        annotations.pop(naming.ANNOTATION_WAITING_SINCE, None)
    if idle_since is not None:
        record = activity.Record(NOW, idle_since, utilization)
        annotations[activity.ANNOTATION_ACTIVITY] = record.to_json()
    annotations.update(extra)
    return obj


def test_the_time_to_live_is_the_next_stop_once_it_runs() -> None:
    stop = stop_warning.next_stop(deployment(), SETTINGS, NOW)
    assert stop == stop_warning.NextStop("ttl", EXPIRES)
    assert stop.key == "ttl 2030-01-01T12:00:00Z"


def test_a_box_waiting_in_line_or_stopped_has_no_stop_to_warn_of() -> None:
    assert stop_warning.next_stop(deployment(waiting=True), SETTINGS, NOW) is None
    assert stop_warning.next_stop(deployment(stopped=True), SETTINGS, NOW) is None


def test_an_idle_stop_before_the_time_to_live_is_the_next_one_with_its_utilization() -> None:
    idle = deployment(idle_since=NOW - timedelta(minutes=55), utilization=2.5)
    stop = stop_warning.next_stop(idle, SETTINGS, NOW)
    assert stop is not None
    assert (stop.reason, stop.at, stop.gpu_utilization) == (
        "idle",
        NOW + timedelta(minutes=5),
        2.5,
    )
    warning = stop_warning.warning(idle, SETTINGS, NOW)
    assert warning is not None
    assert warning.model_dump(exclude={"message"}) == {
        "reason": "idle",
        "stops_at": NOW + timedelta(minutes=5),
        "gpu_utilization": 2.5,
    }
    assert warning.message == (
        "Box atlas stops at 09:05 UTC: idle since 08:05 UTC, GPU 2.5% busy. "
        "Using it, or `devbox extend atlas --hours 1`, keeps it running; its home volume "
        "is kept."
    )


def test_a_tie_is_named_the_time_to_live_which_an_extend_moves() -> None:
    tied = deployment(idle_since=EXPIRES - timedelta(minutes=60))
    stop = stop_warning.next_stop(tied, SETTINGS, EXPIRES - timedelta(minutes=1))
    assert stop is not None
    assert stop.reason == "ttl"


@pytest.mark.parametrize(
    ("now", "due"),
    [
        (EXPIRES - timedelta(minutes=11), False),
        (EXPIRES - timedelta(minutes=10), True),
        (EXPIRES - timedelta(seconds=1), True),
        (EXPIRES, False),
    ],
)
def test_a_stop_is_due_from_the_lead_time_until_it_happens(now: datetime, due: bool) -> None:
    box = deployment()
    stop = stop_warning.next_stop(box, SETTINGS, now)
    assert stop_warning.due(box, stop, SETTINGS, now) is due
    assert (stop_warning.warning(box, SETTINGS, now) is not None) is due


def test_a_stop_warned_of_is_not_due_again_but_a_moved_one_is() -> None:
    now = EXPIRES - timedelta(minutes=5)
    warned = deployment(**{stop_warning.ANNOTATION_STOP_WARNED: "ttl 2030-01-01T12:00:00Z"})
    stop = stop_warning.next_stop(warned, SETTINGS, now)
    assert not stop_warning.due(warned, stop, SETTINGS, now)
    # An extend by an hour moved the stop: out of the lead time, nothing is due ...
    later = EXPIRES + timedelta(hours=1)
    moved = deployment(
        **{
            stop_warning.ANNOTATION_STOP_WARNED: "ttl 2030-01-01T12:00:00Z",
            naming.ANNOTATION_EXPIRES_AT: format_timestamp(later),
        }
    )
    moved_stop = stop_warning.next_stop(moved, SETTINGS, now)
    assert not stop_warning.due(moved, moved_stop, SETTINGS, now)
    assert stop_warning.warning(moved, SETTINGS, now) is None
    # ... until the new stop comes within it.
    assert stop_warning.due(moved, moved_stop, SETTINGS, later - timedelta(minutes=3))


def test_a_lead_time_of_zero_warns_of_nothing() -> None:
    off = settings(lead=0)
    box = deployment()
    now = EXPIRES - timedelta(seconds=30)
    stop = stop_warning.next_stop(box, off, now)
    assert not stop_warning.due(box, stop, off, now)
    assert stop_warning.warning(box, off, now) is None


def test_the_time_to_live_warning_says_when_and_how_to_keep_the_box() -> None:
    stop = stop_warning.NextStop("ttl", EXPIRES)
    assert stop_warning.message("atlas", stop, EXPIRES - timedelta(minutes=9, seconds=30)) == (
        "Box atlas stops in 10 min, at 12:00 UTC: its time to live ends. "
        "`devbox extend atlas --hours 1` keeps it running; its home volume is kept."
    )


def test_the_webhook_body_names_the_warning_the_same_on_every_delivery() -> None:
    stop = stop_warning.NextStop("idle", EXPIRES, gpu_utilization=0.0)
    body = stop_warning.webhook_body("atlas", "ada", stop, "text")
    assert body == {
        "kind": stop_warning.WEBHOOK_KIND,
        "id": "atlas idle 2030-01-01T12:00:00Z",
        "box": "atlas",
        "owner": "ada",
        "reason": "idle",
        "stopsAt": "2030-01-01T12:00:00Z",
        "message": "text",
        "gpuUtilization": 0.0,
    }
