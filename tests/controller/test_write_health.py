"""When a replica's writes count as failing: only after a sustained time, only while they
are still tried, and never after one lands."""

from __future__ import annotations

from devboxes_controller.k8s.write_health import FRESH_SECONDS, SUSTAINED_SECONDS, WriteHealth
from support import Clock


def test_writes_fail_only_after_a_sustained_time_and_land_again_at_once() -> None:
    clock = Clock()
    health = WriteHealth(clock)
    assert health.problem() is None
    health.failed("etcdserver: mvcc: database space exceeded")
    clock.now += SUSTAINED_SECONDS - 1
    health.failed("etcdserver: mvcc: database space exceeded")
    assert health.problem() is None
    clock.now += 1
    problem = health.problem()
    assert problem is not None
    assert f"every write to the Kubernetes API has failed for {SUSTAINED_SECONDS:.0f} s" in problem
    # The apiserver's words stay in the log: /ready is answered to anyone.
    assert "etcdserver" not in problem
    health.succeeded()
    assert health.problem() is None


def test_a_replica_that_stopped_writing_is_tried_again() -> None:
    clock = Clock()
    health = WriteHealth(clock)
    health.failed("refused")
    clock.now += SUSTAINED_SECONDS
    health.failed("refused")
    assert health.problem() is not None
    clock.now += FRESH_SECONDS + 1
    assert health.problem() is None
    # The next write that fails says so at once: they have failed all along.
    health.failed("refused")
    assert health.problem() is not None
