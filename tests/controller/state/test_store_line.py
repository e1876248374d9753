"""What the line's walk makes of a waiting box's summary in the box store, from plain objects.

The objects are the testbed's own (tests/data/box_objects.json): ``unplaceable`` is a GPU
box; its pod is put back behind the line's gate, as the controller creates it (the
recording may have caught it after the gate was lifted for a profile no node offers).
The store is never started, so its caches hold exactly what the test puts in them, and its
walk is the one the test hands it.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from devboxes_controller.box import naming
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.placement import order
from devboxes_controller.state import slim
from devboxes_controller.state.store import BoxStore
from devboxes_controller.state.watches import DEPLOYMENTS, PODS, Watches
from kubernetes import client
from support import recorded

REPO = Path(__file__).resolve().parents[3]
BOX = "unplaceable"
CPU = order.Lack("cpu", Decimal(2), Decimal("0.5"))


def _of_box(kind: str) -> dict[str, Any]:
    (found,) = recorded(kind, BOX)
    return found


def _waiting_store() -> tuple[BoxStore, Watches, dict[str, Any]]:
    settings = settings_from_mapping(
        yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
    )
    watches = Watches(settings, client.ApiClient())
    store = BoxStore(settings, watches)
    pod = _of_box("pods")
    pod["spec"]["schedulingGates"] = [{"name": naming.QUEUE_GATE}]
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
    }
    watches[DEPLOYMENTS]._put(slim.deployment(_of_box("deployments")))
    watches[PODS]._put(slim.pod(pod))
    store._changed_box(BOX)
    return store, watches, pod


def _display(store: BoxStore) -> str:
    gpu = store.get(BOX).gpu
    assert gpu is not None
    return gpu.display_name


def test_a_box_short_of_cpu_beside_a_free_device_says_so_and_keeps_its_place() -> None:
    store, _watches, _pod = _waiting_store()
    waiting = store.get(BOX).summary
    assert waiting is not None
    assert waiting.endswith("1st in line")
    announced: list[str] = []
    store.add_listener(announced.append)

    store.walked(order.Walk((), frozenset(), {BOX: (CPU,)}))
    display = _display(store)
    assert store.get(BOX).summary == (
        f"Waiting for CPU on a node with a free {display}: needs 2 CPU, at most 0.5 free on "
        "any such node; 1st in line"
    )
    assert announced == [BOX]
    # The same walk again tells nobody anything new.
    store.walked(order.Walk((), frozenset(), {BOX: (CPU,)}))
    assert announced == [BOX]
    store.walked(order.NO_WALK)
    assert store.get(BOX).summary == waiting


def test_a_box_let_through_with_room_is_no_longer_in_line() -> None:
    store, watches, pod = _waiting_store()
    # A walk that found room for the box once it is let through does not speak for its
    # gated pod.
    store.walked(order.Walk((), frozenset({BOX}), {}))
    assert (store.get(BOX).summary or "").endswith("1st in line")

    # The gate lifted, the scheduler has not placed it yet.
    pod["spec"]["schedulingGates"] = []
    pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
    watches[PODS]._put(slim.pod(pod))
    store._changed_box(BOX)
    display = _display(store)
    assert store.get(BOX).summary == (
        f"Let through for a free {display}; waiting for the scheduler to place it"
    )
    waiters, _holders = store.line()
    assert [(w.box, w.gated) for w in waiters] == [(BOX, False)]
