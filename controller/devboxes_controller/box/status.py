"""Derive a box's wire status from its Kubernetes objects. Pure: plain dicts and the time
in, a model out.

The rules, first match wins: replicas 0 is stopped; a Ready pod with an SSH address is
ready; a failure that will not fix itself is degraded with its reason; a pod the
scheduler cannot place is starting with the scheduler's own words; anything else is
starting with what the box is waiting for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from devboxes_sdk.models import (
    AllocatedDevice,
    Devbox,
    DevboxState,
    GpuAllocation,
    ImageAllocation,
)

from ..config.catalog import SnapshotError
from ..config.gpu import GpuProfileConfig
from ..config.images import ImageProfileConfig
from ..config.settings import Settings
from ..k8s.kube import Obj
from ..k8s.timestamps import format_timestamp, parse_timestamp
from . import activity, budget_stop, host_key, naming, ownership, stop_warning, template

STOPPED = "Stopped; storage is kept. Start it to continue."
EXPIRED = "Stopped when its time to live ran out at {at}; storage is kept."
# A stopped box's pod keeps its devices and home until it has shut down.
STOPPED_POD_LEAVING = "{stopped} Its pod {pod} is still shutting down on {node}."
READY = "Ready for SSH."
SCHEDULING_BLOCKED = "Scheduling blocked: {reason}"
# Why a box pod behind the line's scheduling gate is not placed: the scheduler's own words
# ("Scheduling is blocked due to non-empty scheduling gates") say nothing of when.
IN_LINE = "in line for a device; let through when one it fits is free and its turn comes"
WAITING_FOR_POD = "Waiting for the pod to be created."
WAITING_FOR_PREVIOUS_POD = "Waiting for the previous pod {pod} to shut down on {node}."
PREVIOUS_POD_OVERDUE = (
    "Waiting for the previous pod {pod} to shut down on {node}, which it should have done by "
    "{deadline}: the node may be unreachable. The pod goes when the node reports back; if "
    "the node is gone for good, an operator removes it with kubectl delete pod {pod} --force."
)
# How long past its deletion deadline a pod may take before its node is suspected: the
# kubelet reports a pod gone a few seconds after its containers stop.
OVERDUE_AFTER = timedelta(seconds=60)
WAITING_FOR_CONTAINER = "Waiting for the container to start on {node}."
# The two parts of that wait, when the kubelet reports PodReadyToStartContainers.
PREPARING_POD = "Mounting the home volume and preparing the pod on {node}."
STARTING_CONTAINERS = (
    "Starting the containers on {node}, pulling their images if the node lacks them."
)
WAITING_FOR_SSH = "Waiting for the SSH server to become ready."
NODE_NOT_READY = (
    "Its node {node} is not ready{since}, so Kubernetes no longer counts the pod as ready. "
    "The box comes back when the node does; if the node is gone for good, an operator "
    "deletes it (kubectl delete node {node}) so that the box can start on another node."
)
WAITING_FOR_ADDRESS = "Waiting for the SSH service to get an address."
WAITING_FOR_SCHEDULER = "Waiting for the scheduler."
POD_FAILED = "The pod failed: {reason}"
CONTAINER_FAILED = "{reason}: {message}"
CREATE_FAILED = "Kubernetes cannot create the pod: {message}"
SNAPSHOT_UNREADABLE = "The pinned GPU profile cannot be read ({error}); recreate the box."
IMAGE_SNAPSHOT_UNREADABLE = "The pinned image profile cannot be read ({error}); recreate the box."
DEADLINE_EXCEEDED = "The box did not become ready in time: {message}"

# Summaries: one human line before the details of ``message``.
SUMMARY_GPU_WAIT = "Waiting for a free {display_name}"
SUMMARY_CLAIM_BINDING = "Waiting for the home volume to be bound."
SUMMARY_NO_ROOM = "Waiting for a node with room for this box."
# Right after a create the scheduler may see the pod before its home claim is bound. That
# clears by itself within seconds and is no reason to queue for a device.
UNBOUND_CLAIMS = "unbound immediate PersistentVolumeClaims"

# The only Events status reads beyond their reason: pod creations Kubernetes refused.
FAILED_CREATE = "FailedCreate"
DEGRADED_WAITING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


DeviceKey = tuple[str, str, str]


@dataclass(frozen=True)
class BoxObjects:
    """Everything the cache knows about one box."""

    deployment: Obj
    pods: Sequence[Obj] = ()
    replicasets: Sequence[Obj] = ()
    events: Sequence[Obj] = ()
    service: Obj | None = None
    pvc: Obj | None = None
    # A DRA box's claims, and the published devices they were allocated, by
    # (driver, pool, device name).
    claims: Sequence[Obj] = ()
    devices: Mapping[DeviceKey, Obj] = field(default_factory=dict)


def _condition(obj: Obj | None, kind: str) -> Obj | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


def _annotations(obj: Obj) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("annotations") or {})


def _parse_time(value: str | None) -> datetime | None:
    return parse_timestamp(value) if value else None


def current_pod(pods: Sequence[Obj]) -> Obj | None:
    """The newest pod that is not being deleted."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if not live:
        return None
    return max(
        live, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"])
    )


def tunnel_address(objects: BoxObjects) -> str | None:
    """Where a tunnel dials the box's sshd: its current pod's address, once that pod is
    ready; None before."""
    pod = current_pod(objects.pods)
    if pod is None or not _pod_ready(pod):
        return None
    address = (pod.get("status") or {}).get("podIP")
    return str(address) if address else None


def ssh_address(service: Obj | None, settings: Settings) -> tuple[str | None, int]:
    """Where SSH reaches the box, or (None, 22) while the Service has no address."""
    if not service:
        return None, 22
    spec = service.get("spec") or {}
    ports = spec.get("ports") or []
    if settings.ssh.service_type == "LoadBalancer":
        for ingress in ((service.get("status") or {}).get("loadBalancer") or {}).get(
            "ingress"
        ) or []:
            host = ingress.get("ip") or ingress.get("hostname")
            if host:
                return str(host), int(ports[0]["port"]) if ports else 22
        return None, 22
    node_port = ports[0].get("nodePort") if ports else None
    if node_port and settings.ssh.host:
        return settings.ssh.host, int(node_port)
    return None, 22


def _pod_ready(pod: Obj | None) -> bool:
    ready = _condition(pod, "Ready")
    return bool(pod and ready and ready.get("status") == "True")


def waits_for_node(objects: BoxObjects) -> bool:
    """Whether the box has no pod on a node yet: it is in line, gated, or being scheduled,
    and holds no device."""
    pod = current_pod(objects.pods)
    return pod is None or not (pod.get("spec") or {}).get("nodeName")


def _readiness_withdrawn(pod: Obj) -> bool:
    """Whether Kubernetes took the pod's readiness away for its node's sake.

    The kubelet makes a box pod Ready exactly when its containers are (box pods have no
    readiness gates); only the node lifecycle controller, finding the node not ready
    (stopped reporting, or reporting NotReady), withdraws Ready and leaves ContainersReady
    as the kubelet last reported it.
    """
    ready, containers = _condition(pod, "Ready"), _condition(pod, "ContainersReady")
    return bool(
        ready
        and containers
        and ready.get("status") == "False"
        and containers.get("status") == "True"
    )


def _container_failure(pod: Obj) -> str | None:
    status = pod.get("status") or {}
    for container in (status.get("initContainerStatuses") or []) + (
        status.get("containerStatuses") or []
    ):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in DEGRADED_WAITING_REASONS:
            return CONTAINER_FAILED.format(
                reason=waiting["reason"], message=waiting.get("message") or container["name"]
            )
    return None


def _event_time(event: Obj) -> str | None:
    return event.get("lastTimestamp") or event.get("eventTime")


def _started_at(deployment: Obj) -> datetime | None:
    """When the box was last created or started: its deadline minus its time to live."""
    annotations = _annotations(deployment)
    expires = _parse_time(annotations.get(naming.ANNOTATION_EXPIRES_AT))
    try:
        hours = int(annotations.get(naming.ANNOTATION_TTL_HOURS, ""))
    except ValueError:
        return None
    return expires - timedelta(hours=hours) if expires else None


def _create_failure(objects: BoxObjects) -> str | None:
    failure = _condition(objects.deployment, "ReplicaFailure")
    if failure and failure.get("status") == "True" and failure.get("message"):
        return CREATE_FAILED.format(message=failure["message"])
    for replicaset in objects.replicasets:
        failure = _condition(replicaset, "ReplicaFailure")
        if failure and failure.get("status") == "True" and failure.get("message"):
            return CREATE_FAILED.format(message=failure["message"])
    box = naming.box_name_of(objects.deployment)
    since = _started_at(objects.deployment)
    failed = [
        e
        for e in objects.events
        if e.get("reason") == FAILED_CREATE
        and (e.get("involvedObject") or {}).get("kind") == "ReplicaSet"
        and naming.box_of_event(e) == box
        # Events outlive a stop; one from before the latest start no longer explains anything.
        and (since is None or (_parse_time(_event_time(e)) or since) >= since)
    ]
    if failed:
        latest = max(failed, key=lambda e: _event_time(e) or "")
        return CREATE_FAILED.format(message=latest.get("message", ""))
    return None


def degraded_reason(objects: BoxObjects, pod: Obj | None) -> str | None:
    if pod is not None:
        status = pod.get("status") or {}
        if status.get("phase") == "Failed":
            return POD_FAILED.format(
                reason=status.get("message") or status.get("reason") or "it exited"
            )
        failure = _container_failure(pod)
        if failure:
            return failure
    else:
        failure = _create_failure(objects)
        if failure:
            return failure
    progressing = _condition(objects.deployment, "Progressing")
    if progressing and progressing.get("reason") == "ProgressDeadlineExceeded":
        return DEADLINE_EXCEEDED.format(message=progressing.get("message", ""))
    return None


def scheduling_detail(pod: Obj | None) -> str | None:
    """The scheduler's sentence while it cannot place the pod, verbatim; the line's own
    for a pod behind its gate."""
    if pod is not None and naming.gated(pod):
        return IN_LINE
    scheduled = _condition(pod, "PodScheduled")
    if not scheduled or scheduled.get("status") != "False":
        return None
    return str(scheduled.get("message") or scheduled.get("reason") or "no reason given")


def _claim_binding(detail: str | None) -> bool:
    return detail is not None and UNBOUND_CLAIMS in detail


def waiting_since(objects: BoxObjects) -> str | None:
    """When a running GPU box's pod started waiting for a device (its creation time), or
    None when it does not wait for one. Orders the queue of a profile, oldest first."""
    if naming.is_stopped(objects.deployment):
        return None
    if not _annotations(objects.deployment).get(naming.ANNOTATION_GPU_SNAPSHOT):
        return None
    pod = current_pod(objects.pods)
    detail = scheduling_detail(pod)
    if pod is None or detail is None or _claim_binding(detail):
        return None
    return str(pod["metadata"].get("creationTimestamp") or "")


def _summary(
    state: DevboxState, message: str, detail: str | None, gpu: GpuAllocation | None
) -> str | None:
    """One human line for a box that is not ready; the queue refines a GPU wait."""
    if state in (DevboxState.READY, DevboxState.STOPPED):
        return None
    if state is DevboxState.DEGRADED:
        return message.split(": ", 1)[0]
    if detail is None:
        return message
    if _claim_binding(detail):
        return SUMMARY_CLAIM_BINDING
    if gpu is not None:
        return SUMMARY_GPU_WAIT.format(display_name=gpu.display_name)
    return SUMMARY_NO_ROOM


def _leaving_message(leaving: Obj, node: str, now: datetime) -> str:
    name = leaving["metadata"]["name"]
    deadline = _parse_time(leaving["metadata"]["deletionTimestamp"])
    if deadline is not None and now > deadline + OVERDUE_AFTER:
        return PREVIOUS_POD_OVERDUE.format(pod=name, node=node, deadline=format_timestamp(deadline))
    return WAITING_FOR_PREVIOUS_POD.format(pod=name, node=node)


def _leaving_pod(pods: Sequence[Obj]) -> tuple[Obj, str] | None:
    """A pod of the box that is shutting down on a node, with that node."""
    for leaving in pods:
        node = (leaving.get("spec") or {}).get("nodeName")
        if leaving["metadata"].get("deletionTimestamp") and node:
            return leaving, node
    return None


def _stopped_message(deployment: Obj, pods: Sequence[Obj]) -> str:
    expired_at = _annotations(deployment).get(naming.ANNOTATION_EXPIRED_AT)
    stopped = (
        budget_stop.stopped_message(deployment)
        or activity.stopped_message(deployment)
        or (EXPIRED.format(at=expired_at) if expired_at else STOPPED)
    )
    if (found := _leaving_pod(pods)) is None:
        return stopped
    leaving, node = found
    return STOPPED_POD_LEAVING.format(stopped=stopped, pod=leaving["metadata"]["name"], node=node)


def _starting_message(pod: Obj | None, pods: Sequence[Obj], now: datetime) -> str:
    if pod is None:
        # A start creates the new pod only once the last one is gone: they share the home.
        found = _leaving_pod(pods)
        return WAITING_FOR_POD if found is None else _leaving_message(*found, now)
    detail = scheduling_detail(pod)
    if detail is not None:
        return SCHEDULING_BLOCKED.format(reason=detail)
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return WAITING_FOR_SCHEDULER
    if _readiness_withdrawn(pod):
        since = (_condition(pod, "Ready") or {}).get("lastTransitionTime")
        return NODE_NOT_READY.format(node=node, since=f" since {since}" if since else "")
    if (pod.get("status") or {}).get("phase") != "Running":
        sandbox = _condition(pod, "PodReadyToStartContainers")
        if sandbox is None:
            return WAITING_FOR_CONTAINER.format(node=node)
        if sandbox.get("status") != "True":
            return PREPARING_POD.format(node=node)
        return STARTING_CONTAINERS.format(node=node)
    return WAITING_FOR_SSH


def allocation_results(claim: Obj) -> list[Obj]:
    status = claim.get("status") or {}
    return list((((status.get("allocation") or {}).get("devices") or {}).get("results")) or [])


def device_key(result: Obj) -> DeviceKey:
    return (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))


def _alternative(request: str) -> int | None:
    """0 for the profile's own device, n for its n-th alternative; None for a request
    that is not the box's GPU request."""
    if request == naming.GPU_REQUEST:
        return 0
    head, _, choice = request.partition("/")
    return naming.choice_index(choice) if head == naming.GPU_REQUEST else None


def allocated(objects: BoxObjects, pod: Obj | None) -> list[AllocatedDevice] | None:
    """The devices Kubernetes allocated to the box's current pod, from the claim the pod
    owns; None before the claim is allocated."""
    uid = ((pod or {}).get("metadata") or {}).get("uid")
    if uid is None:
        return None
    claim = next(
        (
            c
            for c in objects.claims
            if any(o.get("uid") == uid for o in c["metadata"].get("ownerReferences") or [])
        ),
        None,
    )
    found = []
    for result in allocation_results(claim or {}):
        alternative = _alternative(str(result.get("request")))
        if alternative is None:
            continue
        device = objects.devices.get(device_key(result)) or {}
        product = ((device.get("attributes") or {}).get("productName") or {}).get("string")
        memory = ((device.get("capacity") or {}).get("memory") or {}).get("value")
        found.append(
            AllocatedDevice(
                product=str(product) if product else None,
                memory=str(memory) if memory else None,
                alternative=alternative,
            )
        )
    return found or None


def gpu_allocation(deployment: Obj) -> GpuAllocation | None:
    snapshot = _annotations(deployment).get(naming.ANNOTATION_GPU_SNAPSHOT)
    if not snapshot:
        return None
    return GpuProfileConfig.from_snapshot(snapshot).allocation()


def image_allocation(deployment: Obj) -> ImageAllocation | None:
    snapshot = _annotations(deployment).get(naming.ANNOTATION_IMAGE_SNAPSHOT)
    if not snapshot:
        return None
    return ImageProfileConfig.from_snapshot(snapshot).allocation()


def _storage_size(pvc: Obj | None) -> str | None:
    if not pvc:
        return None
    capacity = ((pvc.get("status") or {}).get("capacity") or {}).get("storage")
    requested = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
        "storage"
    )
    return str(requested or capacity) if (requested or capacity) else None


def derive(objects: BoxObjects, settings: Settings, now: datetime) -> Devbox:
    """The wire status of one box."""
    deployment = objects.deployment
    metadata = deployment["metadata"]
    annotations = _annotations(deployment)
    stopped = naming.is_stopped(deployment)
    name = naming.box_name_of(deployment) or metadata["name"]
    pod = current_pod(objects.pods)
    host, port = ssh_address(objects.service, settings)
    ready = _pod_ready(pod)
    try:
        gpu = gpu_allocation(deployment)
        if gpu is not None and gpu.kind == "dra" and not stopped:
            gpu = gpu.model_copy(update={"allocated": allocated(objects, pod)})
        broken_snapshot = None
    except SnapshotError as err:
        gpu, broken_snapshot = None, SNAPSHOT_UNREADABLE.format(error=err)
    try:
        image = image_allocation(deployment)
    except SnapshotError as err:
        image = None
        broken_snapshot = broken_snapshot or IMAGE_SNAPSHOT_UNREADABLE.format(error=err)

    if stopped:
        state, message = DevboxState.STOPPED, _stopped_message(deployment, objects.pods)
    elif broken_snapshot is not None:
        state, message = DevboxState.DEGRADED, broken_snapshot
    elif ready and (host or not settings.ssh.has_service):
        state, message = DevboxState.READY, READY
    elif (reason := degraded_reason(objects, pod)) is not None:
        state, message = DevboxState.DEGRADED, reason
    elif ready:
        state, message = DevboxState.STARTING, WAITING_FOR_ADDRESS
    else:
        state, message = DevboxState.STARTING, _starting_message(pod, objects.pods, now)

    running = not stopped and pod is not None
    restarts = sum(
        int(c.get("restartCount", 0))
        for c in ((pod or {}).get("status") or {}).get("containerStatuses") or []
    )
    show_ssh = state is DevboxState.READY
    detail = scheduling_detail(pod) if state is DevboxState.STARTING else None
    return Devbox(
        name=name,
        state=state,
        preset=annotations.get(naming.ANNOTATION_PRESET, "small"),
        created_at=_parse_time(metadata.get("creationTimestamp")) or now,
        uid=metadata.get("uid"),
        owner=ownership.owner_of(deployment),
        expires_at=_parse_time(annotations.get(naming.ANNOTATION_EXPIRES_AT)),
        repository=annotations.get(naming.ANNOTATION_REPOSITORY) or None,
        ssh_host=host if show_ssh else None,
        ssh_port=port,
        ssh_user=naming.BOX_USER if show_ssh else None,
        ssh_command=_ssh_command(name, host, port) if show_ssh else None,
        ssh_host_keys=host_key.published(deployment),
        pod_name=pod["metadata"]["name"] if running and pod else None,
        pod_ready=ready if running else False,
        restarts=restarts if running else 0,
        storage_size=_storage_size(objects.pvc),
        message=message,
        gpu=gpu,
        image=image,
        summary=_summary(state, message, detail, gpu),
        scheduling_detail=detail,
        **_restart(deployment, settings, running=not stopped),
        activity=activity.of(deployment, settings, now) if not stopped else None,
        stop_warning=stop_warning.warning(deployment, settings, now),
    )


def _ssh_command(name: str, host: str | None, port: int) -> str:
    """How a person connects: at the box's own address, else through the controller."""
    if host is None:
        return f"devbox ssh {name}"
    return f"ssh -p {port} {naming.BOX_USER}@{host}"


def _restart(deployment: Obj, settings: Settings, running: bool) -> dict[str, Any]:
    """A running box whose pod the release would change; stopped ones are rebuilt at once."""
    if not running:
        return {}
    try:
        reason = template.restart_reason(deployment, settings)
    except SnapshotError:
        return {}
    return {"restart_required": reason is not None, "restart_reason": reason}
