"""How a box's accelerator, status and auto-stop time read in the CLI and the widgets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from devboxes_sdk import labels, models

# The label must use the real multiplication sign, not the letter x.
X = "\N{MULTIPLICATION SIGN}"
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_allocation_label_reads_like_the_profile_label() -> None:
    pinned = models.GpuAllocation(
        profile="nvidia-l4", display_name="NVIDIA L4", resource_name="nvidia.com/gpu", count=1
    )
    profile = models.GpuProfile(
        name="nvidia-l4", display_name="NVIDIA L4", resource_name="nvidia.com/gpu", count=1
    )
    assert labels.accelerator_label(pinned) == f"NVIDIA L4 · 1 {X} nvidia.com/gpu"
    assert labels.accelerator_label(profile) == labels.accelerator_label(pinned)
    assert labels.accelerator_label(None) == "CPU only"


def test_status_line_keeps_the_scheduler_words_verbatim() -> None:
    message = "Scheduling blocked: 0/6 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert labels.status_line(models.DevboxState.STARTING, message) == f"starting — {message}"


@pytest.mark.parametrize("message", [None, "", "   "])
def test_status_line_without_message_is_the_state(message: str | None) -> None:
    assert labels.status_line(models.DevboxState.READY, message) == "ready"


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(days=1, hours=3, minutes=5), "in 1 d 3 h"),
        (timedelta(days=2), "in 2 d"),
        (timedelta(hours=3, minutes=20), "in 3 h 20 min"),
        (timedelta(hours=5), "in 5 h"),
        (timedelta(minutes=45, seconds=30), "in 45 min"),
        (timedelta(seconds=20), "in 1 min"),
        (timedelta(0), "due now"),
        (timedelta(minutes=-3), "due now"),
    ],
)
def test_auto_stop_label_counts_down(delta: timedelta, expected: str) -> None:
    assert labels.auto_stop_label(models.DevboxState.READY, NOW + delta, NOW) == expected


def test_auto_stop_label_for_stopped_and_unlimited_boxes() -> None:
    later = NOW + timedelta(hours=1)
    assert labels.auto_stop_label(models.DevboxState.STOPPED, later, NOW) == "stopped"
    assert labels.auto_stop_label(models.DevboxState.STARTING, None, NOW) == "never"


@pytest.mark.parametrize(
    ("summary", "message", "expected"),
    [
        ("Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line (estimate)", "Scheduling "
         "blocked: ...", "Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line (estimate)"),
        (None, "Scheduling blocked: ...", "Scheduling blocked: ..."),
        ("", "", None),
        (None, None, None),
    ],
)  # fmt: skip
def test_reason_prefers_the_summary(
    summary: str | None, message: str | None, expected: str | None
) -> None:
    assert labels.reason(summary, message) == expected


@pytest.mark.parametrize(
    ("age", "listed"),
    [
        (None, "No list of boxes yet"),
        (timedelta(seconds=20), "The list below is less than a minute old"),
        (timedelta(minutes=11, seconds=5), "The list below is 11 min old"),
        (timedelta(hours=2, minutes=3), "The list below is 2 h 3 min old"),
    ],
)
def test_stale_notice_says_how_old_the_list_is(age: timedelta | None, listed: str) -> None:
    observed = None if age is None else NOW - age
    assert labels.stale_notice(observed, NOW) == (
        f"Controller unreachable. {listed}; actions are off until it answers again."
    )
