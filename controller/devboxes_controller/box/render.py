"""The Kubernetes objects of one box, as plain JSON-ready dicts.

Pure functions: no I/O, no clock, no Kubernetes client. Every field comes from a
:class:`~.spec.BoxSpec`, the settings and what :func:`box` is given besides; clients never
set a pod field. :func:`box` renders every object of a box at once, complete: nothing is
added to a rendered object afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..config.boxes import SSH_CONTAINER_PORT
from ..config.settings import Settings
from ..k8s.kube import Obj
from ..k8s.timestamps import format_timestamp
from . import host_key, ownership, template_hash
from .idempotency import ANNOTATION_CREATE_REQUEST, CreateRequest
from .naming import (
    ANNOTATION_GPU_PROFILE,
    ANNOTATION_TEMPLATE,
    ANNOTATION_WAITING_SINCE,
    COMPONENT_ACTIVITY,
    COMPONENT_GPU,
    COMPONENT_HOME,
    COMPONENT_SSH,
    COMPONENT_WORKSPACE,
    GPU_REQUEST,
    LABEL_GPU_PROFILE,
    box_selector,
    choice_name,
    labels,
)
from .pod import ACTIVITY_CREDENTIAL_KEY, SSH_PORT_NAME, pod_spec
from .spec import BoxSpec, pin_annotations

# Older ReplicaSets a box's Deployment keeps; each start of a stopped box makes one.
REVISION_HISTORY = 2
SSH_SERVICE_PORT = 22


@dataclass(frozen=True)
class Box:
    """Every object of one box, complete as it is written.

    The Service, a DRA box's claim template and the agent's Secret belong to the box's
    Deployment: they name its uid, so they are rendered only once it exists.
    """

    claim: Obj
    deployment: Obj
    service: Obj | None = None
    # Only a DRA box has one.
    claim_template: Obj | None = None
    # Only a box that runs the agent has one.
    activity_secret: Obj | None = None
    # Only a box whose host key this rendering was given has one.
    host_key_secret: Obj | None = None


def box(
    spec: BoxSpec,
    settings: Settings,
    *,
    made_by: CreateRequest | None = None,
    owner_groups: Sequence[str] | None = None,
    owned_by: Obj | None = None,
    credential: str | None = None,
    private_host_key: str | None = None,
) -> Box:
    """Every object of the box of ``spec``.

    ``made_by`` is the client's create request, recorded on the Deployment for its retries;
    ``owner_groups`` the owner's groups the limits count the box towards. ``owned_by`` is
    the box's Deployment as the apiserver holds it: without it, the objects that belong to
    it are not rendered. ``credential`` is the agent's, for a box whose pod runs the agent;
    ``private_host_key`` the private half of the box's host key, when it was just made.
    """
    claim = render_pvc(spec, settings)
    deployment = render_deployment(spec, settings, made_by=made_by, owner_groups=owner_groups)
    if owned_by is None:
        return Box(claim=claim, deployment=deployment)
    return Box(
        claim=claim,
        deployment=deployment,
        service=render_service(spec, settings, owned_by) if settings.ssh.has_service else None,
        activity_secret=(
            None
            if credential is None
            else render_activity_secret(spec, settings, credential, owned_by)
        ),
        host_key_secret=(
            None
            if private_host_key is None
            else _secret(
                spec,
                settings,
                spec.names.host_key_secret,
                COMPONENT_SSH,
                {host_key.KEY_FILE: private_host_key},
                owned_by,
            )
        ),
        claim_template=render_claim_template(spec, settings, owned_by),
    )


def _metadata(
    spec: BoxSpec,
    name: str,
    settings: Settings,
    component: str,
    owned_by: Obj | None = None,
    *,
    marked: bool = True,
) -> dict[str, Any]:
    """Name, namespace, the box's labels, its owner's marks unless not ``marked``, and
    the Deployment that owns the object, if one does."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": settings.namespace,
        "labels": labels(spec.name, component),
    }
    owner_labels, owner_annotations = spec.marks if marked else ({}, {})
    metadata["labels"].update(owner_labels)
    if owner_annotations:
        # A copy: the spec's marks are shared by every object rendered from it.
        metadata["annotations"] = dict(owner_annotations)
    if owned_by is not None:
        metadata["ownerReferences"] = ownership.owner_references(owned_by)
    return metadata


def render_pvc(spec: BoxSpec, settings: Settings) -> dict[str, Any]:
    """The home volume. It has no owner: it outlives the box unless purged."""
    pvc_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.preset(spec.preset).storage}},
    }
    if settings.storage_class_name is not None:
        pvc_spec["storageClassName"] = settings.storage_class_name
    metadata = _metadata(spec, spec.names.pvc, settings, COMPONENT_HOME)
    if spec.gpu is not None:
        metadata["labels"][LABEL_GPU_PROFILE] = spec.gpu.name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": pvc_spec,
    }


def render_service(spec: BoxSpec, settings: Settings, owned_by: Obj | None = None) -> Obj:
    """The box's SSH Service."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, spec.names.service, settings, COMPONENT_SSH, owned_by),
        "spec": {
            "type": settings.ssh.service_type,
            "selector": box_selector(spec.name),
            "ports": [
                {
                    "name": SSH_PORT_NAME,
                    "protocol": "TCP",
                    "port": SSH_SERVICE_PORT,
                    "targetPort": SSH_CONTAINER_PORT,
                }
            ],
        },
    }


def render_claim_template(
    spec: BoxSpec, settings: Settings, owned_by: Obj | None = None
) -> Obj | None:
    """The ResourceClaimTemplate of a DRA box, or None for any other box.

    One per box and never shared: Kubernetes makes a claim from it for each pod of the
    box, with the box's labels, and deletes that claim with the pod, so a stopped box
    holds no device.
    """
    gpu = spec.gpu
    if gpu is None or not gpu.is_dra:
        return None
    metadata = _metadata(spec, spec.names.claim_template, settings, COMPONENT_GPU, owned_by)
    choices = gpu.choices()
    request: dict[str, Any] = {"name": GPU_REQUEST}
    if len(choices) == 1:
        request["exactly"] = choices[0].device_request()
    else:
        request["firstAvailable"] = [
            {"name": choice_name(index), **choice.device_request()}
            for index, choice in enumerate(choices)
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata,
        "spec": {
            "metadata": {"labels": labels(spec.name, COMPONENT_GPU)},
            "spec": {"devices": {"requests": [request]}},
        },
    }


def _secret(
    spec: BoxSpec,
    settings: Settings,
    name: str,
    component: str,
    data: dict[str, str],
    owned_by: Obj | None,
) -> Obj:
    """A Secret of the box, written and never read back by the controller."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(spec, name, settings, component, owned_by, marked=False),
        "type": "Opaque",
        "stringData": data,
    }


def render_activity_secret(
    spec: BoxSpec, settings: Settings, credential: str, owned_by: Obj | None = None
) -> Obj:
    """The box's agent credential; write-only towards the controller's ingest route."""
    data = {ACTIVITY_CREDENTIAL_KEY: credential}
    return _secret(spec, settings, spec.names.activity_secret, COMPONENT_ACTIVITY, data, owned_by)


def render_deployment(
    spec: BoxSpec,
    settings: Settings,
    replicas: int = 1,
    *,
    made_by: CreateRequest | None = None,
    owner_groups: Sequence[str] | None = None,
) -> Obj:
    """The box's Deployment; its annotations pin the preset, the TTL and the GPU and
    image profiles, and record the create request and the owner's groups when given."""
    metadata = _metadata(spec, spec.names.deployment, settings, COMPONENT_WORKSPACE)
    # The pod carries the box's labels and its owner's marks too: the queue and the limits
    # count pods by person.
    template_metadata: dict[str, Any] = {"labels": dict(metadata["labels"])}
    pod_annotations = dict(metadata.get("annotations", {}))
    if spec.gpu is not None:
        pod_annotations[ANNOTATION_GPU_PROFILE] = spec.gpu.name
    if pod_annotations:
        template_metadata["annotations"] = pod_annotations
    template = {"metadata": template_metadata, "spec": pod_spec(spec, settings)}
    metadata["annotations"] = {
        **metadata.get("annotations", {}),
        **pin_annotations(spec, template),
        ANNOTATION_TEMPLATE: template_hash.record(template),
    }
    if replicas:
        asked = spec.expires_at - timedelta(hours=spec.ttl_hours)
        metadata["annotations"][ANNOTATION_WAITING_SINCE] = format_timestamp(asked)
    if made_by is not None:
        # In the same write as the box, so that no retry can see one without the other.
        metadata["annotations"][ANNOTATION_CREATE_REQUEST] = made_by.annotation()
    if owner_groups is not None:
        metadata["annotations"][ownership.ANNOTATION_OWNER_GROUPS] = ownership.groups_record(
            owner_groups
        )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            # One home volume (ReadWriteOnce) per box: the old pod must be gone before
            # the new one mounts it.
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": REVISION_HISTORY,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": box_selector(spec.name)},
            "template": template,
        },
    }
