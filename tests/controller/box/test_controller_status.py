"""Status derivation (docs/controller.md, "States") from plain objects, first match wins."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from box_specs import atlas_spec
from devboxes_controller.box import naming, render
from devboxes_controller.box.activity import ANNOTATION_ACTIVITY, ANNOTATION_IDLE_STOPPED
from devboxes_controller.box.status import BoxObjects, derive, waits_for_node
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.k8s.timestamps import format_timestamp
from gpu_catalog import gpu_profile

from devboxes_sdk.models import Devbox, DevboxState

Obj = dict[str, Any]

SCHEDULER_WORDS = (
    "0/7 nodes are available: 2 Insufficient nvidia.com/gpu, 5 node(s) didn't match "
    "Pod's node affinity/selector. preemption: 0/7 nodes are available: 2 No preemption "
    "victims found for incoming pod, 5 Preemption is not helpful for scheduling."
)
RUNTIME_CLASS_REFUSAL = (
    'pods "devbox-atlas-6d8f9c7b5-" is forbidden: pod rejected: RuntimeClass "amd" not found'
)
L4 = gpu_profile("nvidia-l4", "NVIDIA L4", runtimeClassName="nvidia")


def make_settings(**overrides: Any) -> Settings:
    data: Obj = {
        "ssh": {"serviceType": "NodePort", "host": "box.example.org"},
        "gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4]},
    }
    data.update(overrides)
    return settings_from_mapping(data)


SETTINGS = make_settings()
# The time each derivation is judged at: an hour after the boxes below were created.
NOW = datetime(2030, 1, 1, 9, tzinfo=UTC)


def deployment(
    replicas: int = 1, gpu: bool = False, annotations: dict[str, str] | None = None
) -> Obj:
    spec = atlas_spec(
        datetime(2030, 1, 1, 12, tzinfo=UTC),
        SETTINGS.gpu.profile("nvidia-l4") if gpu else None,
        preset="medium",
    )
    obj = render.render_deployment(spec, SETTINGS, replicas=replicas)
    obj["metadata"].update(
        creationTimestamp="2030-01-01T08:00:00Z", uid="d-1", resourceVersion="10"
    )
    obj["metadata"]["annotations"].update(annotations or {})
    obj["status"] = {}
    return obj


def with_conditions(obj: Obj, *conditions: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    obj.setdefault("status", {})["conditions"] = list(conditions)
    return obj


# What the kubelet reports before and after the pod's volumes and sandbox are ready.
SANDBOX_NOT_READY = {"type": "PodReadyToStartContainers", "status": "False"}
SANDBOX_READY = {"type": "PodReadyToStartContainers", "status": "True"}


def pod(
    name: str = "devbox-atlas-6d8f9c7b5-x1",
    *,
    node: str | None = "l4-0",
    phase: str = "Running",
    ready: bool = False,
    created: str = "2030-01-01T08:00:01Z",
    conditions: tuple[Obj, ...] = (),
    containers: tuple[Obj, ...] = (),
    **status: Any,
) -> Obj:
    spec: Obj = {"containers": [{"name": "devbox", "image": "w"}]}
    if node:
        spec["nodeName"] = node
    base = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": naming.labels("atlas", naming.COMPONENT_WORKSPACE),
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": base + list(conditions),
            "containerStatuses": list(containers),
            **status,
        },
    }


def node_port_service(node_port: int | None = 30122) -> Obj:
    port: Obj = {"name": "ssh", "port": 22, "targetPort": 2222}
    if node_port:
        port["nodePort"] = node_port
    return {
        "metadata": {"name": "devbox-atlas-ssh"},
        "spec": {"type": "NodePort", "ports": [port]},
        "status": {},
    }


def load_balancer(*ingress: Obj) -> Obj:
    return {
        "metadata": {"name": "devbox-atlas-ssh"},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "ssh", "port": 22}]},
        "status": {"loadBalancer": {"ingress": list(ingress)}},
    }


def replicaset(name: str = "devbox-atlas-6d8f9c7b5", *conditions: Obj) -> Obj:
    return {
        "metadata": {"name": name, "labels": naming.labels("atlas", "workspace")},
        "status": {"conditions": list(conditions)},
    }


def failed_create(
    message: str, involved: str = "devbox-atlas-6d8f9c7b5", at: str = "2030-01-01T08:00:05Z"
) -> Obj:
    return {
        "metadata": {"name": f"{involved}.{at}"},
        "reason": "FailedCreate",
        "type": "Warning",
        "message": message,
        "lastTimestamp": at,
        "involvedObject": {"kind": "ReplicaSet", "name": involved},
    }


def waiting(reason: str, message: str | None = None, name: str = "devbox") -> Obj:
    state: Obj = {"reason": reason}
    if message is not None:
        state["message"] = message
    return {"name": name, "restartCount": 0, "state": {"waiting": state}}


UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": SCHEDULER_WORDS,
}
DEADLINE = {
    "type": "Progressing",
    "status": "False",
    "reason": "ProgressDeadlineExceeded",
    "message": 'ReplicaSet "devbox-atlas-6d8f9c7b5" has timed out progressing.',
}
CONTAINERS_READY = {"type": "ContainersReady", "status": "True"}
CONTAINERS_NOT_READY = {"type": "ContainersReady", "status": "False"}
REPLICA_FAILURE = {
    "type": "ReplicaFailure",
    "status": "True",
    "reason": "FailedCreate",
    "message": RUNTIME_CLASS_REFUSAL,
}


# -- stopped ---------------------------------------------------------------------------------
def test_zero_replicas_is_stopped_whatever_the_pods_say() -> None:
    objects = BoxObjects(
        deployment=with_conditions(deployment(replicas=0), DEADLINE),
        pods=[pod(ready=True), pod("devbox-atlas-6d8f9c7b5-x2", phase="Failed")],
        service=node_port_service(),
    )
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.STOPPED
    assert box.message == "Stopped; storage is kept. Start it to continue."
    assert (box.pod_name, box.pod_ready, box.ssh_user, box.ssh_command, box.restarts) == (
        None,
        False,
        None,
        None,
        0,
    )


def test_a_box_stopped_by_its_ttl_says_when() -> None:
    objects = BoxObjects(
        deployment=deployment(
            replicas=0, annotations={naming.ANNOTATION_EXPIRED_AT: "2030-01-01T12:00:00Z"}
        )
    )
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.STOPPED
    assert box.message == (
        "Stopped when its time to live ran out at 2030-01-01T12:00:00Z; storage is kept."
    )


def test_a_stopped_box_whose_pod_is_shutting_down_says_so() -> None:
    leaving = pod("devbox-atlas-old-a", ready=True, node="gpu-2")
    leaving["metadata"]["deletionTimestamp"] = format_timestamp(NOW + timedelta(seconds=30))
    objects = BoxObjects(
        deployment=deployment(replicas=0, annotations={ANNOTATION_IDLE_STOPPED: "60"}),
        pods=[leaving],
    )
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.STOPPED
    assert box.message == (
        "Stopped after 60 min idle; start to continue. "
        "Its pod devbox-atlas-old-a is still shutting down on gpu-2."
    )
    assert box.ssh_command is None


def ready_box(service: Obj | None, settings: Settings = SETTINGS) -> Devbox:
    """The box of a Deployment whose one pod is ready, with ``service`` as its SSH Service."""
    return derive(
        BoxObjects(deployment=deployment(), pods=[pod(ready=True)], service=service), settings, NOW
    )


# -- ready -----------------------------------------------------------------------------------
def test_ready_pod_with_a_node_port_is_ready_with_an_ssh_command() -> None:
    box = ready_box(node_port_service(30122))
    assert box.state is DevboxState.READY
    assert (box.ssh_host, box.ssh_port, box.ssh_user) == ("box.example.org", 30122, "dev")
    assert box.ssh_command == "ssh -p 30122 dev@box.example.org"
    assert box.pod_name == "devbox-atlas-6d8f9c7b5-x1"
    assert box.pod_ready is True


def test_ready_wins_over_a_stale_failure_condition() -> None:
    objects = BoxObjects(
        deployment=with_conditions(deployment(), DEADLINE, REPLICA_FAILURE),
        pods=[pod(ready=True)],
        service=node_port_service(),
    )
    assert derive(objects, SETTINGS, NOW).state is DevboxState.READY


@pytest.mark.parametrize("service", [None, node_port_service(None)], ids=["none", "no-port"])
def test_ready_pod_without_an_address_is_still_starting(service: Obj | None) -> None:
    box = ready_box(service)
    assert box.state is DevboxState.STARTING
    assert box.message == "Waiting for the SSH service to get an address."
    assert box.ssh_command is None
    assert box.ssh_host is None


def test_node_port_without_a_configured_host_has_no_address() -> None:
    box = ready_box(
        node_port_service(), make_settings(ssh={"serviceType": "NodePort", "host": None})
    )
    assert box.state is DevboxState.STARTING
    assert box.message == "Waiting for the SSH service to get an address."


@pytest.mark.parametrize(
    ("ingress", "host"),
    [({"ip": "203.0.113.7"}, "203.0.113.7"), ({"hostname": "lb.example.org"}, "lb.example.org")],
)
def test_load_balancer_ingress_is_the_ssh_address(ingress: Obj, host: str) -> None:
    box = ready_box(load_balancer(ingress), make_settings(ssh={"serviceType": "LoadBalancer"}))
    assert box.state is DevboxState.READY
    assert box.ssh_command == f"ssh -p 22 dev@{host}"


def test_load_balancer_without_ingress_waits_for_an_address() -> None:
    box = ready_box(load_balancer(), make_settings(ssh={"serviceType": "LoadBalancer"}))
    assert box.state is DevboxState.STARTING
    assert box.message == "Waiting for the SSH service to get an address."


def test_without_services_a_ready_pod_is_ready_and_reached_through_the_controller() -> None:
    settings = make_settings(ssh={"serviceType": "None"})
    box = ready_box(None, settings)
    assert box.state is DevboxState.READY
    assert (box.ssh_host, box.ssh_port, box.ssh_user) == (None, 22, "dev")
    assert box.ssh_command == "devbox ssh atlas"
    assert settings.capabilities().ssh_access == ["tunnel"]


# -- degraded --------------------------------------------------------------------------------
def test_failed_pod_is_degraded_with_its_message() -> None:
    failed = pod(phase="Failed", message="The node was low on resource: memory.", reason="Evicted")
    box = derive(BoxObjects(deployment=deployment(), pods=[failed]), SETTINGS, NOW)
    assert box.state is DevboxState.DEGRADED
    assert box.message == "The pod failed: The node was low on resource: memory."


@pytest.mark.parametrize(
    "reason", ["CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError"]
)
def test_container_failures_are_degraded_with_reason_and_message(reason: str) -> None:
    message = f"back-off pulling or running: {reason.lower()} detail"
    box = derive(
        BoxObjects(deployment=deployment(), pods=[pod(containers=(waiting(reason, message),))]),
        SETTINGS,
        NOW,
    )
    assert box.state is DevboxState.DEGRADED
    assert box.message == f"{reason}: {message}"


def test_init_container_failure_counts_and_the_container_name_stands_in_for_a_message() -> None:
    failing = pod(initContainerStatuses=[waiting("ErrImagePull", None, name="fetch-repo")])
    box = derive(BoxObjects(deployment=deployment(), pods=[failing]), SETTINGS, NOW)
    assert box.state is DevboxState.DEGRADED
    assert box.message == "ErrImagePull: fetch-repo"


def test_ordinary_waiting_reasons_are_not_failures() -> None:
    creating = pod(phase="Pending", containers=(waiting("ContainerCreating"),))
    box = derive(BoxObjects(deployment=deployment(), pods=[creating]), SETTINGS, NOW)
    assert box.state is DevboxState.STARTING
    assert box.message == "Waiting for the container to start on l4-0."


def assert_degraded_by_the_runtime_class_refusal(objects: BoxObjects) -> None:
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.DEGRADED
    assert box.message == f"Kubernetes cannot create the pod: {RUNTIME_CLASS_REFUSAL}"


def test_deployment_replica_failure_is_degraded_with_the_admission_message() -> None:
    objects = BoxObjects(deployment=with_conditions(deployment(gpu=True), REPLICA_FAILURE))
    assert_degraded_by_the_runtime_class_refusal(objects)


def test_replicaset_failure_condition_is_degraded() -> None:
    objects = BoxObjects(
        deployment=deployment(gpu=True),
        replicasets=[replicaset("devbox-atlas-6d8f9c7b5", REPLICA_FAILURE)],
    )
    assert_degraded_by_the_runtime_class_refusal(objects)


def test_failed_create_events_of_the_box_replicaset_are_read_latest_first() -> None:
    # The cache keeps only ReplicaSets that report a failure: the Events alone suffice.
    objects = BoxObjects(
        deployment=deployment(gpu=True),
        events=[
            failed_create("an older refusal", at="2030-01-01T08:00:01Z"),
            failed_create(RUNTIME_CLASS_REFUSAL, at="2030-01-01T08:00:09Z"),
            failed_create(
                "quota exceeded elsewhere", involved="devbox-other-1234", at="2030-01-01T09:00:00Z"
            ),
        ],
    )
    assert_degraded_by_the_runtime_class_refusal(objects)


def test_failed_create_events_of_other_boxes_replicasets_are_ignored() -> None:
    objects = BoxObjects(
        deployment=deployment(),
        replicasets=[replicaset()],
        events=[
            failed_create("not ours", involved="devbox-other-1234"),
            failed_create("of box atlas-2", involved="devbox-atlas-2-6d8f9c7b5"),
        ],
    )
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.STARTING
    assert box.message == "Waiting for the pod to be created."


def test_progress_deadline_exceeded_is_degraded_before_scheduling_blocked() -> None:
    objects = BoxObjects(
        deployment=with_conditions(deployment(gpu=True), DEADLINE),
        pods=[pod(node=None, phase="Pending", conditions=(UNSCHEDULABLE,))],
    )
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.DEGRADED
    assert box.message == f"The box did not become ready in time: {DEADLINE['message']}"


def test_pod_failure_wins_over_a_progress_deadline() -> None:
    objects = BoxObjects(
        deployment=with_conditions(deployment(), DEADLINE),
        pods=[pod(containers=(waiting("CrashLoopBackOff", "back-off 5m"),))],
    )
    assert derive(objects, SETTINGS, NOW).message == "CrashLoopBackOff: back-off 5m"


# -- starting --------------------------------------------------------------------------------
def test_unschedulable_pod_is_starting_with_the_scheduler_words_verbatim() -> None:
    objects = BoxObjects(
        deployment=deployment(gpu=True),
        pods=[pod(node=None, phase="Pending", conditions=(UNSCHEDULABLE,))],
    )
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.STARTING
    assert box.message == f"Scheduling blocked: {SCHEDULER_WORDS}"


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        ([], "Waiting for the pod to be created."),
        ([pod(node=None, phase="Pending")], "Waiting for the scheduler."),
        ([pod(node="cpu-1", phase="Pending")], "Waiting for the container to start on cpu-1."),
        (
            [pod(node="cpu-1", phase="Pending", conditions=(SANDBOX_NOT_READY,))],
            "Mounting the home volume and preparing the pod on cpu-1.",
        ),
        (
            [pod(node="cpu-1", phase="Pending", conditions=(SANDBOX_READY,))],
            "Starting the containers on cpu-1, pulling their images if the node lacks them.",
        ),
        ([pod(node="cpu-1", phase="Running")], "Waiting for the SSH server to become ready."),
        (
            [pod(node="cpu-1", phase="Running", conditions=(CONTAINERS_NOT_READY,))],
            "Waiting for the SSH server to become ready.",
        ),
    ],
    ids=[
        "no-pod",
        "unscheduled",
        "pending",
        "preparing",
        "starting-containers",
        "running",
        "containers-not-ready",
    ],
)
def test_starting_says_what_it_waits_for(pods: list[Obj], message: str) -> None:
    box = derive(
        BoxObjects(deployment=deployment(), pods=pods, service=node_port_service()), SETTINGS, NOW
    )
    assert box.state is DevboxState.STARTING
    assert box.message == message


def test_a_pod_whose_node_stopped_reporting_names_the_node() -> None:
    # What the node lifecycle controller leaves on the pods of a node that stopped
    # reporting: Ready withdrawn, the kubelet's last word on the containers kept.
    withdrawn = pod(node="devbox-node-0", conditions=(CONTAINERS_READY,))
    withdrawn["status"]["conditions"][0]["lastTransitionTime"] = "2030-01-01T08:41:07Z"
    objects = BoxObjects(deployment=deployment(), pods=[withdrawn], service=node_port_service())
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.STARTING
    assert box.message == (
        "Its node devbox-node-0 is not ready since 2030-01-01T08:41:07Z, so Kubernetes no "
        "longer counts the pod as ready. The box comes back when the node does; if the node "
        "is gone for good, an operator deletes it (kubectl delete node devbox-node-0) so that "
        "the box can start on another node."
    )
    assert (box.pod_ready, box.ssh_command) == (False, None)
    del withdrawn["status"]["conditions"][0]["lastTransitionTime"]
    undated = derive(objects, SETTINGS, NOW)
    assert undated.message.startswith("Its node devbox-node-0 is not ready, so Kubernetes")


def test_a_start_waits_for_the_previous_pod_to_shut_down_and_says_so() -> None:
    leaving = pod("devbox-atlas-old-a", ready=True, node="cpu-1")
    leaving["metadata"]["deletionTimestamp"] = format_timestamp(NOW + timedelta(seconds=20))
    box = derive(
        BoxObjects(deployment=deployment(), pods=[leaving], service=node_port_service()),
        SETTINGS,
        NOW,
    )
    assert box.state is DevboxState.STARTING
    assert box.message == "Waiting for the previous pod devbox-atlas-old-a to shut down on cpu-1."
    assert box.ssh_command is None


def test_a_previous_pod_long_past_its_deadline_is_blamed_on_its_node() -> None:
    leaving = pod("devbox-atlas-old-a", ready=True, node="cpu-1")
    deadline = NOW - timedelta(seconds=61)
    leaving["metadata"]["deletionTimestamp"] = format_timestamp(deadline)
    box = derive(BoxObjects(deployment=deployment(), pods=[leaving]), SETTINGS, NOW)
    assert box.state is DevboxState.STARTING
    assert box.message == (
        "Waiting for the previous pod devbox-atlas-old-a to shut down on cpu-1, which it "
        f"should have done by {format_timestamp(deadline)}: the node may be unreachable. "
        "The pod goes when the node reports back; if the node is gone for good, an operator "
        "removes it with kubectl delete pod devbox-atlas-old-a --force."
    )
    leaving["metadata"]["deletionTimestamp"] = format_timestamp(NOW - timedelta(seconds=59))
    again = derive(BoxObjects(deployment=deployment(), pods=[leaving]), SETTINGS, NOW)
    assert again.message.startswith("Waiting for the previous pod devbox-atlas-old-a to shut")
    assert again.message.endswith("on cpu-1.")


def test_the_newest_live_pod_speaks_for_the_box() -> None:
    old_ready = pod("devbox-atlas-old-a", ready=True, created="2030-01-01T08:00:01Z")
    old_ready["metadata"]["deletionTimestamp"] = "2030-01-01T08:05:00Z"
    older = pod(
        "devbox-atlas-old-b", phase="Failed", created="2030-01-01T07:00:00Z", message="evicted"
    )
    newest = pod(
        "devbox-atlas-new-c",
        node=None,
        phase="Pending",
        created="2030-01-01T08:06:00Z",
        conditions=(UNSCHEDULABLE,),
    )
    box = derive(
        BoxObjects(
            deployment=deployment(), pods=[old_ready, older, newest], service=node_port_service()
        ),
        SETTINGS,
        NOW,
    )
    assert box.state is DevboxState.STARTING
    assert box.pod_name == "devbox-atlas-new-c"
    assert box.message == f"Scheduling blocked: {SCHEDULER_WORDS}"


# -- the rest of the wire object ---------------------------------------------------------------
def test_gpu_comes_from_the_pinned_snapshot_not_the_live_catalog() -> None:
    pinned = deployment(gpu=True, replicas=0)
    disabled = make_settings(
        gpu={
            "enabled": False,
            "defaultProfile": "nvidia-l4",
            "profiles": [{**L4, "displayName": "Renamed", "count": 2}],
        }
    )
    box = derive(BoxObjects(deployment=pinned), disabled, NOW)
    assert box.gpu is not None
    assert (box.gpu.profile, box.gpu.display_name, box.gpu.count) == ("nvidia-l4", "NVIDIA L4", 1)
    assert derive(BoxObjects(deployment=deployment()), SETTINGS, NOW).gpu is None


def test_metadata_fields_come_from_the_annotations_and_objects() -> None:
    restarted = pod(
        ready=True,
        containers=(
            {"name": "devbox", "restartCount": 2, "state": {"running": {}}},
            {"name": "sidecar", "restartCount": 1, "state": {"running": {}}},
        ),
    )
    claim = {
        "metadata": {"name": "devbox-atlas-home"},
        "spec": {"resources": {"requests": {"storage": "30Gi"}}},
        "status": {"capacity": {"storage": "20Gi"}},
    }
    box = derive(
        BoxObjects(
            deployment=deployment(), pods=[restarted], service=node_port_service(), pvc=claim
        ),
        SETTINGS,
        NOW,
    )
    assert box.name == "atlas"
    assert box.preset == "medium"
    assert box.created_at == datetime(2030, 1, 1, 8, tzinfo=UTC)
    assert box.expires_at == datetime(2030, 1, 1, 12, tzinfo=UTC)
    assert box.expires_at - box.created_at == timedelta(hours=4)
    assert box.restarts == 3
    assert box.storage_size == "30Gi"
    assert derive(BoxObjects(deployment=deployment()), SETTINGS, NOW).storage_size is None


def test_activity_is_judged_at_the_time_it_is_derived_for() -> None:
    settings = make_settings(idle={"cpuStopAfterMinutes": 60, "controllerUrl": "http://c"})
    record = json.dumps({"reportedAt": "2030-01-01T08:58:00Z", "idleSince": "2030-01-01T08:30:00Z"})
    objects = BoxObjects(deployment=deployment(annotations={ANNOTATION_ACTIVITY: record}))
    idle = derive(objects, settings, NOW).activity
    assert idle is not None
    assert (idle.state, idle.stops_at) == ("idle", datetime(2030, 1, 1, 9, 30, tzinfo=UTC))
    # Six minutes later without a report nobody knows what the box does.
    later = derive(objects, settings, NOW + timedelta(minutes=4))
    assert later.activity is not None
    assert later.activity.state == "unknown"


def test_a_box_kubernetes_has_not_dated_yet_is_created_now() -> None:
    undated = deployment()
    del undated["metadata"]["creationTimestamp"]
    assert derive(BoxObjects(deployment=undated), SETTINGS, NOW).created_at == NOW


def test_failed_create_events_from_before_the_latest_start_are_stale() -> None:
    objects = BoxObjects(
        deployment=deployment(gpu=True),  # started 08:00: deadline 12:00 minus 4 h
        replicasets=[replicaset()],
        events=[failed_create(RUNTIME_CLASS_REFUSAL, at="2030-01-01T07:59:00Z")],
    )
    box = derive(objects, SETTINGS, NOW)
    assert box.state is DevboxState.STARTING
    assert box.message == "Waiting for the pod to be created."


def test_an_unreadable_snapshot_degrades_the_box_instead_of_hiding_it() -> None:
    broken = deployment(gpu=True, annotations={naming.ANNOTATION_GPU_SNAPSHOT: "{not json"})
    box = derive(BoxObjects(deployment=broken), SETTINGS, NOW)
    assert box.state is DevboxState.DEGRADED
    assert box.message is not None
    assert box.message.startswith("The pinned GPU profile cannot be read")
    assert box.gpu is None


@pytest.mark.parametrize(
    ("pods", "waits"),
    [
        ((), True),
        ((pod(node=None, phase="Pending"),), True),
        ((pod(),), False),
        ((pod(ready=True),), False),
    ],
    ids=["no pod yet", "pod without a node", "pod on a node, not ready", "ready pod"],
)
def test_a_box_waits_for_a_node_until_its_pod_has_one(pods: tuple[Obj, ...], waits: bool) -> None:
    assert waits_for_node(BoxObjects(deployment=deployment(gpu=True), pods=pods)) is waits


def test_a_running_box_records_when_it_began_to_wait_and_a_stopped_one_does_not() -> None:
    annotations = deployment()["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_WAITING_SINCE] == "2030-01-01T08:00:00Z"
    assert naming.ANNOTATION_WAITING_SINCE not in deployment(replicas=0)["metadata"]["annotations"]
