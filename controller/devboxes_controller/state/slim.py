"""What the caches keep of each kind: exactly the fields the controller reads, no more.

A pod as the apiserver sends it is kilobytes of JSON (managedFields, the whole pod spec,
every container status); parsed into Python it costs tens of kilobytes, and the caches
hold six kinds for every box. Each function here takes one object as the apiserver sent
it and returns a new, small object with the same shape, holding only what its readers
use: status derivation and the waiting line (``status``), the pinned spec and release
drift (``spec_from_deployment``, ``template``), repair and expiry
(``reconciler``), activity (``activity``, ``ingest``), retained volumes (``volumes``),
the lifecycle verbs (``lifecycle``) and the caches themselves. Reading a field not kept here
means adding it here first; ``tests/controller/state/test_controller_slim.py`` checks that
none of those readers can tell a slim object from a full one.

Building new dicts (rather than deleting keys) also means the keys are this module's
string constants, shared by every cached object instead of one copy per object.

Every watch's strip is named here (``watches.WATCHES`` takes them from this module). The
cluster-wide kinds availability counts are kept in the shapes the pure placement code
reads, which the GPU doctor also makes of what it lists; those strips are therefore
written beside that code (``placement.capacity``, ``placement.devices``), which cannot
import this layer, and named here under the cache's name.
"""

from __future__ import annotations

import sys
from typing import Any

from ..box import template
from ..box.naming import ANNOTATION_PREFIX, LABEL_BOX, LABEL_COMPONENT, LABEL_GPU_PROFILE
from ..box.ownership import ANNOTATION_OWNER
from ..box.status import FAILED_CREATE
from ..k8s.kube import Obj
from ..placement import capacity, devices


def _pick(source: Any, keys: tuple[str, ...]) -> Obj:
    if not isinstance(source, dict):
        return {}
    return {key: source[key] for key in keys if key in source}


def _word(value: Any) -> Any:
    """One shared copy of a short value that recurs in every object ("True", "Ready")."""
    return sys.intern(value) if isinstance(value, str) else value


def _words(source: Any, keys: tuple[str, ...]) -> Obj:
    return {key: _word(value) for key, value in _pick(source, keys).items()}


def _metadata(obj: Obj, *read: str, labels: tuple[str, ...] = ()) -> Obj:
    """Name, version, deletion and the box label every cache indexes by, and the fields in
    ``read`` and the ``labels`` that this kind's readers need besides."""
    metadata = obj.get("metadata") or {}
    slim = _pick(metadata, ("name", "resourceVersion", "deletionTimestamp", *read))
    kept = _words(metadata.get("labels"), (LABEL_BOX, *labels))
    if kept:
        slim["labels"] = kept
    return slim


def _owned(obj: Obj, metadata: Obj) -> Obj:
    """``metadata`` with the uids of the objects that own ``obj``."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    metadata["ownerReferences"] = [_pick(o, ("uid",)) for o in owners]
    return metadata


def _conditions(obj: Obj, keys: tuple[str, ...], dated: tuple[str, ...] = ()) -> list[Obj]:
    """Type, status and reason are words; a message, when kept, is free text; the time of
    the last transition only for the ``dated`` types."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    words = tuple(key for key in keys if key != "message")
    slim = []
    for condition in conditions:
        picked = _words(condition, words)
        if "message" in keys and "message" in condition:
            picked["message"] = condition["message"]
        if condition.get("type") in dated and "lastTransitionTime" in condition:
            picked["lastTransitionTime"] = condition["lastTransitionTime"]
        slim.append(picked)
    return slim


def deployment(obj: Obj) -> Obj:
    """The box's own annotations (its pinned contract, template record and activity),
    replicas and the failure conditions; its uid, which the Service's owner reference, the
    recorded Events and the activity credential name. The pod template only for a box
    written before the template was recorded in annotations."""
    metadata = _metadata(obj, "uid", "creationTimestamp")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    own = {k: v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}
    if own:
        metadata["annotations"] = own
    slim: Obj = {"metadata": metadata}
    spec = obj.get("spec") or {}
    slim_spec = _pick(spec, ("replicas",))
    if "template" in spec and template.reads_deployed_template(obj):
        slim_spec["template"] = spec["template"]
    if slim_spec:
        slim["spec"] = slim_spec
    slim["status"] = {"conditions": _conditions(obj, ("type", "status", "reason", "message"))}
    return slim


def replicaset(obj: Obj) -> Obj:
    """Its name and why it failed to create the pod."""
    return {
        "metadata": _metadata(obj),
        "status": {"conditions": _conditions(obj, ("type", "status", "message"))},
    }


def failing_replicaset(obj: Obj) -> bool:
    """Whether a ReplicaSet reports that it cannot create its pod: the only ReplicaSets a
    box's status reads. A box restarted twice has three, so keeping the others would cost
    a cache of 10,000 boxes tens of MiB for nothing."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "ReplicaFailure" and c.get("status") == "True" for c in conditions)


def _container_status(container: Obj) -> Obj:
    slim = _pick(container, ("name", "restartCount"))
    waiting = (container.get("state") or {}).get("waiting")
    if waiting:
        slim["state"] = {"waiting": _pick(waiting, ("reason", "message"))}
    return slim


def pod(obj: Obj) -> Obj:
    """Node, phase, readiness, the scheduler's words and the containers' waiting reasons;
    its uid, which owns a DRA box's claim; its scheduling gates and owner, which place it
    in the line for a device; its address, which a tunnel to the box dials."""
    slim: Obj = {"metadata": _metadata(obj, "uid", "creationTimestamp")}
    owner = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_OWNER)
    if owner is not None:
        slim["metadata"]["annotations"] = {ANNOTATION_OWNER: owner}
    spec = obj.get("spec") or {}
    slim_spec: Obj = {}
    if spec.get("nodeName"):
        slim_spec["nodeName"] = spec["nodeName"]
    if spec.get("schedulingGates"):
        slim_spec["schedulingGates"] = [_words(g, ("name",)) for g in spec["schedulingGates"]]
    if slim_spec:
        slim["spec"] = slim_spec
    status = obj.get("status") or {}
    slim_status = _words(status, ("phase", "reason"))
    if status.get("podIP"):
        slim_status["podIP"] = status["podIP"]
    if "message" in status:
        slim_status["message"] = status["message"]
    # Since when Ready is withdrawn: how long the pod's node has been out of reach.
    slim_status["conditions"] = _conditions(
        obj, ("type", "status", "reason", "message"), dated=("Ready",)
    )
    for key in ("initContainerStatuses", "containerStatuses"):
        if status.get(key):
            slim_status[key] = [_container_status(c) for c in status[key]]
    slim["status"] = slim_status
    return slim


def service(obj: Obj) -> Obj:
    """The SSH port and where it is reached: node port or load balancer address; its age,
    so that the reconciler leaves alone the Service a start is making; the Deployment that
    owns it, so that a box never takes over one of an earlier box of its name."""
    spec = obj.get("spec") or {}
    slim: Obj = {
        "metadata": _owned(obj, _metadata(obj, "creationTimestamp")),
        "spec": {"ports": [_pick(p, ("port", "nodePort")) for p in spec.get("ports") or []]},
    }
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    if ingress:
        slim["status"] = {
            "loadBalancer": {"ingress": [_pick(i, ("ip", "hostname")) for i in ingress]}
        }
    return slim


def persistent_volume_claim(obj: Obj) -> Obj:
    """The requested and the provisioned size (storage is grown, never shrunk), and what a
    retained volume is listed with: its creation, its component and the last GPU profile."""
    requested = (((obj.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
        "storage"
    )
    capacity = ((obj.get("status") or {}).get("capacity") or {}).get("storage")
    slim: Obj = {
        "metadata": _metadata(obj, "creationTimestamp", labels=(LABEL_COMPONENT, LABEL_GPU_PROFILE))
    }
    owner = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_OWNER)
    if owner is not None:
        slim["metadata"]["annotations"] = {ANNOTATION_OWNER: owner}
    if requested is not None:
        slim["spec"] = {"resources": {"requests": {"storage": requested}}}
    if capacity is not None:
        slim["status"] = {"capacity": {"storage": capacity}}
    return slim


def claim_template(obj: Obj) -> Obj:
    """That it exists, and the Deployment that owns it: repair recreates a missing one,
    and replaces one left by an earlier box of the same name."""
    return {"metadata": _owned(obj, _metadata(obj))}


def resource_claim(obj: Obj) -> Obj:
    """The pod that owns it and which devices were allocated to which request."""
    metadata = _owned(obj, _metadata(obj))
    results = (((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    slim: Obj = {"metadata": metadata}
    if results:
        picked = [_words(r, ("request", "driver", "pool", "device")) for r in results]
        slim["status"] = {"allocation": {"devices": {"results": picked}}}
    return slim


def event(obj: Obj) -> Obj:
    """Which object it is about and why; what was said and when only for a failed pod
    creation, the one kind of Event status reports from (most Events are about progress)."""
    slim = _words(obj, ("reason",))
    if obj.get("reason") == FAILED_CREATE:
        slim.update(_pick(obj, ("message", "lastTimestamp", "eventTime")))
    slim["metadata"] = _metadata(obj)
    involved = obj.get("involvedObject") or {}
    slim["involvedObject"] = {"kind": _word(involved.get("kind")), "name": involved.get("name")}
    return slim


# A kubelet's report of volumes it could not prepare names each volume and why: past this
# it is detail no reader needs.
MOUNT_REPORT_CHARS = 1024


def mount_report(obj: Obj) -> Obj:
    """A kubelet's ``FailedMount`` Event: the pod it is about and what it said."""
    slim = event(obj)
    slim["message"] = str(obj.get("message") or "")[:MOUNT_REPORT_CHARS]
    return slim


# -- the cluster-wide caches of availability (and, for the slices, of DRA boxes' devices) ----

# A node's labels, taints, readiness and allocatable resources: eligibility and capacity.
node = capacity.strip_node
# Any pod of the cluster: its node, phase, summed requests and whether it is a box's.
cluster_pod = capacity.strip_pod
# A RuntimeClass's name and the nodeSelector and tolerations admission adds to its pods.
runtime_class = capacity.strip_runtime_class
# A ResourceSlice's driver, pool, node and devices: the counting, and a DRA box's device.
resource_slice = devices.strip_slice
# Any ResourceClaim of the cluster: the devices its allocation holds.
held_claim = devices.strip_claim
# A DeviceClass's selectors and the extended resource it serves.
device_class = devices.strip_device_class
