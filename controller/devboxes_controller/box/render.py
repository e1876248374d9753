"""The Kubernetes objects of one box, as plain JSON-ready dicts.

Pure functions: no I/O, no clock, no Kubernetes client. Every field comes from a
:class:`BoxSpec` and the settings; clients never set a pod field. A box's GPU contract is
the profile pinned in its Deployment's snapshot annotation, so :func:`spec_from_deployment`
rebuilds a spec from that annotation and never from the live catalog; the same holds for
its image profile.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from devboxes_sdk.models import API_PREFIX, PRESETS, Preset

from ..config.settings import (
    ACTIVITY_SIDECAR,
    ENVIRONMENT_SIDECAR,
    SSH_CONTAINER_PORT,
    DeviceAlternative,
    GpuProfileConfig,
    ImagePortConfig,
    ImageProfileConfig,
    Settings,
    SnapshotError,
)
from ..k8s.timestamps import format_timestamp, parse_timestamp
from . import ownership, sshkeys

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
# Older ReplicaSets a box's Deployment keeps; each start of a stopped box makes one.
REVISION_HISTORY = 2
# Holds a box pod that asks for a device back from the scheduler until its turn in line.
QUEUE_GATE = "devboxes.io/queue"

_PRESET_BY_NAME: dict[str, Preset] = {preset: preset for preset in PRESETS}

MAIN_CONTAINER = "devbox"
# The name of a DRA box's claim in its pod, and of the one request in that claim; the
# allocation names a subrequest "gpu/<choice>" when the profile has alternatives.
GPU_CLAIM = "gpu"
GPU_REQUEST = "gpu"
SSH_PORT_NAME = "ssh"
SSH_SERVICE_PORT = 22
HOME_VOLUME = "home"
KEYS_VOLUME = "authorized-keys"
# The workspace entrypoint reads operator keys from /etc/devbox/authorized_keys.
KEYS_MOUNT_PATH = "/etc/devbox"
ACTIVITY_VOLUME = "activity-credential"
ACTIVITY_MOUNT_PATH = "/var/run/devbox-activity"
ACTIVITY_CREDENTIAL_KEY = "credential"
ACTIVITY_COMMAND = "devbox-activity-agent"
DEPLOYMENT_PREFIX = "devbox-"
# Where the main container's devbox-gpu-sampler writes GPU utilization for the agent,
# which has no GPU of its own.
GPU_SAMPLES_VOLUME = "gpu-samples"
GPU_SAMPLES_PATH = "/run/devbox-gpu-samples"
GPU_SAMPLES_ENV = "DEVBOX_GPU_SAMPLES"
# The workspace image's one login user (workspace/Dockerfile); its home is the box's volume.
BOX_USER = "dev"
HOME_MOUNT_PATH = f"/home/{BOX_USER}"

# What the workspace entrypoint and sshd need, and nothing more. The entrypoint runs as
# root: it creates the user and the groups of DEVBOX_GPU_SUPPLEMENTAL_GROUPS, writes
# /etc/group and /etc/gshadow and fixes ownership of the home volume; then sshd
# authenticates users and drops to them.
#   CHOWN        chown the home volume, ~/.ssh and each session's pty to the user
#   DAC_OVERRIDE root edits files it cannot otherwise write (/etc/gshadow is mode 0640)
#   FOWNER       chmod files on the home volume that the user owns
#   SETGID       groupadd/usermod and sshd's switch to the user's primary and GPU groups
#   SETUID       sshd's switch to the user and to its unprivileged helper
#   SYS_CHROOT   sshd's privilege-separation chroot
#   AUDIT_WRITE  sshd/PAM login records; without it logins fail
# All seven are in the Pod Security Standards "baseline" set.
CAPABILITIES_ADDED = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "SETGID",
    "SETUID",
    "SYS_CHROOT",
    "AUDIT_WRITE",
)


@dataclass(frozen=True)
class PinnedMain:
    """The main container's image and resources, fixed when the box is created."""

    image: str
    resources: dict[str, dict[str, str]]

    def to_json(self) -> str:
        return canonical_json({"image": self.image, "resources": self.resources})


@dataclass(frozen=True)
class BoxSpec:
    """Everything the objects of one box are rendered from."""

    name: str
    preset: Preset
    ttl_hours: int
    repository: str | None
    expires_at: datetime
    gpu: GpuProfileConfig | None
    # None for a new box: rendered from the settings, then pinned.
    pinned: PinnedMain | None = None
    image: ImageProfileConfig | None = None
    # The person the box belongs to; None for the operator's boxes.
    owner: str | None = None


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True)
class ObjectNames:
    deployment: str
    pvc: str
    service: str
    activity_secret: str
    claim_template: str


def object_names(box: str) -> ObjectNames:
    return ObjectNames(
        deployment=f"{DEPLOYMENT_PREFIX}{box}",
        pvc=f"devbox-{box}-home",
        service=f"devbox-{box}-ssh",
        activity_secret=f"devbox-{box}-activity",
        claim_template=f"devbox-{box}-gpu",
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


def _box_metadata(name: str, settings: Settings, box: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": settings.namespace, "labels": labels(box, component)}


def _metadata(spec: BoxSpec, name: str, settings: Settings, component: str) -> dict[str, Any]:
    """Name, namespace, the box's labels and its owner's marks."""
    metadata = _box_metadata(name, settings, spec.name, component)
    owner_labels, owner_annotations = ownership.marks(spec.owner)
    metadata["labels"].update(owner_labels)
    if owner_annotations:
        metadata["annotations"] = owner_annotations
    return metadata


def render_pvc(spec: BoxSpec, settings: Settings) -> dict[str, Any]:
    """The home volume. It has no owner: it outlives the box unless purged."""
    pvc_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.preset(spec.preset).storage}},
    }
    if settings.storage_class_name is not None:
        pvc_spec["storageClassName"] = settings.storage_class_name
    metadata = _metadata(spec, object_names(spec.name).pvc, settings, COMPONENT_HOME)
    if spec.gpu is not None:
        metadata["labels"][LABEL_GPU_PROFILE] = spec.gpu.name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": pvc_spec,
    }


def render_service(spec: BoxSpec, settings: Settings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, object_names(spec.name).service, settings, COMPONENT_SSH),
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


_CHOICE = "choice-"


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


def _device_request(choice: DeviceAlternative) -> dict[str, Any]:
    request: dict[str, Any] = {
        "deviceClassName": choice.device_class_name,
        "allocationMode": "ExactCount",
        "count": choice.count,
    }
    if choice.selectors:
        request["selectors"] = [{"cel": {"expression": e}} for e in choice.selectors]
    return request


def render_claim_template(spec: BoxSpec, settings: Settings) -> dict[str, Any] | None:
    """The ResourceClaimTemplate of a DRA box, or None for any other box.

    One per box and never shared: Kubernetes makes a claim from it for each pod of the
    box, with the box's labels, and deletes that claim with the pod, so a stopped box
    holds no device.
    """
    gpu = spec.gpu
    if gpu is None or not gpu.is_dra:
        return None
    choices = gpu.choices()
    request: dict[str, Any] = {"name": GPU_REQUEST}
    if len(choices) == 1:
        request["exactly"] = _device_request(choices[0])
    else:
        request["firstAvailable"] = [
            {"name": choice_name(index), **_device_request(choice)}
            for index, choice in enumerate(choices)
        ]
    name = object_names(spec.name).claim_template
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": _metadata(spec, name, settings, COMPONENT_GPU),
        "spec": {
            "metadata": {"labels": labels(spec.name, COMPONENT_GPU)},
            "spec": {"devices": {"requests": [request]}},
        },
    }


def _container_security() -> dict[str, Any]:
    return {
        "privileged": False,
        # The workspace contract gives the user sudo, a setuid program, and
        # allowPrivilegeEscalation: false (no_new_privs) would make it fail. Escalation
        # stays inside the capability bounding set above: sudo can never regain a
        # dropped capability, and the container can never become privileged.
        "allowPrivilegeEscalation": True,
        "capabilities": {"drop": ["ALL"], "add": list(CAPABILITIES_ADDED)},
    }


def _env(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def _main_container(spec: BoxSpec, settings: Settings) -> dict[str, Any]:
    preset = settings.preset(spec.preset)
    requests: dict[str, str] = {"cpu": preset.cpu, "memory": preset.memory_request}
    limits: dict[str, str] = {"memory": preset.memory_limit}
    if spec.pinned is not None:
        requests = dict(spec.pinned.resources.get("requests") or {})
        limits = dict(spec.pinned.resources.get("limits") or {})
    env = [_env("DEVBOX_NAME", spec.name)]
    if spec.repository:
        env.append(_env("DEVBOX_REPOSITORY", spec.repository))
    image = settings.workspace_image
    gpu = spec.gpu
    if gpu is not None:
        env.append(_env("DEVBOX_GPU_PROFILE", gpu.name))
        if gpu.resource_name is not None:
            # Extended resources cannot be overcommitted: Kubernetes requires the request
            # to equal the limit.
            requests[gpu.resource_name] = str(gpu.count)
            limits[gpu.resource_name] = str(gpu.count)
            env.append(_env("DEVBOX_GPU_RESOURCE", gpu.resource_name))
        env.append(_env("DEVBOX_GPU_COUNT", str(gpu.count)))
        if gpu.supplemental_groups:
            groups = ",".join(str(group) for group in gpu.supplemental_groups)
            env.append(_env("DEVBOX_GPU_SUPPLEMENTAL_GROUPS", groups))
        if _samples_gpu(spec, settings):
            env.append(_env(GPU_SAMPLES_ENV, GPU_SAMPLES_PATH))
        image = gpu.workspace_image or image
    ports = [{"name": SSH_PORT_NAME, "containerPort": SSH_CONTAINER_PORT, "protocol": "TCP"}]
    workspace = spec.image if spec.image is not None and spec.image.mode == "workspace" else None
    if workspace is not None:
        # The operator listed this box's accelerator for the image, so it also replaces a
        # GPU profile's own workspace image.
        image = workspace.image
        ports += [_port(port) for port in workspace.ports]
    if spec.pinned is not None:
        image = spec.pinned.image
    resources: dict[str, Any] = {"requests": requests, "limits": limits}
    if gpu is not None and gpu.is_dra:
        # Only the main container: a sidecar never sees the box's devices.
        resources["claims"] = [{"name": GPU_CLAIM}]
    container: dict[str, Any] = {
        "name": MAIN_CONTAINER,
        "image": image,
        "ports": ports,
        "env": env,
        "resources": resources,
        "volumeMounts": [
            {"name": HOME_VOLUME, "mountPath": HOME_MOUNT_PATH},
            *(
                [{"name": KEYS_VOLUME, "mountPath": KEYS_MOUNT_PATH, "readOnly": True}]
                if _operator_keys(spec, settings)
                else []
            ),
            *(
                [{"name": sshkeys.VOLUME, "mountPath": sshkeys.MOUNT_PATH, "readOnly": True}]
                if ownership.person(spec.owner) is not None
                else []
            ),
            *(
                [{"name": GPU_SAMPLES_VOLUME, "mountPath": GPU_SAMPLES_PATH}]
                if _samples_gpu(spec, settings)
                else []
            ),
        ],
        "readinessProbe": {
            "tcpSocket": {"port": SSH_CONTAINER_PORT},
            "periodSeconds": 5,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "securityContext": _container_security(),
    }
    if workspace is not None:
        container["imagePullPolicy"] = workspace.pull_policy
    return container


def _port(port: ImagePortConfig) -> dict[str, Any]:
    return {"name": port.name, "containerPort": port.container_port, "protocol": port.protocol}


def _environment_container(profile: ImageProfileConfig) -> dict[str, Any]:
    """A sidecar image profile: beside the workspace in the pod's network, as a non-root
    user with no capabilities, within its bounded resources, and with no volume, Secret,
    credential or device of the box."""
    security: dict[str, Any] = {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    if profile.run_as_user is not None:
        security["runAsUser"] = profile.run_as_user
    container: dict[str, Any] = {
        "name": ENVIRONMENT_SIDECAR,
        "image": profile.image,
        "imagePullPolicy": profile.pull_policy,
    }
    if profile.command:
        container["command"] = list(profile.command)
    if profile.args:
        container["args"] = list(profile.args)
    if profile.ports:
        container["ports"] = [_port(port) for port in profile.ports]
    if profile.resources is not None:
        container["resources"] = profile.resources.to_kubernetes()
    container["securityContext"] = security
    return container


def _sidecar_containers(settings: Settings) -> list[dict[str, Any]]:
    containers = []
    for sidecar in settings.sidecars:
        # Never a profile's image and never the accelerator: a sidecar is the same in
        # every box of the release.
        container: dict[str, Any] = {
            "name": sidecar.name,
            "image": sidecar.image or settings.workspace_image,
        }
        if sidecar.command:
            container["command"] = list(sidecar.command)
        if sidecar.args:
            container["args"] = list(sidecar.args)
        if sidecar.env:
            container["env"] = [_env(name, value) for name, value in sidecar.env.items()]
        container["securityContext"] = _container_security()
        containers.append(container)
    return containers


def _reports_activity(spec: BoxSpec, settings: Settings) -> bool:
    """Only boxes that idleness may stop run the agent; the others need no credential."""
    window = settings.idle.window(spec.gpu.name if spec.gpu else None)
    return window is not None and settings.idle.controller_url is not None


def _samples_gpu(spec: BoxSpec, settings: Settings) -> bool:
    """A GPU box with an agent: its main container samples the GPU for the agent."""
    return spec.gpu is not None and _reports_activity(spec, settings)


def _activity_container(spec: BoxSpec, settings: Settings) -> dict[str, Any]:
    # The release image, never the profile's, and never the accelerator: it only reads
    # the pod's sockets, asks Jupyter and reads the GPU samples of the main container.
    container: dict[str, Any] = {
        "name": ACTIVITY_SIDECAR,
        "image": settings.workspace_image,
        "command": [ACTIVITY_COMMAND],
        "env": [
            _env("DEVBOX_NAME", spec.name),
            _env(
                "DEVBOX_ACTIVITY_URL",
                f"{settings.idle.controller_url}{API_PREFIX}/devboxes/{spec.name}/activity",
            ),
            _env(
                "DEVBOX_ACTIVITY_CREDENTIAL_FILE",
                f"{ACTIVITY_MOUNT_PATH}/{ACTIVITY_CREDENTIAL_KEY}",
            ),
        ],
        "volumeMounts": [
            {"name": ACTIVITY_VOLUME, "mountPath": ACTIVITY_MOUNT_PATH, "readOnly": True}
        ],
        "securityContext": _container_security(),
    }
    # A Jupyter sidecar's token lets the agent ask that Jupyter which kernels are busy.
    token = next(
        (s.env["JUPYTER_TOKEN"] for s in settings.sidecars if "JUPYTER_TOKEN" in s.env), None
    )
    if token is not None:
        container["env"].append(_env("JUPYTER_TOKEN", token))
    if _samples_gpu(spec, settings):
        container["env"].append(_env(GPU_SAMPLES_ENV, GPU_SAMPLES_PATH))
        container["volumeMounts"].append(
            {"name": GPU_SAMPLES_VOLUME, "mountPath": GPU_SAMPLES_PATH, "readOnly": True}
        )
    return container


def _gpu_samples_volume() -> dict[str, Any]:
    # A few small files in memory; they go with the pod.
    return {"name": GPU_SAMPLES_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}


def _operator_keys(spec: BoxSpec, settings: Settings) -> bool:
    """The operator's keys open the operator's boxes only: a person's box trusts the keys
    that person added, so one leaked operator key does not open every box."""
    return bool(settings.ssh.authorized_keys_secret) and ownership.person(spec.owner) is None


def _person_keys_volume(owner: str) -> dict[str, Any]:
    # Optional: a person who has not added a key yet has no ConfigMap, and the box starts.
    return {
        "name": sshkeys.VOLUME,
        "configMap": {
            "name": sshkeys.config_map_name(owner),
            "items": [{"key": sshkeys.AUTHORIZED_KEYS, "path": sshkeys.AUTHORIZED_KEYS}],
            "defaultMode": 0o444,
            "optional": True,
        },
    }


def _activity_volume(spec: BoxSpec) -> dict[str, Any]:
    return {
        "name": ACTIVITY_VOLUME,
        # Optional: the Secret is written right after the Deployment (its credential
        # needs the Deployment's uid); the kubelet fills the mount in once it exists.
        "secret": {
            "secretName": object_names(spec.name).activity_secret,
            "optional": True,
            "defaultMode": 0o444,
        },
    }


def render_activity_secret(box: str, settings: Settings, credential: str) -> dict[str, Any]:
    """The box's agent credential; write-only towards the controller's ingest route."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _box_metadata(
            object_names(box).activity_secret, settings, box, COMPONENT_ACTIVITY
        ),
        "type": "Opaque",
        "stringData": {ACTIVITY_CREDENTIAL_KEY: credential},
    }


def _pod_spec(spec: BoxSpec, settings: Settings) -> dict[str, Any]:
    security: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": security,
        "containers": [
            _main_container(spec, settings),
            *_sidecar_containers(settings),
            *(
                [_environment_container(spec.image)]
                if spec.image is not None and spec.image.mode == "sidecar"
                else []
            ),
            *([_activity_container(spec, settings)] if _reports_activity(spec, settings) else []),
        ],
        "volumes": [
            {
                "name": HOME_VOLUME,
                "persistentVolumeClaim": {"claimName": object_names(spec.name).pvc},
            },
            *(
                [
                    {
                        "name": KEYS_VOLUME,
                        "secret": {
                            "secretName": settings.ssh.authorized_keys_secret,
                            "items": [{"key": "authorized_keys", "path": "authorized_keys"}],
                            "defaultMode": 0o444,
                        },
                    }
                ]
                if _operator_keys(spec, settings)
                else []
            ),
            *(
                [_person_keys_volume(owner)]
                if (owner := ownership.person(spec.owner)) is not None
                else []
            ),
            *([_activity_volume(spec)] if _reports_activity(spec, settings) else []),
            *([_gpu_samples_volume()] if _samples_gpu(spec, settings) else []),
        ],
    }
    gpu = spec.gpu
    if gpu is not None:
        if gpu.supplemental_groups:
            security["supplementalGroups"] = list(gpu.supplemental_groups)
        if gpu.runtime_class_name is not None:
            pod["runtimeClassName"] = gpu.runtime_class_name
        if gpu.node_selector:
            pod["nodeSelector"] = dict(gpu.node_selector)
        if gpu.tolerations:
            pod["tolerations"] = [t.to_kubernetes() for t in gpu.tolerations]
        # Only the leader's view of free devices lifts the gate: no view, no gate.
        if not gpu.is_dra and settings.counts_devices:
            pod["schedulingGates"] = [{"name": QUEUE_GATE}]
        if gpu.is_dra:
            pod["resourceClaims"] = [
                {
                    "name": GPU_CLAIM,
                    "resourceClaimTemplateName": object_names(spec.name).claim_template,
                }
            ]
    return pod


def template_parts(template: dict[str, Any]) -> dict[str, Any]:
    """A pod template cut into the parts a release change is reported by: each container,
    the volumes, and the rest of the pod."""
    pod = dict(template.get("spec") or {})
    parts: dict[str, Any] = {
        f"container:{c.get('name')}": c for c in pod.pop("containers", None) or []
    }
    parts["volumes"] = pod.pop("volumes", None) or []
    parts["pod"] = {"metadata": template.get("metadata") or {}, "spec": pod}
    return parts


def template_hashes(template: dict[str, Any]) -> dict[str, str]:
    return {
        part: hashlib.sha256(canonical_json(value).encode()).hexdigest()[:16]
        for part, value in template_parts(template).items()
    }


def _pinned_main(template: dict[str, Any]) -> PinnedMain:
    main = next(c for c in template["spec"]["containers"] if c["name"] == MAIN_CONTAINER)
    # A DRA box's claim follows its pinned profile, not these amounts.
    amounts = {kind: main["resources"][kind] for kind in ("requests", "limits")}
    return PinnedMain(image=main["image"], resources=amounts)


def _annotations(spec: BoxSpec) -> dict[str, str]:
    annotations = {
        ANNOTATION_PRESET: spec.preset,
        ANNOTATION_TTL_HOURS: str(spec.ttl_hours),
        ANNOTATION_EXPIRES_AT: format_timestamp(spec.expires_at),
    }
    if spec.repository:
        annotations[ANNOTATION_REPOSITORY] = spec.repository
    if spec.gpu is not None:
        annotations[ANNOTATION_GPU_SNAPSHOT] = spec.gpu.snapshot_json()
        annotations[ANNOTATION_GPU_PROFILE] = spec.gpu.name
        if spec.gpu.resource_name is not None:
            annotations[ANNOTATION_GPU_RESOURCE] = spec.gpu.resource_name
        if spec.gpu.device_class_name is not None:
            annotations[ANNOTATION_GPU_DEVICE_CLASS] = spec.gpu.device_class_name
        annotations[ANNOTATION_GPU_COUNT] = str(spec.gpu.count)
    if spec.image is not None:
        annotations[ANNOTATION_IMAGE_SNAPSHOT] = spec.image.snapshot_json()
        annotations[ANNOTATION_IMAGE_PROFILE] = spec.image.name
    return annotations


def render_deployment(spec: BoxSpec, settings: Settings, replicas: int = 1) -> dict[str, Any]:
    """The box's Deployment; its annotations pin the preset, the TTL and the GPU and
    image profiles."""
    # The pod carries its owner's marks too: the queue and the limits count pods by person.
    owner_labels, owner_annotations = ownership.marks(spec.owner)
    template_metadata: dict[str, Any] = {
        "labels": {**labels(spec.name, COMPONENT_WORKSPACE), **owner_labels}
    }
    pod_annotations = dict(owner_annotations)
    if spec.gpu is not None:
        pod_annotations[ANNOTATION_GPU_PROFILE] = spec.gpu.name
    if pod_annotations:
        template_metadata["annotations"] = pod_annotations
    metadata = _metadata(spec, object_names(spec.name).deployment, settings, COMPONENT_WORKSPACE)
    template = {"metadata": template_metadata, "spec": _pod_spec(spec, settings)}
    metadata["annotations"] = {
        **metadata.get("annotations", {}),
        **_annotations(spec),
        ANNOTATION_PINNED_MAIN: _pinned_main(template).to_json(),
        ANNOTATION_TEMPLATE: canonical_json(template_hashes(template)),
    }
    if replicas:
        asked = spec.expires_at - timedelta(hours=spec.ttl_hours)
        metadata["annotations"][ANNOTATION_WAITING_SINCE] = format_timestamp(asked)
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


def spec_from_deployment(deployment: dict[str, Any]) -> BoxSpec:
    """Rebuild a box's spec from its Deployment's annotations, the pinned contract.

    Used on start and on repair, so that catalog edits, a removed profile or GPU or image
    profiles being disabled never change an existing box. SnapshotError when an annotation
    is missing or unreadable.
    """
    metadata = deployment.get("metadata") or {}
    name = box_name_of(deployment)
    if name is None:
        raise SnapshotError(f"Deployment {metadata.get('name')!r} has no {LABEL_BOX} label")
    annotations: dict[str, Any] = metadata.get("annotations") or {}

    def required(key: str) -> str:
        value = annotations.get(key)
        if not isinstance(value, str) or not value:
            raise SnapshotError(f"box {name!r}: the {key} annotation is missing")
        return value

    preset_text = required(ANNOTATION_PRESET)
    preset = _PRESET_BY_NAME.get(preset_text)
    if preset is None:
        raise SnapshotError(
            f"box {name!r}: {ANNOTATION_PRESET} is {preset_text!r}, not one of {', '.join(PRESETS)}"
        )
    ttl_text = required(ANNOTATION_TTL_HOURS)
    if not (ttl_text.isascii() and ttl_text.isdigit()) or int(ttl_text) < 1:
        raise SnapshotError(
            f"box {name!r}: {ANNOTATION_TTL_HOURS} is {ttl_text!r}, not a whole number of hours"
        )
    expires_text = required(ANNOTATION_EXPIRES_AT)
    try:
        expires_at = parse_timestamp(expires_text)
    except ValueError:
        raise SnapshotError(
            f"box {name!r}: {ANNOTATION_EXPIRES_AT} is {expires_text!r}, not an RFC 3339 time"
        ) from None
    gpu = None
    snapshot = annotations.get(ANNOTATION_GPU_SNAPSHOT)
    if snapshot is not None:
        try:
            gpu = GpuProfileConfig.from_snapshot(snapshot)
        except SnapshotError as exc:
            raise SnapshotError(f"box {name!r}: {exc}") from None
    image = None
    image_snapshot = annotations.get(ANNOTATION_IMAGE_SNAPSHOT)
    if image_snapshot is not None:
        try:
            image = ImageProfileConfig.from_snapshot(image_snapshot)
        except SnapshotError as exc:
            raise SnapshotError(f"box {name!r}: {exc}") from None
    repository = annotations.get(ANNOTATION_REPOSITORY)
    pinned_text = annotations.get(ANNOTATION_PINNED_MAIN)
    owner = ownership.owner_of(deployment)
    return BoxSpec(
        name=name,
        preset=preset,
        ttl_hours=int(ttl_text),
        repository=repository if isinstance(repository, str) and repository else None,
        expires_at=expires_at,
        gpu=gpu,
        pinned=None if pinned_text is None else _read_pinned(name, pinned_text),
        image=image,
        owner=ownership.person(owner),
    )


def _read_pinned(box: str, text: str) -> PinnedMain:
    problem = f"box {box!r}: {ANNOTATION_PINNED_MAIN} is not an image and resources record"
    try:
        data = json.loads(text)
    except ValueError:
        raise SnapshotError(problem) from None
    image = data.get("image") if isinstance(data, dict) else None
    resources = data.get("resources") if isinstance(data, dict) else None
    if not isinstance(image, str) or not image or not isinstance(resources, dict):
        raise SnapshotError(problem)
    for kind, values in resources.items():
        if kind not in ("requests", "limits") or not isinstance(values, dict):
            raise SnapshotError(problem)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
            raise SnapshotError(problem)
    return PinnedMain(image=image, resources=resources)


def pinned_from_template(deployment: dict[str, Any]) -> PinnedMain | None:
    """The main container's image and resources as deployed, for a box created before
    they were pinned in an annotation."""
    template = (deployment.get("spec") or {}).get("template") or {}
    for container in (template.get("spec") or {}).get("containers") or []:
        if container.get("name") == MAIN_CONTAINER and container.get("image"):
            resources = container.get("resources") or {}
            return PinnedMain(
                image=str(container["image"]),
                resources={
                    kind: {str(k): str(v) for k, v in (resources.get(kind) or {}).items()}
                    for kind in ("requests", "limits")
                },
            )
    return None


def gated(pod: dict[str, Any]) -> bool:
    """Whether the pod is still held back by the line's scheduling gate."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == QUEUE_GATE for gate in gates)
