"""The store's derived status when watch threads of several kinds announce one box at once.

Each kind has its own watch thread, and a new pod, its ReplicaSet's and Deployment's
status updates and the scheduler's Event all arrive within milliseconds. Whichever thread
stores a box's status last must have read the caches last; otherwise an older view stands
until the next event, which for a pod the scheduler cannot place may never come.

The objects are the testbed's own (tests/data/box_objects.json); the store is never
started, so the caches hold exactly what the test puts in them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from devboxes_controller.box.status import SCHEDULING_BLOCKED, WAITING_FOR_POD, BoxObjects
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.state import slim
from devboxes_controller.state.store import BoxStore
from devboxes_controller.state.watches import DEPLOYMENTS, PODS, REPLICASETS, Watches
from kubernetes import client
from support import recorded

REPO = Path(__file__).resolve().parents[3]
BOX = "unplaceable"


def _of_box(kind: str) -> list[dict[str, Any]]:
    return recorded(kind, BOX)


def test_a_status_read_before_a_new_pod_never_overwrites_one_read_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = settings_from_mapping(
        yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
    )
    watches = Watches(settings, client.ApiClient())
    store = BoxStore(settings, watches)
    (deployment,) = _of_box("deployments")
    (pod,) = _of_box("pods")
    watches[DEPLOYMENTS]._put(slim.deployment(deployment))
    for replicaset in _of_box("replicasets"):
        if slim.failing_replicaset(replicaset):
            watches[REPLICASETS]._put(slim.replicaset(replicaset))

    # The Deployment's thread reads the caches before the pod lands, then is held back.
    read = store.objects
    first_read_done, go_on = threading.Event(), threading.Event()
    reads = 0

    def slow_first_read(name: str) -> BoxObjects | None:
        nonlocal reads
        objects = read(name)
        reads += 1
        if reads == 1:
            first_read_done.set()
            go_on.wait(10)
        return objects

    monkeypatch.setattr(store, "objects", slow_first_read)
    deployment_thread = threading.Thread(target=store._changed_box, args=(BOX,))
    deployment_thread.start()
    assert first_read_done.wait(10)

    # Meanwhile the pod arrives and the pod's thread announces the box.
    watches[PODS]._put(slim.pod(pod))
    pod_thread = threading.Thread(target=store._changed_box, args=(BOX,))
    pod_thread.start()
    pod_thread.join(0.5)
    go_on.set()
    deployment_thread.join(10)
    pod_thread.join(10)

    box = store.get(BOX)
    assert box.message != WAITING_FOR_POD
    assert box.pod_name == pod["metadata"]["name"]
    assert (box.message or "").startswith(SCHEDULING_BLOCKED.split("{", 1)[0])


def _store_with_deployment() -> tuple[BoxStore, Watches, dict[str, Any]]:
    """A store that has seen the box's Deployment, and nothing else of it."""
    settings = settings_from_mapping(
        yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
    )
    watches = Watches(settings, client.ApiClient())
    store = BoxStore(settings, watches)
    (deployment,) = _of_box("deployments")
    watches[DEPLOYMENTS]._put(slim.deployment(deployment))
    store._changed_box(BOX)
    return store, watches, deployment


def test_the_list_indexes_follow_a_box_from_its_first_event_to_its_deletion() -> None:
    store, watches, deployment = _store_with_deployment()
    box = store.get(BOX)
    profile = box.gpu.profile if box.gpu is not None else "cpu"
    owned = (box.owner, box.state.value, profile)
    assert store.page(owned, "", 10) == ([store.get_body(BOX).data], None)
    assert store.page((None, None, None), BOX, 10) == ([], None)
    assert store.page(("someone-else", None, None), "", 10) == ([], None)
    assert store.filtered_body(None, profile, None).data == store.list_body().data
    assert store.list_body(box.owner).data == store.list_body().data
    assert store.list_body("someone-else").data == b'{"items":[]}'
    assert store.profiles() == {profile}

    watches[DEPLOYMENTS]._remove(deployment["metadata"]["name"])
    store._changed_box(BOX)
    assert store.page((None, None, None), "", 10) == ([], None)
    assert store.filtered_body(box.state.value, None, None).data == b'{"items":[]}'
    assert store.profiles() == set()


def test_a_kept_list_body_lasts_while_its_boxes_read_the_same_and_no_longer() -> None:
    store, watches, deployment = _store_with_deployment()
    before = store.get(BOX)
    whole, owned = store.list_body(), store.list_body(before.owner)
    in_state = store.filtered_body(before.state.value, None, None)

    # A watch resending the same objects leaves every kept body as it was.
    store._changed_box(BOX)
    assert store.list_body() is whole
    assert store.list_body(before.owner) is owned
    assert store.filtered_body(before.state.value, None, None) is in_state

    # Its pod arrives: the box reads otherwise, and so does every list it is in.
    (pod,) = _of_box("pods")
    watches[PODS]._put(slim.pod(pod))
    store._changed_box(BOX)
    assert store.get(BOX).message != before.message
    fresh = b'{"items":[' + store.get_body(BOX).data + b"]}"
    assert store.list_body().data == fresh
    assert store.list_body(before.owner).data == fresh
    assert store.filtered_body(before.state.value, None, None).data == fresh

    watches[DEPLOYMENTS]._remove(deployment["metadata"]["name"])
    store._changed_box(BOX)
    assert store.list_body(before.owner).data == b'{"items":[]}'
    assert store.filtered_body(before.state.value, None, None).data == b'{"items":[]}'
