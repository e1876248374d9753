"""The caches keep slim objects: status derivation, the pinned spec and the cache's own
bookkeeping must not be able to tell a slim object from the one the apiserver sent.

The objects are real: tests/data/box_objects.json holds what the testbed's apiserver sent
for boxes that are ready (CPU and GPU), stopped, unplaceable and refused by admission
(re-record with tests/data/record_box_objects.py). Each case derives the status of every
box from the full objects and from the slim ones, also after edits that drive the other
branches of status derivation.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from devboxes_controller import render, slim
from devboxes_controller.boxes import _box_from_event
from devboxes_controller.kube import resource_version
from devboxes_controller.settings import Settings, settings_from_mapping
from devboxes_controller.status import BoxObjects, derive

from devboxes_sdk.models import DevboxState

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
RECORDED: dict[str, list[Obj]] = json.loads(
    (REPO / "tests" / "data" / "box_objects.json").read_text()
)
STRIP: dict[str, Callable[[Obj], Obj]] = {
    "deployments": slim.deployment,
    "replicasets": slim.replicaset,
    "pods": slim.pod,
    "services": slim.service,
    "persistentvolumeclaims": slim.persistent_volume_claim,
    "events": slim.event,
}
BOX_OF: dict[str, Callable[[Obj], str | None]] = {
    **dict.fromkeys(STRIP, render.box_name_of),
    "events": _box_from_event,
}


def settings(**ssh: Any) -> Settings:
    data = yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
    data["ssh"].update(ssh)
    return settings_from_mapping(data)


NODE_PORT = settings()
LOAD_BALANCER = settings(serviceType="LoadBalancer")


def box_objects(objects: dict[str, list[Obj]], box: str) -> BoxObjects:
    """A box's objects as :meth:`Boxes.objects` gathers them from the caches."""

    def of(kind: str) -> list[Obj]:
        return [o for o in objects[kind] if BOX_OF[kind](o) == box]

    names = render.object_names(box)
    by_name = {kind: {o["metadata"]["name"]: o for o in objects[kind]} for kind in objects}
    return BoxObjects(
        deployment=by_name["deployments"][names.deployment],
        pods=of("pods"),
        replicasets=of("replicasets"),
        events=of("events"),
        service=by_name["services"].get(names.service),
        pvc=by_name["persistentvolumeclaims"].get(names.pvc),
    )


def slimmed(objects: dict[str, list[Obj]]) -> dict[str, list[Obj]]:
    return {kind: [STRIP[kind](o) for o in items] for kind, items in objects.items()}


def boxes() -> list[str]:
    return sorted(str(render.box_name_of(d)) for d in RECORDED["deployments"])


def _pods_of(objects: dict[str, list[Obj]], box: str) -> list[Obj]:
    return [p for p in objects["pods"] if render.box_name_of(p) == box]


def not_ready_yet(objects: dict[str, list[Obj]]) -> None:
    for pod in objects["pods"]:
        for condition in pod["status"].get("conditions") or []:
            if condition["type"] == "Ready":
                condition["status"] = "False"


def pod_failed(objects: dict[str, list[Obj]]) -> None:
    not_ready_yet(objects)
    for pod in _pods_of(objects, "l4"):
        pod["status"].update(phase="Failed", reason="Evicted", message="The node was low on disk")


def crash_looping(objects: dict[str, list[Obj]]) -> None:
    not_ready_yet(objects)
    for pod in _pods_of(objects, "cpu"):
        status = pod["status"]["containerStatuses"][0]
        status["restartCount"] = 4
        status["state"] = {
            "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}
        }


def _drop_replica_failure(obj: Obj) -> None:
    conditions = obj["status"].get("conditions") or []
    obj["status"]["conditions"] = [c for c in conditions if c["type"] != "ReplicaFailure"]


def only_events_explain(objects: dict[str, list[Obj]]) -> None:
    """The conditions are cleared on a retry; the Events about the failure remain."""
    for obj in objects["deployments"] + objects["replicasets"]:
        _drop_replica_failure(obj)


def failure_before_the_last_start(objects: dict[str, list[Obj]]) -> None:
    only_events_explain(objects)
    for event in objects["events"]:
        event["lastTimestamp"] = "2026-01-01T00:00:00Z"


def only_the_replicaset_explains(objects: dict[str, list[Obj]]) -> None:
    for deployment in objects["deployments"]:
        _drop_replica_failure(deployment)
    objects["events"] = []


def deadline_exceeded(objects: dict[str, list[Obj]]) -> None:
    for deployment in objects["deployments"]:
        conditions = deployment["status"].get("conditions") or []
        deployment["status"]["conditions"] = [c for c in conditions if c["type"] != "Progressing"]
        deployment["status"]["conditions"].append(
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "ReplicaSet has timed out progressing.",
                "lastUpdateTime": "2026-12-03T10:14:32Z",
                "lastTransitionTime": "2026-12-03T10:14:32Z",
            }
        )


def expired(objects: dict[str, list[Obj]]) -> None:
    for deployment in objects["deployments"]:
        deployment["spec"]["replicas"] = 0
        deployment["metadata"]["annotations"][render.ANNOTATION_EXPIRED_AT] = "2026-12-03T12:00:00Z"


def load_balanced(objects: dict[str, list[Obj]]) -> None:
    for service in objects["services"]:
        service["spec"]["type"] = "LoadBalancer"
        ingress = (
            {"ip": "203.0.113.7", "ipMode": "VIP"}
            if render.box_name_of(service) == "cpu"
            else {"hostname": "lb.example.org"}
        )
        service["status"] = {"loadBalancer": {"ingress": [ingress]}}


def unrelated_annotations(objects: dict[str, list[Obj]]) -> None:
    for deployment in objects["deployments"]:
        deployment["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied"] = "{}" * 500


CASES: dict[str, tuple[Callable[[dict[str, list[Obj]]], None] | None, Settings]] = {
    "as recorded": (None, NODE_PORT),
    "crash loop": (crash_looping, NODE_PORT),
    "pod failed": (pod_failed, NODE_PORT),
    "failed create told by events": (only_events_explain, NODE_PORT),
    "failed create before the last start": (failure_before_the_last_start, NODE_PORT),
    "failed create told by the replica set": (only_the_replicaset_explains, NODE_PORT),
    "not ready yet": (not_ready_yet, NODE_PORT),
    "progress deadline": (deadline_exceeded, NODE_PORT),
    "stopped by its ttl": (expired, NODE_PORT),
    "load balancer without address": (None, LOAD_BALANCER),
    "load balancer with address": (load_balanced, LOAD_BALANCER),
    "unrelated annotations": (unrelated_annotations, NODE_PORT),
}


def test_the_recording_covers_every_state() -> None:
    states = {derive(box_objects(RECORDED, box), NODE_PORT).state for box in boxes()}
    assert states == set(DevboxState)


@pytest.mark.parametrize("case", CASES)
def test_status_is_the_same_from_slim_objects(case: str) -> None:
    edit, config = CASES[case]
    full = copy.deepcopy(RECORDED)
    if edit is not None:
        edit(full)
    small = slimmed(full)
    for box in boxes():
        assert derive(box_objects(small, box), config) == derive(box_objects(full, box), config)


def test_the_pinned_spec_is_the_same_from_a_slim_deployment() -> None:
    for deployment in RECORDED["deployments"]:
        assert render.spec_from_deployment(slim.deployment(deployment)) == (
            render.spec_from_deployment(deployment)
        )


@pytest.mark.parametrize("kind", STRIP)
def test_the_cache_indexes_slim_objects_as_it_did_full_ones(kind: str) -> None:
    for full in RECORDED[kind]:
        small = STRIP[kind](full)
        assert small["metadata"]["name"] == full["metadata"]["name"]
        assert resource_version(small) == resource_version(full) > 0
        assert BOX_OF[kind](small) == BOX_OF[kind](full)
        for key in ("deletionTimestamp", "ownerReferences"):
            assert small["metadata"].get(key) == full["metadata"].get(key)


def test_the_deployment_keeps_the_uid_its_service_and_events_name() -> None:
    for full in RECORDED["deployments"]:
        assert slim.deployment(full)["metadata"]["uid"] == full["metadata"]["uid"]


def test_a_terminating_pod_keeps_its_deletion_mark() -> None:
    terminating = [p for p in RECORDED["pods"] if p["metadata"].get("deletionTimestamp")]
    assert terminating, "the recording has the stopped box's pod on its way out"
    assert all(slim.pod(p)["metadata"]["deletionTimestamp"] for p in terminating)


def test_a_retained_claim_keeps_the_size_a_restart_compares_against() -> None:
    for claim in RECORDED["persistentvolumeclaims"]:
        small = slim.persistent_volume_claim(claim)
        assert (
            small["spec"]["resources"]["requests"]["storage"]
            == (claim["spec"]["resources"]["requests"]["storage"])
        )


@pytest.mark.parametrize("kind", STRIP)
def test_slim_objects_are_a_fraction_of_the_full_ones(kind: str) -> None:
    full = sum(len(json.dumps(o)) for o in RECORDED[kind])
    small = [STRIP[kind](o) for o in RECORDED[kind]]
    assert all("managedFields" not in o["metadata"] for o in small)
    assert sum(len(json.dumps(o)) for o in small) < full / 2
