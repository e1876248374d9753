"""The ``images`` block: the image catalog, images the operator approved that people pick
by name, each run as the box's workspace or as a sidecar beside it, and how a create's
image profile resolves to one (docs/controller.md, "Image profiles").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from devboxes_sdk.models import (
    ImageAllocation,
    ImageCapabilities,
    ImageMode,
    ImagePort,
    ImageProfile,
)

from .base import GroupId, Model, entry_name, lookup
from .boxes import SSH_CONTAINER_PORT
from .catalog import (
    CPU_ACCELERATOR,
    MAX_PROFILES,
    PROFILE_NAME_SCHEMA,
    Description,
    DisplayName,
    check_profile_name,
    read_snapshot,
    repeated_names,
    snapshot_of,
)
from .formats import PinnedImage, PortName, Quantity, is_quantity, quantity_value
from .gpu import GpuProfileConfig
from .violations import Violation, fail, repeats

MAX_IMAGE_PROFILES = 32
MAX_IMAGE_PORTS = 8
MAX_COMMAND_ITEMS = 8
MAX_ARGS_ITEMS = 16
MAX_ARGUMENT_LENGTH = 128
# Unprivileged ports only: image profile containers never bind below 1024.
MIN_IMAGE_PORT = 1024


class ImageRejected(Exception):
    """A create asked for an image profile that cannot be used; the message suits a 422."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _check_port_number(value: int) -> int:
    if not MIN_IMAGE_PORT <= value <= 65535:
        raise fail(f"must be between {MIN_IMAGE_PORT} and 65535, got {value}")
    if value == SSH_CONTAINER_PORT:
        raise fail(f"{SSH_CONTAINER_PORT} is the port of the box's SSH server")
    return value


class ImagePortConfig(Model):
    name: PortName = Field(
        json_schema_extra={"not": {"const": "ssh"}, "description": "'ssh' is the SSH port."}
    )
    container_port: Annotated[
        StrictInt,
        AfterValidator(_check_port_number),
        WithJsonSchema(
            {
                "type": "integer",
                "minimum": MIN_IMAGE_PORT,
                "maximum": 65535,
                "not": {"const": SSH_CONTAINER_PORT},
            }
        ),
    ]
    protocol: Literal["TCP", "UDP"] = "TCP"

    @field_validator("name")
    @classmethod
    def _not_ssh(cls, value: str) -> str:
        if value == "ssh":
            raise fail("'ssh' is the name of the box's SSH port; pick another one")
        return value

    def to_wire(self) -> ImagePort:
        return ImagePort(name=self.name, container_port=self.container_port, protocol=self.protocol)


class ImageResources(Model):
    """The bounded requests and limits of a sidecar-mode image profile's container."""

    cpu_request: Quantity
    memory_request: Quantity
    cpu_limit: Quantity
    memory_limit: Quantity

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = []
        for kind in ("cpu", "memory"):
            request = lookup(raw, f"{kind}_request")
            limit = lookup(raw, f"{kind}_limit")
            if (
                is_quantity(request)
                and is_quantity(limit)
                and quantity_value(request) > quantity_value(limit)
            ):
                found.append(
                    ((f"{kind}Request",), f"{request} must not exceed {kind}Limit ({limit})")
                )
        return found

    def to_kubernetes(self) -> dict[str, dict[str, str]]:
        return {
            "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
            "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit},
        }


_FOLDER = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_HOME_FOLDER_PATTERN = rf"^{_FOLDER}$"
_MOUNT_PATH_PATTERN = rf"^(/{_FOLDER})+$"
MAX_PATH_LENGTH = 200
# A folder directly in the box's home: one name, never a path out of it.
HomeFolderPath = Annotated[
    StrictStr,
    Field(max_length=MAX_PATH_LENGTH, pattern=_HOME_FOLDER_PATTERN),
]
MountPath = Annotated[StrictStr, Field(max_length=MAX_PATH_LENGTH, pattern=_MOUNT_PATH_PATTERN)]


class HomeFolderConfig(Model):
    """A folder of the box's home volume a sidecar serves: mounted read-only at
    ``mountPath`` in the sidecar, and made by the box, as its person's, at ``path`` under
    the home. What the person writes there, the sidecar shows; nothing else of the home
    is in the sidecar."""

    path: HomeFolderPath
    mount_path: MountPath


Argument = Annotated[StrictStr, Field(max_length=MAX_ARGUMENT_LENGTH)]
_WORKSPACE: JsonDict = {"properties": {"mode": {"const": "workspace"}}, "required": ["mode"]}
# Fields only a sidecar-mode profile may set; a workspace image keeps the workspace contract.
# Each with the JSON Schema of "set": null and empty lists count as unset.
_SIDECAR_ONLY: dict[str, JsonDict] = {
    "resources": {"type": "object"},
    "run_as_user": {"type": "integer"},
    "command": {"type": "array", "minItems": 1},
    "args": {"type": "array", "minItems": 1},
    "home_folder": {"type": "object"},
}


class ImageProfileConfig(Model):
    # _rules, as JSON Schema.
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "description": "A workspace profile names the accelerators it runs with "
                    "and sets none of the sidecar fields.",
                    "if": _WORKSPACE,
                    "then": {
                        "required": ["accelerators"],
                        "properties": {"accelerators": {"type": "array", "minItems": 1}},
                        "not": {
                            "anyOf": [
                                {"required": [to_camel(key)], "properties": {to_camel(key): set_}}
                                for key, set_ in _SIDECAR_ONLY.items()
                            ]
                        },
                    },
                },
                {
                    "description": "A sidecar profile has bounded resources and runs beside "
                    "any accelerator.",
                    "if": {"not": _WORKSPACE},
                    "then": {
                        "required": ["resources"],
                        "properties": {
                            "resources": {"type": "object"},
                            "accelerators": {"maxItems": 0},
                        },
                    },
                },
            ]
        }
    )

    name: Annotated[StrictStr, AfterValidator(check_profile_name), PROFILE_NAME_SCHEMA]
    display_name: DisplayName
    description: Description | None = None
    image: PinnedImage
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    mode: ImageMode = "sidecar"
    # Workspace mode: GPU profile names, and "cpu" for boxes without a GPU.
    accelerators: list[Annotated[StrictStr, PROFILE_NAME_SCHEMA]] = Field(
        default_factory=list, max_length=MAX_PROFILES + 1, json_schema_extra={"uniqueItems": True}
    )
    ports: list[ImagePortConfig] = Field(default_factory=list, max_length=MAX_IMAGE_PORTS)
    resources: ImageResources | None = None
    run_as_user: GroupId | None = None
    command: list[Argument] = Field(default_factory=list, max_length=MAX_COMMAND_ITEMS)
    args: list[Argument] = Field(default_factory=list, max_length=MAX_ARGS_ITEMS)
    home_folder: HomeFolderConfig | None = None

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = []
        mode = lookup(raw, "mode") or "sidecar"
        accelerators = lookup(raw, "accelerators")
        if mode == "workspace":
            if not accelerators:
                found.append(
                    (
                        ("accelerators",),
                        "a workspace profile names the accelerators its image runs with: GPU "
                        f"profile names and/or {CPU_ACCELERATOR!r}",
                    )
                )
            found += [
                (
                    (to_camel(key),),
                    "only a sidecar profile may set this; a workspace image runs as the "
                    "box's main container, with its entrypoint, user and preset",
                )
                for key in _SIDECAR_ONLY
                if lookup(raw, key) not in (None, [])
            ]
        elif mode == "sidecar":
            if lookup(raw, "resources") is None:
                found.append(
                    (("resources",), "a sidecar profile needs cpu and memory requests and limits")
                )
            if accelerators:
                found.append(
                    (
                        ("accelerators",),
                        "only a workspace profile names accelerators; a sidecar runs beside any "
                        "box and never receives its GPU",
                    )
                )
        found += [
            (
                ("accelerators", index),
                f"{value!r} is listed more than once (also accelerators[{first}])",
            )
            for index, first, value in repeats(accelerators, _text)
        ]
        ports = lookup(raw, "ports")
        found += [
            (
                ("ports", index, "name"),
                f"port name {name!r} is used more than once (also ports[{first}])",
            )
            for index, first, name in repeats(ports, entry_name)
        ]
        found += [
            (
                ("ports", index, "containerPort"),
                f"{key[1]} port {key[0]} is declared more than once (also ports[{first}])",
            )
            for index, first, key in repeats(ports, _port_key)
        ]
        return found

    def runs_with(self, gpu: GpuProfileConfig | None) -> bool:
        """Whether a workspace image supports this accelerator; a sidecar runs with any."""
        if self.mode == "sidecar":
            return True
        return (gpu.name if gpu is not None else CPU_ACCELERATOR) in self.accelerators

    def snapshot_json(self) -> str:
        """The full profile as canonical JSON, like :meth:`GpuProfileConfig.snapshot_json`;
        at most ``SNAPSHOT_MAX_BYTES`` bytes for any valid profile."""
        return snapshot_of(self)

    @classmethod
    def from_snapshot(cls, text: str) -> Self:
        """Read back a snapshot written by :meth:`snapshot_json`."""
        return read_snapshot(cls, text, "image profile")

    def to_wire(self) -> ImageProfile:
        """The profile as discovery shows it: never the image, its pull policy or limits."""
        return ImageProfile(
            name=self.name,
            display_name=self.display_name,
            description=self.description,
            mode=self.mode,
            ports=[port.to_wire() for port in self.ports],
            home_folder=self.home_folder.path if self.home_folder is not None else None,
        )

    def allocation(self) -> ImageAllocation:
        """The image profile pinned to a box, as the Devbox body reports it."""
        return ImageAllocation(
            profile=self.name,
            display_name=self.display_name,
            mode=self.mode,
            ports=[port.to_wire() for port in self.ports],
            home_folder=self.home_folder.path if self.home_folder is not None else None,
        )


def _port_key(entry: object) -> tuple[object, object] | None:
    """A raw port entry's number and protocol, which must be unique within a profile."""
    if not isinstance(entry, Mapping):
        return None
    number = lookup(entry, "container_port")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    return number, lookup(entry, "protocol") or "TCP"


class ImageSettings(Model):
    # The rule of _rules that JSON Schema can express: enabled needs a profile.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"enabled": {"const": True}}, "required": ["enabled"]},
            "then": {
                "description": "Enabled needs at least one profile.",
                "required": ["profiles"],
                "properties": {"profiles": {"minItems": 1}},
            },
        }
    )

    enabled: StrictBool = False
    profiles: list[ImageProfileConfig] = Field(default_factory=list, max_length=MAX_IMAGE_PROFILES)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        profiles = lookup(raw, "profiles")
        found = repeated_names(profiles, "image profile")
        if lookup(raw, "enabled") is True and isinstance(profiles, list | None) and not profiles:
            found.append((("profiles",), "enabled: true needs at least one profile"))
        return found

    def profile(self, name: str) -> ImageProfileConfig | None:
        return next((p for p in self.profiles if p.name == name), None)

    def resolve(self, name: str | None, gpu: GpuProfileConfig | None) -> ImageProfileConfig | None:
        """The image profile a create gets, or None; ImageRejected otherwise."""
        if name is None:
            return None
        if not self.enabled:
            raise ImageRejected("image profiles are disabled by the operator")
        profile = self.profile(name)
        if profile is None:
            available = ", ".join(p.name for p in self.profiles)
            raise ImageRejected(
                f"unknown image profile {name!r}; available image profiles: {available}"
            )
        if not profile.runs_with(gpu):
            box = f"GPU profile {gpu.name!r}" if gpu is not None else "a box without a GPU"
            supported = ", ".join(profile.accelerators)
            raise ImageRejected(
                f"image profile {name!r} does not support {box}; it runs with: {supported}"
            )
        return profile

    def capabilities(self) -> ImageCapabilities:
        """Discovery: what each profile is and serves, never which image it runs."""
        if not self.enabled:
            return ImageCapabilities(enabled=False, profiles=[])
        return ImageCapabilities(enabled=True, profiles=[p.to_wire() for p in self.profiles])
