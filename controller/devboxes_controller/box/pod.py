"""The pod of one box: its containers (the workspace, the release's sidecars, an image
profile's sidecar, the activity agent), their volumes, and where the pod may run.

Pure functions, like :mod:`.render`, which puts this spec into the box's Deployment.
"""

from __future__ import annotations

from typing import Any

from devboxes_sdk.models import API_PREFIX

from ..config.boxes import ACTIVITY_SIDECAR, ENVIRONMENT_SIDECAR, SSH_CONTAINER_PORT
from ..config.images import ImagePortConfig, ImageProfileConfig
from ..config.settings import Settings
from . import authorized_keys, host_key, stop_warning
from .naming import BOX_USER, GPU_CLAIM, MAIN_CONTAINER, QUEUE_GATE
from .spec import BoxSpec

SSH_PORT_NAME = "ssh"
# How long the workspace may take from its start to its sshd's first answer before the
# kubelet restarts it.
STARTUP_SECONDS = 900
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
# The kubelet mirrors the pod's stop notice annotation into this file of the main
# container, where devbox-stop-notices shows each new one in every open session.
STOP_NOTICE_VOLUME = "stop-notice"
STOP_NOTICE_PATH = "/run/devbox-notice"
STOP_NOTICE_FILE = "stop"
STOP_NOTICE_ENV = "DEVBOX_STOP_NOTICE"
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
    if _shows_stop_notices(settings):
        env.append(_env(STOP_NOTICE_ENV, f"{STOP_NOTICE_PATH}/{STOP_NOTICE_FILE}"))
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
            *(
                [{"name": STOP_NOTICE_VOLUME, "mountPath": STOP_NOTICE_PATH, "readOnly": True}]
                if _shows_stop_notices(settings)
                else []
            ),
        ],
        # Asked every second until sshd first answers: the kubelet then asks readiness at
        # once, so a box is ready within a second of its sshd, not at the next 5-second
        # readiness period. Generous, since a start may first clone a repository.
        "startupProbe": {
            "tcpSocket": {"port": SSH_CONTAINER_PORT},
            "periodSeconds": 1,
            "timeoutSeconds": 1,
            "failureThreshold": STARTUP_SECONDS,
        },
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


def _shows_stop_notices(settings: Settings) -> bool:
    return stop_warning.lead(settings) is not None


def _stop_notice_volume() -> dict[str, Any]:
    annotation = stop_warning.ANNOTATION_STOP_NOTICE
    return {
        "name": STOP_NOTICE_VOLUME,
        "downwardAPI": {
            "items": [
                {
                    "path": STOP_NOTICE_FILE,
                    "fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"},
                }
            ],
            "defaultMode": 0o444,
        },
    }


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


def pod_spec(spec: BoxSpec, settings: Settings) -> dict[str, Any]:
    """The pod template's spec: the containers, their volumes and where the pod may run."""
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
            *([_stop_notice_volume()] if _shows_stop_notices(settings) else []),
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
