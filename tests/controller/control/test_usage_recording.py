"""Usage recorded on the testbed: three people's boxes on a pool of two devices, the
leader's passes at times the test sets, and the seconds each was allocated, busy, idle,
unknown and waiting, exactly; then a real controller killed mid-window and another
taking over, counting every second once.

The scripted scenario runs the controller's own parts in this process (the store, the
lifecycle, the line's gatekeeper, a Lease of its own and the usage recorder) with a
clock the test moves, so that each span is known to the second; the boxes, their pods,
the scheduler and the record are the testbed's.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from devboxes_controller.box import activity, naming
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.control.gates import Gatekeeper
from devboxes_controller.control.lifecycle import Lifecycle
from devboxes_controller.control.usage import Recorder
from devboxes_controller.k8s.lease import LeaderElector
from devboxes_controller.placement import usage_ledger as ledger
from devboxes_controller.placement.limits import Asker
from devboxes_controller.placement.usage_report import report
from devboxes_controller.state.metrics import METRICS
from devboxes_controller.state.store import BoxStore
from devboxes_controller.state.watches import Watches
from kubernetes import client
from support import DevicePool, StartController, wait_for

from devboxes_sdk.models import ActivityReport, DevboxCreate, GpuRequest, UsageGroupBy, UsageLine

POOL_DEVICES = 2
BUSY = 80.0
IDLE = 1.0


class MovingClock:
    """The store's clock: real time when the test starts, then only as the test moves it."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def move(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Controller:
    """One controller's parts in this process."""

    watches: Watches
    store: BoxStore
    lifecycle: Lifecycle
    elector: LeaderElector
    gatekeeper: Gatekeeper
    recorder: Recorder

    def stop(self) -> None:
        self.gatekeeper.stop()
        self.elector.stop()
        self.lifecycle.stop()
        self.store.availability.stop()
        self.watches.stop()


def parts(settings: Settings, kube: Any, clock: MovingClock) -> Controller:
    watches = Watches(settings, kube)
    store = BoxStore(settings, watches, clock=clock)
    lifecycle = Lifecycle(store, kube, activity_key=b"k" * 32)
    elector = LeaderElector(kube, settings.namespace, f"test-{uuid.uuid4().hex[:8]}", 15)
    gatekeeper = Gatekeeper(store, kube, elector, lifecycle.promises)
    recorder = Recorder(store, store.usage, kube, elector)
    watches.start()
    store.availability.start()
    elector.start()
    gatekeeper.start()
    wait_for(lambda: store.synced() and store.usage.synced() and elector.is_leading(), 60)
    return Controller(watches, store, lifecycle, elector, gatekeeper, recorder)


@pytest.fixture
def settings(pool: DevicePool, namespace: str) -> Settings:
    raw = pool.settings(namespace)
    raw["availability"] = {"enabled": True}
    return settings_from_mapping(raw)


@pytest.fixture
def clock() -> MovingClock:
    return MovingClock()


@pytest.fixture
def first(settings: Settings, kube: Any, clock: MovingClock) -> Iterator[Controller]:
    made = parts(settings, kube, clock)
    yield made
    made.stop()


def holds_device(controller: Controller, box: str) -> bool:
    pods = controller.store.pods(naming.object_names(box))
    return any((p.get("spec") or {}).get("nodeName") for p in pods)


def report_gpu(controller: Controller, box: str, utilization: float) -> None:
    report = ActivityReport(ssh_sessions=1, busy_kernels=0, gpu_utilization=utilization)
    controller.lifecycle.record_activity(box, report)

    def written() -> bool:
        deployment = controller.store.deployment(naming.object_names(box)) or {}
        record = activity.recorded(deployment)
        return record is not None and record.reported_at == controller.store.clock()

    wait_for(written, 30)


def lines(controller: Controller, group_by: UsageGroupBy = "person") -> dict[str, UsageLine]:
    today = controller.store.clock().date()
    found = report(
        controller.store.usage.rows(), today - timedelta(days=1), today, group_by, None, 60
    )
    return {line.key: line for line in found.lines}


def seconds(line: UsageLine) -> tuple[int, int, int, int, int]:
    return (
        line.allocated_seconds,
        line.busy_seconds,
        line.idle_seconds,
        line.unknown_seconds,
        line.waiting_seconds,
    )


def test_three_peoples_seconds_are_exact_and_survive_a_new_leader(
    first: Controller, settings: Settings, kube: Any, clock: MovingClock
) -> None:
    lifecycle = first.lifecycle
    for owner in ("ann", "bob", "cy"):
        request = DevboxCreate(name=f"{owner}-box", gpu=GpuRequest(profile=DevicePool.PROFILE))
        lifecycle.create(request, asker=Asker(owner, frozenset()))
        if owner != "cy":
            wait_for(lambda owner=owner: holds_device(first, f"{owner}-box"), 60)
    # The pool's two devices are held: cy's box waits in line.
    wait_for(lambda: first.store.pods(naming.object_names("cy-box")), 30)
    assert not holds_device(first, "cy-box")
    report_gpu(first, "ann-box", BUSY)
    report_gpu(first, "bob-box", IDLE)

    # The first pass only starts each box's row.
    assert first.recorder.record().refused is None
    assert lines(first)["ann"].allocated_seconds == 0
    clock.move(120)
    assert first.recorder.record().refused is None
    clock.move(60)
    report_gpu(first, "bob-box", IDLE)
    lifecycle.stop_box("ann-box")
    wait_for(lambda: holds_device(first, "cy-box"), 90)
    wait_for(lambda: not holds_device(first, "ann-box"), 60)
    assert first.recorder.record().refused is None
    # A pass repeated at the same second counts nothing more.
    assert first.recorder.record().written == []
    first.stop()

    # Another leader, with nothing in memory, goes on from the written cursors.
    second = parts(settings, kube, clock)
    try:
        clock.move(120)
        assert second.recorder.record().refused is None
        people = lines(second)
    finally:
        second.stop()
    assert seconds(people["ann"]) == (180, 180, 0, 0, 0)
    assert seconds(people["bob"]) == (300, 0, 300, 0, 0)
    # cy waited until ann's stop was seen, then held a device nobody has reported on.
    assert seconds(people["cy"]) == (120, 0, 0, 120, 180)
    profiles = lines(second, "profile")
    assert seconds(profiles[DevicePool.PROFILE]) == (600, 180, 300, 120, 180)
    # The counters of what was written, summed over both leaders of this process.
    counted = {
        (owner, held): METRICS.registry.get_sample_value(
            "devboxes_usage_device_seconds_total",
            {"owner": owner, "profile": DevicePool.PROFILE, "held": held},
        )
        for owner, held in (("ann", "busy"), ("bob", "idle"), ("cy", "unknown"))
    }
    assert counted == {("ann", "busy"): 180, ("bob", "idle"): 300, ("cy", "unknown"): 120}
    waited = METRICS.registry.get_sample_value(
        "devboxes_usage_waiting_seconds_total", {"owner": "cy", "profile": DevicePool.PROFILE}
    )
    assert waited == 180


def usage_of(controller: Any, box: str) -> dict[str, Any] | None:
    answer = requests.get(
        f"{controller.url}/api/v1/usage",
        params={"group_by": "box", "all": "true"},
        headers=controller.headers(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    for line in body["lines"]:
        if line["key"] == box:
            return {**line, "recorded_until": body["recorded_until"]}
    return None


def test_a_leader_killed_mid_window_leaves_every_second_counted_once(
    start_controller: StartController, pool: DevicePool, namespace: str, kube: Any
) -> None:
    raw = pool.settings(namespace)
    raw["usage"] = {"recordSeconds": 10}
    leader = start_controller(raw)
    created = requests.post(
        f"{leader.url}/api/v1/devboxes",
        json={"name": "held", "gpu": {"profile": DevicePool.PROFILE}},
        headers=leader.headers(),
        timeout=30,
    )
    assert created.status_code == 201, created.text
    wait_for(lambda: (usage_of(leader, "held") or {}).get("allocated_seconds", 0) >= 20, 120)
    assert leader.process is not None
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(timeout=10)
    killed_at = time.time()
    follower = start_controller(raw)

    def recorded_after_kill() -> dict[str, Any] | None:
        line = usage_of(follower, "held")
        until = datetime.fromisoformat(line["recorded_until"]) if line else None
        return line if until and until.timestamp() > killed_at + 20 else None

    line = wait_for(recorded_after_kill, 120)
    pod = (
        client.CoreV1Api(kube)
        .list_namespaced_pod(namespace, label_selector=f"{naming.LABEL_BOX}=held")
        .items[0]
    )
    scheduled = next(
        c.last_transition_time for c in pod.status.conditions if c.type == "PodScheduled"
    )
    recorded_until = datetime.fromisoformat(line["recorded_until"])
    held_for = (recorded_until - scheduled).total_seconds()
    # Never more than the device was held: nothing counted twice across the two leaders.
    assert line["allocated_seconds"] <= held_for + 1
    # The span without a leader was counted in full: the same pod held the device all along.
    assert line["allocated_seconds"] >= held_for - 2 * 10 - 2
    day = recorded_until.date()
    names = {
        c.metadata.name
        for c in client.CoreV1Api(kube)
        .list_namespaced_config_map(namespace, label_selector=ledger.SELECTOR)
        .items
    }
    assert any(name.startswith(f"{ledger.CONFIGMAP_PREFIX}{day.isoformat()}-") for name in names)
