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

from devboxes_sdk.models import API_PREFIX

from ..config.boxes import ACTIVITY_SIDECAR, ENVIRONMENT_SIDECAR, SSH_CONTAINER_PORT
from ..config.gpu import DeviceAlternative
from ..config.images import ImagePortConfig, ImageProfileConfig
from ..config.settings import Settings
from ..k8s.kube import Obj
from ..k8s.timestamps import format_timestamp
from . import authorized_keys, host_key, ownership, template_hash
from .idempotency import ANNOTATION_CREATE_REQUEST, CreateRequest
from .naming import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_GPU_COUNT,
    ANNOTATION_GPU_DEVICE_CLASS,
    ANNOTATION_GPU_PROFILE,
    ANNOTATION_GPU_RESOURCE,
    ANNOTATION_GPU_SNAPSHOT,
    ANNOTATION_HOST_KEY,
    ANNOTATION_IMAGE_PROFILE,
    ANNOTATION_IMAGE_SNAPSHOT,
    ANNOTATION_PINNED_MAIN,
    ANNOTATION_PRESET,
    ANNOTATION_REPOSITORY,
    ANNOTATION_TEMPLATE,
    ANNOTATION_TTL_HOURS,
    ANNOTATION_WAITING_SINCE,
    BOX_USER,
    COMPONENT_ACTIVITY,
    COMPONENT_GPU,
    COMPONENT_HOME,
    COMPONENT_SSH,
    COMPONENT_WORKSPACE,
    GPU_CLAIM,
    GPU_REQUEST,
    LABEL_GPU_PROFILE,
    MAIN_CONTAINER,
    QUEUE_GATE,
    box_selector,
    choice_name,
    labels,
)
from .spec import BoxSpec, PinnedMain

# Older ReplicaSets a box's Deployment keeps; each start of a stopped box makes one.
REVISION_HISTORY = 2
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
# Where the main container's devbox-gpu-sampler writes GPU utilization for the agent,
# which has no GPU of its own.
GPU_SAMPLES_VOLUME = "gpu-samples"
GPU_SAMPLES_PATH = "/run/devbox-gpu-samples"
GPU_SAMPLES_ENV = "DEVBOX_GPU_SAMPLES"
# The folder of the home a sidecar serves, which the box's entrypoint makes its person's.
SERVED_FOLDER_ENV = "DEVBOX_SERVED_FOLDER"
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
        claim_template=render_claim_template(spec, settings, owned_by),
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


def _device_request(choice: DeviceAlternative) -> dict[str, Any]:
    request: dict[str, Any] = {
        "deviceClassName": choice.device_class_name,
        "allocationMode": "ExactCount",
        "count": choice.count,
    }
    if choice.selectors:
        request["selectors"] = [{"cel": {"expression": e}} for e in choice.selectors]
    return request


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
    choices = gpu.choices()
    request: dict[str, Any] = {"name": GPU_REQUEST}
    if len(choices) == 1:
        request["exactly"] = _device_request(choices[0])
    else:
        request["firstAvailable"] = [
            {"name": choice_name(index), **_device_request(choice)}
            for index, choice in enumerate(choices)
        ]
    name = spec.names.claim_template
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": _metadata(spec, name, settings, COMPONENT_GPU, owned_by),
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
    served = spec.image.home_folder if spec.image is not None else None
    if served is not None:
        # The kubelet makes a missing folder for the sidecar's mount as root; the box's
        # entrypoint makes it its person's.
        env.append(_env(SERVED_FOLDER_ENV, served.path))
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
                [
                    {
                        "name": authorized_keys.VOLUME,
                        "mountPath": authorized_keys.MOUNT_PATH,
                        "readOnly": True,
                    }
                ]
                if spec.person is not None
                else []
            ),
            *(
                [{"name": GPU_SAMPLES_VOLUME, "mountPath": GPU_SAMPLES_PATH}]
                if _samples_gpu(spec, settings)
                else []
            ),
            *([host_key.mount()] if spec.host_key is not None else []),
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
    user with no capabilities, within its bounded resources, and with no Secret,
    credential or device of the box; of its home volume, only the folder the profile
    serves, read-only."""
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
    if profile.home_folder is not None:
        container["volumeMounts"] = [
            {
                "name": HOME_VOLUME,
                "mountPath": profile.home_folder.mount_path,
                "subPath": profile.home_folder.path,
                "readOnly": True,
            }
        ]
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
    return bool(settings.ssh.authorized_keys_secret) and spec.person is None


def _person_keys_volume(owner: str) -> dict[str, Any]:
    # Optional: a person who has not added a key yet has no ConfigMap, and the box starts.
    return {
        "name": authorized_keys.VOLUME,
        "configMap": {
            "name": authorized_keys.config_map_name(owner),
            "items": [
                {"key": authorized_keys.AUTHORIZED_KEYS, "path": authorized_keys.AUTHORIZED_KEYS}
            ],
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
            "secretName": spec.names.activity_secret,
            "optional": True,
            "defaultMode": 0o444,
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
                "persistentVolumeClaim": {"claimName": spec.names.pvc},
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
            *([_person_keys_volume(owner)] if (owner := spec.person) is not None else []),
            *([_activity_volume(spec)] if _reports_activity(spec, settings) else []),
            *([_gpu_samples_volume()] if _samples_gpu(spec, settings) else []),
            *([host_key.volume(spec.names.host_key_secret)] if spec.host_key is not None else []),
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
                    "resourceClaimTemplateName": spec.names.claim_template,
                }
            ]
    return pod


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
    if spec.host_key is not None:
        annotations[ANNOTATION_HOST_KEY] = spec.host_key
    return annotations


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
    template = {"metadata": template_metadata, "spec": _pod_spec(spec, settings)}
    metadata["annotations"] = {
        **metadata.get("annotations", {}),
        **_annotations(spec),
        ANNOTATION_PINNED_MAIN: _pinned_main(template).to_json(),
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
