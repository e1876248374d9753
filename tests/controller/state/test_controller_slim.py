"""The caches keep slim objects: status derivation, the waiting line, the pinned spec,
release drift, activity, retained volumes and the cache's own bookkeeping must not be
able to tell a slim object from the one the apiserver sent.

The objects are real: tests/data/box_objects.json holds what the testbed's apiserver sent
for boxes that are ready (CPU and GPU), stopped, unplaceable, refused by admission and
deleted with their home volume kept (re-record with tests/data/record_box_objects.py).
Each case derives the status of every box from the full objects and from the slim ones,
also after edits that drive the other branches of status derivation.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from devboxes_controller.box import activity, naming, template
from devboxes_controller.box.spec import spec_from_deployment
from devboxes_controller.box.status import BoxObjects, derive, waiting_since
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.control import volumes
from devboxes_controller.k8s.kube import resource_version
from devboxes_controller.state import slim
from devboxes_controller.state.store import BoxStore
from support import RECORDED_BOXES

from devboxes_sdk.models import DevboxState

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[3]
RECORDED: dict[str, list[Obj]] = json.loads(RECORDED_BOXES.read_text())
STRIP: dict[str, Callable[[Obj], Obj]] = {
    "deployments": slim.deployment,
    "replicasets": slim.replicaset,
    "pods": slim.pod,
    "services": slim.service,
    "persistentvolumeclaims": slim.persistent_volume_claim,
    "events": slim.event,
}
BOX_OF: dict[str, Callable[[Obj], str | None]] = {
    **dict.fromkeys(STRIP, naming.box_name_of),
    "events": naming.box_of_event,
}


def settings(ssh: dict[str, Any] | None = None, **changes: Any) -> Settings:
    data = yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
    data["ssh"].update(ssh or {})
    data.update(changes)
    return settings_from_mapping(data)


NODE_PORT = settings()
LOAD_BALANCER = settings(ssh={"serviceType": "LoadBalancer"})
# A later release: an extra sidecar and idle boxes stopped (which adds the activity agent),
# so every recorded box's pod template differs from the release's.
NEXT_RELEASE = settings(
    sidecars=[{"name": "logs", "image": "registry.example.com/logs:1"}],
    idle={
        "stopAfterMinutes": 30,
        "cpuStopAfterMinutes": 60,
        "controllerUrl": "http://devboxes-controller.devboxes:8000",
    },
)


def box_objects(objects: dict[str, list[Obj]], box: str) -> BoxObjects:
    """A box's objects as :meth:`BoxStore.objects` gathers them from the caches."""

    def of(kind: str) -> list[Obj]:
        return [o for o in objects[kind] if BOX_OF[kind](o) == box]

    names = naming.object_names(box)
    by_name = {kind: {o["metadata"]["name"]: o for o in objects[kind]} for kind in objects}
    return BoxObjects(
        deployment=by_name["deployments"][names.deployment],
        pods=of("pods"),
        replicasets=of("replicasets"),
        events=of("events"),
        service=by_name["services"].get(names.service),
        pvc=by_name["persistentvolumeclaims"].get(names.pvc),
    )


# The objects of a kind the cache keeps at all.
KEEP: dict[str, Callable[[Obj], bool]] = {"replicasets": slim.failing_replicaset}


def slimmed(objects: dict[str, list[Obj]]) -> dict[str, list[Obj]]:
    """The objects as the caches hold them."""
    return {
        kind: [STRIP[kind](o) for o in items if KEEP.get(kind, bool)(o)]
        for kind, items in objects.items()
    }


def boxes() -> list[str]:
    return sorted(str(naming.box_name_of(d)) for d in RECORDED["deployments"])


def _pods_of(objects: dict[str, list[Obj]], box: str) -> list[Obj]:
    return [p for p in objects["pods"] if naming.box_name_of(p) == box]


def _not_ready(objects: dict[str, list[Obj]], *kinds: str) -> None:
    for pod in objects["pods"]:
        for condition in pod["status"].get("conditions") or []:
            if condition["type"] in kinds:
                condition["status"] = "False"


def not_ready_yet(objects: dict[str, list[Obj]]) -> None:
    _not_ready(objects, "Ready", "ContainersReady")


def node_not_ready(objects: dict[str, list[Obj]]) -> None:
    """Readiness withdrawn by the node lifecycle controller: the containers stay ready."""
    _not_ready(objects, "Ready")


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
        deployment["metadata"]["annotations"][naming.ANNOTATION_EXPIRED_AT] = "2026-12-03T12:00:00Z"


def load_balanced(objects: dict[str, list[Obj]]) -> None:
    for service in objects["services"]:
        service["spec"]["type"] = "LoadBalancer"
        ingress = (
            {"ip": "203.0.113.7", "ipMode": "VIP"}
            if naming.box_name_of(service) == "cpu"
            else {"hostname": "lb.example.org"}
        )
        service["status"] = {"loadBalancer": {"ingress": [ingress]}}


def unrelated_annotations(objects: dict[str, list[Obj]]) -> None:
    for deployment in objects["deployments"]:
        deployment["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied"] = "{}" * 500


def before_the_template_record(objects: dict[str, list[Obj]]) -> None:
    """Boxes written by a release that recorded neither the template nor the main container:
    drift is found by comparing the pod template as deployed."""
    for deployment in objects["deployments"]:
        annotations = deployment["metadata"]["annotations"]
        del annotations[naming.ANNOTATION_TEMPLATE], annotations[naming.ANNOTATION_PINNED_MAIN]


def unreadable_template_record(objects: dict[str, list[Obj]]) -> None:
    for deployment in objects["deployments"]:
        deployment["metadata"]["annotations"][naming.ANNOTATION_TEMPLATE] = "not json"


def activity_reported(objects: dict[str, list[Obj]]) -> None:
    """The running boxes' agents reported: one idle for ten minutes, the others active."""
    now = datetime.now(UTC)
    for deployment in objects["deployments"]:
        idle = naming.box_name_of(deployment) == "l4"
        record = activity.Record(
            reported_at=now - timedelta(seconds=30),
            idle_since=now - timedelta(minutes=10) if idle else None,
        )
        deployment["metadata"]["annotations"][activity.ANNOTATION_ACTIVITY] = record.to_json()


def stopped_for_idleness(objects: dict[str, list[Obj]]) -> None:
    for deployment in objects["deployments"]:
        deployment["spec"]["replicas"] = 0
        deployment["metadata"]["annotations"][activity.ANNOTATION_IDLE_STOPPED] = "30"


# A change to the recording, in place.
Edit = Callable[[dict[str, list[Obj]]], None]


def recorded_with(edit: Edit | None) -> dict[str, list[Obj]]:
    """A copy of the recording, changed by ``edit`` when there is one."""
    full = copy.deepcopy(RECORDED)
    if edit is not None:
        edit(full)
    return full


CASES: dict[str, tuple[Edit | None, Settings]] = {
    "as recorded": (None, NODE_PORT),
    "crash loop": (crash_looping, NODE_PORT),
    "pod failed": (pod_failed, NODE_PORT),
    "failed create told by events": (only_events_explain, NODE_PORT),
    "failed create before the last start": (failure_before_the_last_start, NODE_PORT),
    "failed create told by the replica set": (only_the_replicaset_explains, NODE_PORT),
    "not ready yet": (not_ready_yet, NODE_PORT),
    "node not ready": (node_not_ready, NODE_PORT),
    "progress deadline": (deadline_exceeded, NODE_PORT),
    "stopped by its ttl": (expired, NODE_PORT),
    "load balancer without address": (None, LOAD_BALANCER),
    "load balancer with address": (load_balanced, LOAD_BALANCER),
    "unrelated annotations": (unrelated_annotations, NODE_PORT),
    "the release changed the pod template": (None, NEXT_RELEASE),
    "boxes from before the template record": (before_the_template_record, NODE_PORT),
    "boxes from before the template record, release changed": (
        before_the_template_record,
        NEXT_RELEASE,
    ),
    "unreadable template record": (unreadable_template_record, NEXT_RELEASE),
    "activity reported": (activity_reported, NEXT_RELEASE),
    "stopped for idleness": (stopped_for_idleness, NEXT_RELEASE),
}


def test_the_recording_covers_every_state() -> None:
    now = datetime.now(UTC)
    states = {derive(box_objects(RECORDED, box), NODE_PORT, now).state for box in boxes()}
    assert states == set(DevboxState)


@pytest.mark.parametrize("case", CASES)
def test_status_is_the_same_from_slim_objects(case: str) -> None:
    edit, config = CASES[case]
    full = recorded_with(edit)
    small = slimmed(full)
    now = datetime.now(UTC)
    for box in boxes():
        assert derive(box_objects(small, box), config, now) == (
            derive(box_objects(full, box), config, now)
        )


def test_the_pinned_spec_is_the_same_from_a_slim_deployment() -> None:
    for deployment in RECORDED["deployments"]:
        assert spec_from_deployment(slim.deployment(deployment)) == (
            spec_from_deployment(deployment)
        )


@pytest.mark.parametrize("kind", STRIP)
def test_the_cache_indexes_slim_objects_as_it_did_full_ones(kind: str) -> None:
    for full in RECORDED[kind]:
        small = STRIP[kind](full)
        assert small["metadata"]["name"] == full["metadata"]["name"]
        assert resource_version(small) == resource_version(full) > 0
        assert BOX_OF[kind](small) == BOX_OF[kind](full)
        assert small["metadata"].get("deletionTimestamp") == (
            full["metadata"].get("deletionTimestamp")
        )


def test_the_deployment_keeps_the_uid_its_service_and_events_name() -> None:
    for full in RECORDED["deployments"]:
        assert slim.deployment(full)["metadata"]["uid"] == full["metadata"]["uid"]


def test_the_release_changes_every_recorded_box() -> None:
    """The drift cases below compare something: each box differs from the next release."""
    for deployment in RECORDED["deployments"]:
        assert template.changes(deployment, NODE_PORT) == []
        assert template.changes(deployment, NEXT_RELEASE)


DRIFT_CASES = {
    "recorded": None,
    "before the template record": before_the_template_record,
    "unreadable template record": unreadable_template_record,
}


@pytest.mark.parametrize("case", DRIFT_CASES)
@pytest.mark.parametrize("config", [NODE_PORT, NEXT_RELEASE], ids=["current", "next release"])
def test_template_drift_and_rebuild_are_the_same_from_a_slim_deployment(
    case: str, config: Settings
) -> None:
    full = recorded_with(DRIFT_CASES[case])
    for deployment in full["deployments"]:
        small = slim.deployment(deployment)
        assert template.changes(small, config) == template.changes(deployment, config)
        assert template.restart_reason(small, config) == (
            template.restart_reason(deployment, config)
        )
        assert template.rebuild_patch(small, config) == template.rebuild_patch(deployment, config)


def test_only_a_box_from_before_the_template_record_keeps_its_pod_template() -> None:
    old = copy.deepcopy(RECORDED)
    before_the_template_record(old)
    for current, legacy in zip(RECORDED["deployments"], old["deployments"], strict=True):
        assert "template" not in slim.deployment(current)["spec"]
        assert slim.deployment(legacy)["spec"]["template"] == legacy["spec"]["template"]


@pytest.mark.parametrize("case", ["as recorded", "not ready yet", "stopped by its ttl"])
def test_the_waiting_line_is_the_same_from_slim_objects(case: str) -> None:
    edit, _ = CASES[case]
    full = recorded_with(edit)
    small = slimmed(full)
    since = {box: waiting_since(box_objects(full, box)) for box in boxes()}
    assert {box: waiting_since(box_objects(small, box)) for box in boxes()} == since
    if case == "as recorded":
        assert since["unplaceable"], "the box no node can take waits for a device"


@pytest.mark.parametrize("case", ["as recorded", "activity reported"])
def test_activity_and_idle_stops_are_the_same_from_a_slim_deployment(case: str) -> None:
    edit, config = CASES[case]
    full = recorded_with(edit)
    now = datetime.now(UTC)
    for deployment in full["deployments"]:
        small = slim.deployment(deployment)
        assert activity.recorded(small) == activity.recorded(deployment)
        assert activity.of(small, config, now) == activity.of(deployment, config, now)
        assert activity.idle_stop_at(small, config, now) == (
            activity.idle_stop_at(deployment, config, now)
        )
        assert activity.credential(b"k", "box", small["metadata"]["uid"]) == (
            activity.credential(b"k", "box", deployment["metadata"]["uid"])
        )


@dataclass
class Store:
    """What :mod:`volumes` reads of the store: a box's Deployment, and every claim."""

    by_name: dict[str, Obj]
    every_claim: list[Obj]

    def deployment(self, names: naming.ObjectNames) -> Obj | None:
        return self.by_name.get(names.deployment)

    def claims(self) -> list[Obj]:
        return self.every_claim


def store(objects: dict[str, list[Obj]]) -> BoxStore:
    deployments = {o["metadata"]["name"]: o for o in objects["deployments"]}
    return cast(BoxStore, Store(deployments, objects["persistentvolumeclaims"]))


def test_retained_volumes_are_listed_the_same_from_slim_claims() -> None:
    listed = volumes.retained(store(RECORDED))
    assert [(v.name, v.last_profile) for v in listed.items] == [("retained", "nvidia-l4")]
    assert volumes.retained(store(slimmed(RECORDED))) == listed


def test_a_claim_keeps_the_profile_label_a_restart_compares_against() -> None:
    for claim in RECORDED["persistentvolumeclaims"]:
        labels = slim.persistent_volume_claim(claim)["metadata"]["labels"]
        assert labels.get(naming.LABEL_GPU_PROFILE) == (
            claim["metadata"]["labels"].get(naming.LABEL_GPU_PROFILE)
        )


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
