"""The words every layer finds and tells boxes by: the names of a box's objects, their
labels, the annotation keys of a box's record, and the selectors.

Nothing is rendered or read back here: a module that only looks boxes up imports this
alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import ownership

LABEL_BOX = "devboxes.io/box"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
# On a home claim: the GPU profile of the box that last used it, for the volume listing.
LABEL_GPU_PROFILE = "devboxes.io/gpu-profile"
MANAGER = "devboxes-controller"
APP_NAME = "devbox"
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGER}"

COMPONENT_WORKSPACE = "workspace"
COMPONENT_HOME = "home"
COMPONENT_SSH = "ssh"
COMPONENT_ACTIVITY = "activity"
COMPONENT_GPU = "gpu"

ANNOTATION_PREFIX = "devboxes.io/"
ANNOTATION_GPU_SNAPSHOT = ANNOTATION_PREFIX + "gpu-profile-snapshot"
ANNOTATION_GPU_PROFILE = ANNOTATION_PREFIX + "gpu-profile"
ANNOTATION_GPU_RESOURCE = ANNOTATION_PREFIX + "gpu-resource"
ANNOTATION_GPU_COUNT = ANNOTATION_PREFIX + "gpu-count"
ANNOTATION_GPU_DEVICE_CLASS = ANNOTATION_PREFIX + "gpu-device-class"
ANNOTATION_IMAGE_SNAPSHOT = ANNOTATION_PREFIX + "image-profile-snapshot"
ANNOTATION_IMAGE_PROFILE = ANNOTATION_PREFIX + "image-profile"
ANNOTATION_PRESET = ANNOTATION_PREFIX + "preset"
ANNOTATION_TTL_HOURS = ANNOTATION_PREFIX + "ttl-hours"
ANNOTATION_EXPIRES_AT = ANNOTATION_PREFIX + "expires-at"
ANNOTATION_REPOSITORY = ANNOTATION_PREFIX + "repository"
# When the box was created or last started, until its pod is given a node: its time to live
# does not run while it waits in line for a device, and once its pod has a node the
# reconciler moves its deadline later by the wait and removes this.
ANNOTATION_WAITING_SINCE = ANNOTATION_PREFIX + "waiting-since"
# The box's SSH host public key ("ssh-ed25519 AAAA..."), made by the controller with the
# box and published in the API, so that clients check the box's identity without asking.
ANNOTATION_HOST_KEY = ANNOTATION_PREFIX + "ssh-host-key"
# Written by the reconciler when the TTL stops a box.
ANNOTATION_EXPIRED_AT = ANNOTATION_PREFIX + "expired-at"
# The main container's image and resources as created: pinned like the GPU profile, so
# a new release image or preset size never changes an existing box.
ANNOTATION_PINNED_MAIN = ANNOTATION_PREFIX + "pinned-main"
# A hash per part of the pod template as last written, to tell what a release changed.
ANNOTATION_TEMPLATE = ANNOTATION_PREFIX + "template"
# On the pod template, written by every start: a start is then a rollout, and the Recreate
# strategy creates the new pod only once the previous one is gone. Scaling the same
# ReplicaSet back up would not wait, and two pods would share the home volume.
ANNOTATION_STARTED_AT = ANNOTATION_PREFIX + "started-at"
# On a box pod, the retries of its volumes the controller asked of its node's kubelet
# (control.mount_retry).
ANNOTATION_MOUNT_RETRY = ANNOTATION_PREFIX + "mount-retry"
# Holds a box pod that asks for a device back from the scheduler until its turn in line.
QUEUE_GATE = "devboxes.io/queue"

MAIN_CONTAINER = "devbox"
# The name of a DRA box's claim in its pod, and of the one request in that claim; the
# allocation names a subrequest "gpu/<choice>" when the profile has alternatives.
GPU_CLAIM = "gpu"
GPU_REQUEST = "gpu"
# The workspace image's one login user (workspace/Dockerfile); its home is the box's volume.
BOX_USER = "dev"
DEPLOYMENT_PREFIX = "devbox-"
_CHOICE = "choice-"


@dataclass(frozen=True)
class ObjectNames:
    """The names of the objects of the box ``box``."""

    box: str
    deployment: str
    pvc: str
    service: str
    activity_secret: str
    claim_template: str
    host_key_secret: str


def object_names(box: str) -> ObjectNames:
    return ObjectNames(
        box=box,
        deployment=f"{DEPLOYMENT_PREFIX}{box}",
        pvc=f"devbox-{box}-home",
        service=f"devbox-{box}-ssh",
        activity_secret=f"devbox-{box}-activity",
        claim_template=f"devbox-{box}-gpu",
        host_key_secret=f"devbox-{box}-host-key",
    )


def labels(box: str, component: str) -> dict[str, str]:
    """The labels of every object of a box; MANAGED_SELECTOR finds them all."""
    return {
        LABEL_BOX: box,
        LABEL_NAME: APP_NAME,
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: MANAGER,
    }


def person_labels(owner: str, component: str) -> dict[str, str]:
    """The labels of an object that belongs to a person rather than to one box."""
    return {
        LABEL_NAME: APP_NAME,
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: MANAGER,
        **ownership.marks(owner)[0],
    }


def box_selector(box: str) -> dict[str, str]:
    """The pod selector of a box's Deployment and Service."""
    return {LABEL_BOX: box}


def box_name_of(obj: dict[str, Any]) -> str | None:
    """The box an object belongs to, from its box label."""
    metadata = obj.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(LABEL_BOX)
    return name if isinstance(name, str) and name else None


def box_of_event(event: dict[str, Any]) -> str | None:
    """The box an Event is about: Events carry no labels, so the involved object's name
    is mapped back (Deployment devbox-NAME, ReplicaSet devbox-NAME-HASH, Pod
    devbox-NAME-HASH-SUFFIX)."""
    involved = event.get("involvedObject") or {}
    name = str(involved.get("name") or "")
    trim = {"Deployment": 0, "ReplicaSet": 1, "Pod": 2}.get(str(involved.get("kind")))
    if trim is None or not name.startswith(DEPLOYMENT_PREFIX):
        return None
    parts = name[len(DEPLOYMENT_PREFIX) :].split("-")
    return "-".join(parts[: len(parts) - trim]) if len(parts) > trim else None


def is_stopped(deployment: Mapping[str, Any]) -> bool:
    """Whether the box's Deployment is scaled to nothing: stopped by its owner, an idle
    stop or its time to live. A Deployment that says nothing runs one replica."""
    return bool((deployment.get("spec") or {}).get("replicas", 1) == 0)


def gated(pod: dict[str, Any]) -> bool:
    """Whether the pod is still held back by the line's scheduling gate."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == QUEUE_GATE for gate in gates)


def choice_name(index: int) -> str:
    """The subrequest of a DRA profile's ``index``-th choice: 0 its own device, then its
    alternatives in order."""
    return f"{_CHOICE}{index}"


def choice_index(name: str) -> int | None:
    """The inverse of :func:`choice_name`; None for any other name."""
    number = name.removeprefix(_CHOICE)
    if number == name or not (number.isascii() and number.isdigit()):
        return None
    return int(number)


def canonical_json(value: Any) -> str:
    """The one JSON form of every record an annotation holds, so that equal records are
    equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
