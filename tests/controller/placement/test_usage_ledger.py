"""The usage ledger with plain data: what a pass counts from a box's cursor to now, cut at
midnight, across gaps, and never twice; and how a box is seen from its objects."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from devboxes_controller.box import activity, naming, ownership
from devboxes_controller.placement import usage_ledger as ledger
from devboxes_controller.placement.usage_ledger import GAP_SECONDS, Held, Row, Seen

DAY = date(2026, 12, 8)
NOON = ledger.day_start(DAY) + 12 * 3600


def seen(held: Held, pod: str | None = "pod-1", count: int = 1) -> Seen:
    return Seen(
        key="ann-box.0123abcd",
        box="ann-box",
        owner="ann",
        groups=("ml",),
        profile="nvidia-l4",
        count=count,
        held=held,
        pod=None if held is Held.WAITING else pod,
    )


def run(steps: list[tuple[int, Seen | None]]) -> dict[date, Row]:
    """Passes at each second given, each starting from what the one before wrote."""
    rows: dict[date, Row] = {}
    for now, box in steps:
        cursor = max(rows.values(), key=lambda r: r.until) if rows else None
        rows.update(ledger.advance(cursor, rows, box, now))
    return rows


def test_a_box_first_seen_starts_its_row_with_nothing_counted() -> None:
    rows = run([(NOON, seen(Held.WAITING))])
    assert rows[DAY].until == NOON
    assert (rows[DAY].waiting, rows[DAY].allocated) == (0, 0)


def test_each_span_is_counted_as_the_box_was_held_at_its_start() -> None:
    rows = run(
        [
            (NOON, seen(Held.WAITING)),
            (NOON + 30, seen(Held.BUSY)),
            (NOON + 90, seen(Held.IDLE)),
            (NOON + 150, seen(Held.UNKNOWN)),
            (NOON + 210, None),
            (NOON + 400, None),
        ]
    )
    row = rows[DAY]
    assert (row.waiting, row.busy, row.idle, row.unknown) == (30, 60, 60, 60)
    assert row.allocated == 180
    assert row.held is None
    assert row.until == NOON + 210


def test_device_seconds_count_every_device_of_the_box() -> None:
    rows = run([(NOON, seen(Held.BUSY, count=2)), (NOON + 60, seen(Held.BUSY, count=2))])
    assert rows[DAY].busy == rows[DAY].allocated == 120


def test_a_pass_repeated_from_the_same_cursor_counts_nothing_twice() -> None:
    first = run([(NOON, seen(Held.BUSY)), (NOON + 60, seen(Held.BUSY))])
    again = ledger.advance(first[DAY], first, seen(Held.BUSY), NOON + 60)
    assert again == {}
    later = ledger.advance(first[DAY], first, seen(Held.BUSY), NOON + 90)
    assert later[DAY].busy == 90


def test_a_span_over_midnight_is_cut_into_the_days_it_touches() -> None:
    midnight = ledger.day_start(DAY + timedelta(days=1))
    rows = run([(midnight - 100, seen(Held.IDLE)), (midnight + 50, seen(Held.IDLE))])
    assert rows[DAY].idle == 100
    assert rows[DAY].until == midnight
    assert rows[DAY].held is None
    tomorrow = rows[DAY + timedelta(days=1)]
    assert tomorrow.idle == 50
    assert tomorrow.until == midnight + 50
    assert tomorrow.held is Held.IDLE


def test_a_long_gap_is_counted_in_full_while_the_same_pod_holds_the_device() -> None:
    gap = GAP_SECONDS * 3
    rows = run([(NOON, seen(Held.BUSY)), (NOON + gap, seen(Held.IDLE))])
    row = rows[DAY]
    # The device was allocated all along; how busy only within the first GAP_SECONDS.
    assert row.allocated == gap
    assert (row.busy, row.unknown) == (GAP_SECONDS, gap - GAP_SECONDS)


def test_a_long_gap_counts_only_its_first_part_when_the_pod_changed_or_the_box_stopped() -> None:
    gap = GAP_SECONDS * 3
    other_pod = run([(NOON, seen(Held.BUSY)), (NOON + gap, seen(Held.BUSY, pod="pod-2"))])
    assert other_pod[DAY].allocated == GAP_SECONDS
    stopped = run([(NOON, seen(Held.BUSY)), (NOON + gap, None)])
    assert stopped[DAY].allocated == GAP_SECONDS


def test_a_long_wait_is_counted_in_full_while_the_box_still_waits() -> None:
    gap = GAP_SECONDS * 2
    rows = run([(NOON, seen(Held.WAITING)), (NOON + gap, seen(Held.WAITING))])
    assert rows[DAY].waiting == gap


def test_rows_read_back_as_written() -> None:
    row = run([(NOON, seen(Held.BUSY)), (NOON + 60, seen(Held.BUSY))])[DAY]
    assert ledger.row_of(row.to_json()) == row
    assert ledger.row_of("{not json") is None
    assert ledger.row_of('{"box": "b"}') is None


def test_configmap_names_give_their_day_and_shards_stay_in_range() -> None:
    name = ledger.configmap_name(DAY, 3)
    assert name == "devboxes-usage-2026-12-08-3"
    assert ledger.day_of_configmap(name) == DAY
    assert ledger.day_of_configmap("devboxes-bookings") is None
    assert all(0 <= ledger.shard_of(f"box-{i}.abc") < ledger.SHARDS for i in range(100))


def deployment(stopped: bool = False, utilization: float | None = None) -> dict:
    annotations = {
        naming.ANNOTATION_GPU_PROFILE: "nvidia-l4",
        naming.ANNOTATION_GPU_COUNT: "1",
        ownership.ANNOTATION_OWNER: "ann",
        ownership.ANNOTATION_OWNER_GROUPS: '["ml"]',
    }
    now = datetime.fromtimestamp(NOON, UTC)
    if utilization is not None:
        record = activity.Record(reported_at=now, idle_since=None, gpu_utilization=utilization)
        annotations[activity.ANNOTATION_ACTIVITY] = record.to_json()
    return {
        "metadata": {
            "name": "devbox-ann-box",
            "uid": "0123abcd-0000",
            "labels": {naming.LABEL_BOX: "ann-box"},
            "annotations": annotations,
        },
        "spec": {"replicas": 0 if stopped else 1},
    }


def pod(node: str | None, phase: str = "Running") -> dict:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"uid": "pod-1"}, "spec": spec, "status": {"phase": phase}}


def test_a_box_is_seen_waiting_until_its_pod_has_a_node() -> None:
    now = datetime.fromtimestamp(NOON, UTC)
    waiting = ledger.seen(deployment(), [pod(None)], 5, now)
    assert waiting is not None
    assert waiting.held is Held.WAITING
    assert waiting.pod is None
    assert waiting.key == "ann-box.0123abcd"
    assert waiting.groups == ("ml",)
    ended = ledger.seen(deployment(), [pod("node-1", "Failed")], 5, now)
    assert ended is not None
    assert ended.held is Held.WAITING


def test_a_held_device_is_busy_at_or_above_the_threshold_and_unknown_without_a_reading() -> None:
    now = datetime.fromtimestamp(NOON, UTC)
    held = [
        ledger.seen(deployment(utilization=u), [pod("node-1")], 5, now) for u in (5.0, 4.9, None)
    ]
    assert [s.held if s else None for s in held] == [Held.BUSY, Held.IDLE, Held.UNKNOWN]
    stale = ledger.seen(deployment(utilization=90.0), [pod("node-1")], 5, now + timedelta(hours=1))
    assert stale is not None
    assert stale.held is Held.UNKNOWN


def test_stopped_boxes_and_cpu_boxes_are_not_seen() -> None:
    now = datetime.fromtimestamp(NOON, UTC)
    assert ledger.seen(deployment(stopped=True), [], 5, now) is None
    cpu = deployment()
    del cpu["metadata"]["annotations"][naming.ANNOTATION_GPU_PROFILE]
    assert ledger.seen(cpu, [pod("node-1")], 5, now) is None
