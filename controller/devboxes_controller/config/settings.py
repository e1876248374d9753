"""The controller's settings: the ``controller`` and ``gpu`` blocks of the Helm values.

Settings fail closed. Every GPU catalog rule (docs/controller.md, "GPU profiles") is
checked at start-up and every violation is reported at once, as ``path: message`` with
the key names an operator writes in the values file, so a bad rollout never becomes
Ready. Value formats are in :mod:`.formats`, the wording of violations in
:mod:`.violations` and reading files in :mod:`.loading`.

Two kinds of rules exist. Per-field rules (formats, ranges, unknown keys) are pydantic
validators, which already collect every failure. Rules that relate several values
(unique names, the default profile, toleration operator and value, ...) are written once
as ``_rules`` on each model and run twice: as a model validator, so that a model built
in code is always consistent, and over the raw input by :func:`settings_from_mapping`,
so that they are reported even when an unrelated field of the same model is invalid.

Where a validator is a function, the type also carries the JSON Schema of what it checks,
and a model states as JSON Schema those of its rules that JSON Schema can express: the
chart's values schema is generated from these models (:mod:`.chart_schema`).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Self, TypeVar, get_args, get_origin

import httpx
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from devboxes_sdk.models import (
    PRESETS,
    Capabilities,
    GpuAllocation,
    GpuCapabilities,
    GpuProfile,
    GpuRequest,
    ImageAllocation,
    ImageCapabilities,
    ImageMode,
    ImagePort,
    ImageProfile,
    Preset,
)

from .cel import MAX_SELECTOR_LENGTH, selector_problem
from .formats import (
    DnsLabel,
    DnsSubdomain,
    EnvName,
    Host,
    HttpUrl,
    Image,
    LabelKey,
    LabelValue,
    PinnedImage,
    PortName,
    Quantity,
    ResourceName,
    UrlWithoutCredentials,
    is_quantity,
    quantity_value,
)
from .violations import (
    RULE_ERROR,
    Loc,
    Violation,
    config_error,
    describe,
    fail,
    is_model,
    join,
    path,
    repeats,
    rules_failed,
    show,
    unwrap,
)

MAX_PROFILES = 32
MAX_SUPPLEMENTAL_GROUPS = 8
MAX_NODE_SELECTOR = 16
MAX_TOLERATIONS = 16
MAX_SIDECARS = 8
MAX_IDLE_MINUTES = 7 * 24 * 60
MAX_READ_SECONDS = 300
# About the most files a Linux process may open (fs.nr_open, 1,048,576 by default).
MAX_CONNECTIONS = 1_000_000
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 256
# The sidecar that reports a box's activity; never a name in the settings' sidecars.
ACTIVITY_SIDECAR = "activity"
# The container of a sidecar-mode image profile; never a name in the settings' sidecars.
ENVIRONMENT_SIDECAR = "environment"
# In an image profile's accelerators: boxes without a GPU.
CPU_ACCELERATOR = "cpu"
MAX_IMAGE_PROFILES = 32
MAX_IMAGE_PORTS = 8
MAX_COMMAND_ITEMS = 8
MAX_ARGS_ITEMS = 16
MAX_ARGUMENT_LENGTH = 128
# Unprivileged ports only: image profile containers never bind below 1024.
MIN_IMAGE_PORT = 1024
# The workspace's SSH server listens here in every box.
SSH_CONTAINER_PORT = 2222
MAX_GPU_COUNT = 64
MAX_SELECTORS = 4
# Kubernetes allows 8 subrequests in a firstAvailable list; fewer keep the largest
# snapshot within SNAPSHOT_MAX_BYTES.
MAX_ALTERNATIVES = 3
MAX_DISPLAY_NAME = 80
MAX_DESCRIPTION = 160
MAX_GROUP_ID = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


# Upper bound, in bytes, of GpuProfileConfig.snapshot_json() for any profile that passes
# validation. Every field of a profile is bounded, so the largest legal profile (every
# list full, every string at its length limit and made of characters that JSON escapes to
# the most bytes) is under 48 KiB; tests build the largest of each kind and check it fits.
# Kubernetes allows 256 KiB for all annotations of an object together.
# The same bound holds for ImageProfileConfig.snapshot_json(), whose largest legal profile
# is about 45 KiB (its command and arguments).
SNAPSHOT_MAX_BYTES = 64 * 1024

_PROFILE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
# The default profile and the idle windows name profiles too. Their values are checked
# against the configured profiles, so only the schema checks their format.
_PROFILE_NAME_SCHEMA = WithJsonSchema({"type": "string", "pattern": _PROFILE_NAME_RE.pattern})
_GPU_PROFILE_NAME_SCHEMA = WithJsonSchema(
    {"type": "string", "pattern": _PROFILE_NAME_RE.pattern, "not": {"const": CPU_ACCELERATOR}}
)


class ProfileRejected(Exception):
    """A create asked for a GPU profile that cannot be used; the message suits a 422.

    ``field`` is the part of the GPU request refused: ``("profile",)`` for a profile
    that is not on offer, ``()`` when no GPU can be had at all.
    """

    def __init__(self, message: str, field: tuple[str, ...] = ()) -> None:
        self.message = message
        self.field = field
        super().__init__(message)


class ImageRejected(Exception):
    """A create asked for an image profile that cannot be used; the message suits a 422."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class SnapshotError(ValueError):
    """A pinned profile snapshot or box annotation cannot be read back."""


# --- per-field checks --------------------------------------------------------------------


def _whole_number(value: object) -> object:
    """Integers, and numbers like 2.0 that JSON Schema and Helm treat as the integer 2."""
    shown = json.dumps(value) if isinstance(value, bool | int | float) else repr(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(f"must be an integer, got {shown}")
    if isinstance(value, float):
        if not value.is_integer():
            raise fail(f"must be an integer, got {shown}")
        return int(value)
    return value


def _int_range(low: int, high: int) -> Callable[[int], int]:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise fail(f"must be between {low} and {high}, got {value}")
        return value

    return check


def _check_group(value: int) -> int:
    if value == 0:
        raise fail("group 0 (root) is never allowed as a supplemental group")
    if not 1 <= value <= MAX_GROUP_ID:
        raise fail(f"a group id must be between 1 and {MAX_GROUP_ID}, got {value}")
    return value


def _check_profile_name(value: str) -> str:
    if not _PROFILE_NAME_RE.fullmatch(value):
        raise fail(
            f"{value!r} is not a valid profile name: 1-40 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit"
        )
    return value


def _check_gpu_profile_name(value: str) -> str:
    _check_profile_name(value)
    if value == CPU_ACCELERATOR:
        raise fail(
            f"{CPU_ACCELERATOR!r} is reserved for boxes without a GPU (image profiles' "
            "accelerators and the box list's profile filter name them so)"
        )
    return value


def _check_display_name(value: str) -> str:
    if not value.strip():
        raise fail("must not be empty or blank")
    if len(value) > MAX_DISPLAY_NAME:
        raise fail(f"at most {MAX_DISPLAY_NAME} characters are allowed, got {len(value)}")
    return value


def _check_description(value: str) -> str:
    if len(value) > MAX_DESCRIPTION:
        raise fail(f"at most {MAX_DESCRIPTION} characters are allowed, got {len(value)}")
    return value


def _check_selector(value: str) -> str:
    problem = selector_problem(value)
    if problem:
        raise fail(problem)
    return value


def _integers(low: int, high: int) -> WithJsonSchema:
    return WithJsonSchema({"type": "integer", "minimum": low, "maximum": high})


GroupId = Annotated[StrictInt, AfterValidator(_check_group), _integers(1, MAX_GROUP_ID)]
# A CEL expression over one published device; see :mod:`.cel` for the guard rule.
Selector = Annotated[
    StrictStr,
    AfterValidator(_check_selector),
    WithJsonSchema(
        {
            "type": "string",
            "description": "A CEL expression over `device`; reads of device.attributes or "
            "device.capacity entries are guarded by has() of the same path.",
            "minLength": 1,
            "maxLength": MAX_SELECTOR_LENGTH,
        }
    ),
]
GpuCount = Annotated[
    int,
    BeforeValidator(_whole_number),
    AfterValidator(_int_range(1, MAX_GPU_COUNT)),
    _integers(1, MAX_GPU_COUNT),
]


# --- models ------------------------------------------------------------------------------


def _lookup(raw: Mapping[str, Any], name: str) -> Any:
    """A field of raw input, by its camelCase key or its snake_case name."""
    alias = to_camel(name)
    return raw[alias] if alias in raw else raw.get(name)


def _name(entry: object) -> str | None:
    """The name of a list entry in raw input, when it has one."""
    name = _lookup(entry, "name") if isinstance(entry, Mapping) else None
    return name if isinstance(name, str) else None


def _names(entries: object) -> list[str]:
    """The distinct names of a raw list's entries, in order."""
    found = (_name(entry) for entry in entries) if isinstance(entries, list) else ()
    return list(dict.fromkeys(name for name in found if name is not None))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _group(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        strict=True,
        frozen=True,
    )

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        """Rules that relate several values; ``raw`` may hold anything the user wrote."""
        return []

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        found = self._rules(self.model_dump(by_alias=True))
        if found:
            raise rules_failed(found)
        return self


_EXISTS: JsonDict = {"properties": {"operator": {"const": "Exists"}}, "required": ["operator"]}


class Toleration(_Model):
    # _rules, as JSON Schema.
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "description": "Operator Equal (the default) needs a key.",
                    "if": {"not": _EXISTS},
                    "then": {"required": ["key"], "properties": {"key": {"type": "string"}}},
                },
                {
                    "description": "Operator Exists takes no value.",
                    "if": _EXISTS,
                    "then": {"properties": {"value": {"type": "null"}}},
                },
                {
                    "description": "tolerationSeconds only with effect NoExecute.",
                    "if": {
                        "required": ["tolerationSeconds"],
                        "properties": {"tolerationSeconds": {"type": "integer"}},
                    },
                    "then": {
                        "required": ["effect"],
                        "properties": {"effect": {"const": "NoExecute"}},
                    },
                },
            ]
        }
    )

    key: LabelKey | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: (
        Annotated[
            StrictInt,
            AfterValidator(_int_range(INT64_MIN, INT64_MAX)),
            _integers(INT64_MIN, INT64_MAX),
        ]
        | None
    ) = None

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = []
        operator = _lookup(raw, "operator")
        if operator is None:
            operator = "Equal"
        if operator == "Equal" and _lookup(raw, "key") in (None, ""):
            found.append(((), "operator Equal needs a key"))
        if operator == "Exists" and _lookup(raw, "value") is not None:
            found.append(((), "operator Exists cannot have a value"))
        seconds = _lookup(raw, "toleration_seconds")
        if seconds is not None and _lookup(raw, "effect") != "NoExecute":
            found.append(((), "tolerationSeconds is only allowed with effect NoExecute"))
        return found

    def to_kubernetes(self) -> dict[str, Any]:
        """The toleration as a pod spec entry, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True)


def _snapshot_value(value: Any) -> Any:
    """Drop None and empty collections, recursively, so the snapshot stays canonical."""
    if isinstance(value, dict):
        kept = {k: _snapshot_value(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not None and v != [] and v != {}}
    if isinstance(value, list):
        return [_snapshot_value(item) for item in value]
    return value


class DeviceAlternative(_Model):
    """A device a DRA profile takes when the ones before it are not free."""

    device_class_name: DnsSubdomain
    selectors: list[Selector] = Field(default_factory=list, max_length=MAX_SELECTORS)
    count: GpuCount = 1


_ONE_KIND: JsonDict = {
    "allOf": [
        {
            "description": "Exactly one of resourceName or deviceClassName.",
            "oneOf": [{"required": ["resourceName"]}, {"required": ["deviceClassName"]}],
        },
        {
            "description": "selectors, alternatives and devices are only for DRA profiles.",
            "if": {"required": ["resourceName"]},
            "then": {
                "not": {
                    "anyOf": [
                        {"required": ["selectors"], "properties": {"selectors": {"minItems": 1}}},
                        {
                            "required": ["alternatives"],
                            "properties": {"alternatives": {"minItems": 1}},
                        },
                        {"required": ["devices"], "properties": {"devices": {"type": "string"}}},
                    ]
                }
            },
        },
    ]
}


# What people read in a catalog, GPU or image: a name to show, and what it gives.
DisplayName = Annotated[
    StrictStr,
    AfterValidator(_check_display_name),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": MAX_DISPLAY_NAME, "pattern": r"\S"}
    ),
]
Description = Annotated[
    StrictStr,
    AfterValidator(_check_description),
    WithJsonSchema({"type": "string", "maxLength": MAX_DESCRIPTION}),
]


def _snapshot_json(profile: BaseModel) -> str:
    data = _snapshot_value(profile.model_dump(by_alias=True))
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_Profile = TypeVar("_Profile", bound=BaseModel)


def _from_snapshot(kind: type[_Profile], text: str, what: str) -> _Profile:
    if len(text.encode("utf-8", "surrogatepass")) > SNAPSHOT_MAX_BYTES:
        raise SnapshotError(f"the {what} snapshot is larger than {SNAPSHOT_MAX_BYTES} bytes")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SnapshotError(f"the {what} snapshot is not valid JSON: {exc}") from None
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(join(tuple(e["loc"]), describe(e, kind)) for e in exc.errors())
        raise SnapshotError(f"the {what} snapshot is invalid: {problems}") from None


class GpuProfileConfig(_Model):
    # _rules about the kind of profile, as JSON Schema.
    model_config = ConfigDict(json_schema_extra=_ONE_KIND)

    name: Annotated[StrictStr, AfterValidator(_check_gpu_profile_name), _GPU_PROFILE_NAME_SCHEMA]
    display_name: DisplayName
    description: Description | None = None
    # Exactly one of the two: a device plugin's extended resource, or a DRA device class.
    resource_name: ResourceName | None = None
    device_class_name: DnsSubdomain | None = None
    count: GpuCount
    selectors: list[Selector] = Field(default_factory=list, max_length=MAX_SELECTORS)
    alternatives: list[DeviceAlternative] = Field(default_factory=list, max_length=MAX_ALTERNATIVES)
    # What a DRA profile gives, for people, e.g. "NVIDIA H100 80GB, else A100 40GB".
    devices: (
        Annotated[
            StrictStr,
            AfterValidator(_check_description),
            WithJsonSchema({"type": "string", "maxLength": MAX_DESCRIPTION}),
        ]
        | None
    ) = None
    workspace_image: Image | None = None
    runtime_class_name: DnsSubdomain | None = None
    supplemental_groups: list[GroupId] = Field(
        default_factory=list,
        max_length=MAX_SUPPLEMENTAL_GROUPS,
        json_schema_extra={"uniqueItems": True},
    )
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=MAX_NODE_SELECTOR
    )
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_TOLERATIONS)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = [
            (
                ("supplementalGroups", index),
                f"group {group} is listed more than once (also supplementalGroups[{first}])",
            )
            for index, first, group in repeats(_lookup(raw, "supplemental_groups"), _group)
        ]
        resource = _lookup(raw, "resource_name")
        device_class = _lookup(raw, "device_class_name")
        if resource is None and device_class is None:
            found.append(
                (
                    ("resourceName",),
                    "is required, or deviceClassName for a profile of DRA devices",
                )
            )
        if resource is not None and device_class is not None:
            found.append(
                (
                    ("deviceClassName",),
                    "a profile has either resourceName or deviceClassName, not both",
                )
            )
        if resource is not None:
            found += [
                ((key,), f"{key} is only for DRA profiles (with deviceClassName)")
                for key in ("selectors", "alternatives", "devices")
                if _lookup(raw, key) not in (None, [])
            ]
        return found

    @property
    def is_dra(self) -> bool:
        return self.device_class_name is not None

    @property
    def device_name(self) -> str:
        """What a box of the profile asks for its devices by: the extended resource, or a
        DRA profile's device class."""
        name = self.resource_name or self.device_class_name
        # The rules above require exactly one of the two.
        assert name is not None
        return name

    def choices(self) -> list[DeviceAlternative]:
        """A DRA profile's devices in the order they are tried: its own, then alternatives."""
        if self.device_class_name is None:
            return []
        own = DeviceAlternative(
            device_class_name=self.device_class_name, selectors=self.selectors, count=self.count
        )
        return [own, *self.alternatives]

    def devices_line(self) -> str | None:
        """The human line the catalog shows for a DRA profile."""
        if self.device_class_name is None:
            return None
        if self.devices is not None:
            return self.devices
        return ", else ".join(
            f"{choice.count} × {choice.device_class_name}" for choice in self.choices()
        )

    def snapshot_json(self) -> str:
        """The full resolved profile as canonical JSON: the pinned contract of a box.

        Keys are the camelCase keys of the Helm values, sorted; separators are compact;
        unset and empty fields are left out; non-ASCII text is escaped. At most
        ``SNAPSHOT_MAX_BYTES`` bytes for any valid profile.
        """
        return _snapshot_json(self)

    @classmethod
    def from_snapshot(cls, text: str) -> Self:
        """Read back a snapshot written by :meth:`snapshot_json`."""
        return _from_snapshot(cls, text, "GPU profile")

    def to_wire(self, default: bool) -> GpuProfile:
        """The profile as discovery shows it: never the image, runtime or scheduling."""
        return GpuProfile(
            name=self.name,
            display_name=self.display_name,
            description=self.description,
            kind="dra" if self.is_dra else "extended-resource",
            resource_name=self.device_name,
            devices=self.devices_line(),
            count=self.count,
            default=default,
        )

    def allocation(self) -> GpuAllocation:
        """The accelerator pinned to a box, as the Devbox body reports it."""
        return GpuAllocation(
            profile=self.name,
            display_name=self.display_name,
            kind="dra" if self.is_dra else "extended-resource",
            resource_name=self.device_name,
            devices=self.devices_line(),
            count=self.count,
        )


class GpuSettings(_Model):
    # The rules of _rules that JSON Schema can express: those about enabled.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"enabled": {"const": True}}, "required": ["enabled"]},
            "then": {
                "description": "Enabled needs a default profile and at least one profile.",
                "required": ["defaultProfile", "profiles"],
                "properties": {"defaultProfile": {"type": "string"}, "profiles": {"minItems": 1}},
            },
        }
    )

    enabled: StrictBool = False
    default_profile: Annotated[StrictStr, _PROFILE_NAME_SCHEMA] | None = None
    profiles: list[GpuProfileConfig] = Field(default_factory=list, max_length=MAX_PROFILES)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        profiles = _lookup(raw, "profiles")
        found: list[Violation] = [
            (
                ("profiles", index, "name"),
                f"profile name {name!r} is used more than once (also profiles[{first}]); "
                "profile names must be unique",
            )
            for index, first, name in repeats(profiles, _name)
        ]
        names = _names(profiles)
        default = _lookup(raw, "default_profile")
        if isinstance(default, str) and default not in names:
            configured = ", ".join(names) or "none"
            found.append(
                (
                    ("defaultProfile",),
                    f"{default!r} is not a configured profile (configured: {configured})",
                )
            )
        if _lookup(raw, "enabled") is True:
            if isinstance(profiles, list | None) and not profiles:
                found.append((("profiles",), "enabled: true needs at least one profile"))
            if default is None:
                found.append((("defaultProfile",), "enabled: true needs a defaultProfile"))
        return found

    def profile(self, name: str) -> GpuProfileConfig | None:
        return next((p for p in self.profiles if p.name == name), None)

    @property
    def uses_dra(self) -> bool:
        """Whether any profile is of DRA devices, so the controller watches claims."""
        return any(p.is_dra for p in self.profiles)

    def resolve(self, request: GpuRequest | None) -> GpuProfileConfig | None:
        """The profile a create gets, or None for a CPU box; ProfileRejected otherwise."""
        if request is None:
            return None
        if not self.enabled:
            raise ProfileRejected("GPU acceleration is disabled by the operator")
        name = request.profile if request.profile is not None else self.default_profile
        profile = self.profile(name) if name is not None else None
        if profile is None:
            available = ", ".join(p.name for p in self.profiles)
            raise ProfileRejected(
                f"unknown GPU profile {name!r}; available profiles: {available}", ("profile",)
            )
        return profile

    def capabilities(self) -> GpuCapabilities:
        """Discovery: profile names and what they give, never how they are scheduled."""
        if not self.enabled:
            return GpuCapabilities(enabled=False, default_profile=None, profiles=[])
        return GpuCapabilities(
            enabled=True,
            default_profile=self.default_profile,
            profiles=[p.to_wire(p.name == self.default_profile) for p in self.profiles],
        )


def _check_port_number(value: int) -> int:
    if not MIN_IMAGE_PORT <= value <= 65535:
        raise fail(f"must be between {MIN_IMAGE_PORT} and 65535, got {value}")
    if value == SSH_CONTAINER_PORT:
        raise fail(f"{SSH_CONTAINER_PORT} is the port of the box's SSH server")
    return value


class ImagePortConfig(_Model):
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


class ImageResources(_Model):
    """The bounded requests and limits of a sidecar-mode image profile's container."""

    cpu_request: Quantity
    memory_request: Quantity
    cpu_limit: Quantity
    memory_limit: Quantity

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = []
        for kind in ("cpu", "memory"):
            request = _lookup(raw, f"{kind}_request")
            limit = _lookup(raw, f"{kind}_limit")
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


Argument = Annotated[StrictStr, Field(max_length=MAX_ARGUMENT_LENGTH)]
_WORKSPACE: JsonDict = {"properties": {"mode": {"const": "workspace"}}, "required": ["mode"]}
# Fields only a sidecar-mode profile may set; a workspace image keeps the workspace contract.
# Each with the JSON Schema of "set": null and empty lists count as unset.
_SIDECAR_ONLY: dict[str, JsonDict] = {
    "resources": {"type": "object"},
    "run_as_user": {"type": "integer"},
    "command": {"type": "array", "minItems": 1},
    "args": {"type": "array", "minItems": 1},
}


class ImageProfileConfig(_Model):
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

    name: Annotated[StrictStr, AfterValidator(_check_profile_name), _PROFILE_NAME_SCHEMA]
    display_name: DisplayName
    description: Description | None = None
    image: PinnedImage
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    mode: ImageMode = "sidecar"
    # Workspace mode: GPU profile names, and "cpu" for boxes without a GPU.
    accelerators: list[Annotated[StrictStr, _PROFILE_NAME_SCHEMA]] = Field(
        default_factory=list, max_length=MAX_PROFILES + 1, json_schema_extra={"uniqueItems": True}
    )
    ports: list[ImagePortConfig] = Field(default_factory=list, max_length=MAX_IMAGE_PORTS)
    resources: ImageResources | None = None
    run_as_user: GroupId | None = None
    command: list[Argument] = Field(default_factory=list, max_length=MAX_COMMAND_ITEMS)
    args: list[Argument] = Field(default_factory=list, max_length=MAX_ARGS_ITEMS)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = []
        mode = _lookup(raw, "mode") or "sidecar"
        accelerators = _lookup(raw, "accelerators")
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
                if _lookup(raw, key) not in (None, [])
            ]
        elif mode == "sidecar":
            if _lookup(raw, "resources") is None:
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
        ports = _lookup(raw, "ports")
        found += [
            (
                ("ports", index, "name"),
                f"port name {name!r} is used more than once (also ports[{first}])",
            )
            for index, first, name in repeats(ports, _name)
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
        return _snapshot_json(self)

    @classmethod
    def from_snapshot(cls, text: str) -> Self:
        """Read back a snapshot written by :meth:`snapshot_json`."""
        return _from_snapshot(cls, text, "image profile")

    def to_wire(self) -> ImageProfile:
        """The profile as discovery shows it: never the image, its pull policy or limits."""
        return ImageProfile(
            name=self.name,
            display_name=self.display_name,
            description=self.description,
            mode=self.mode,
            ports=[port.to_wire() for port in self.ports],
        )

    def allocation(self) -> ImageAllocation:
        """The image profile pinned to a box, as the Devbox body reports it."""
        return ImageAllocation(
            profile=self.name,
            display_name=self.display_name,
            mode=self.mode,
            ports=[port.to_wire() for port in self.ports],
        )


def _port_key(entry: object) -> tuple[object, object] | None:
    """A raw port entry's number and protocol, which must be unique within a profile."""
    if not isinstance(entry, Mapping):
        return None
    number = _lookup(entry, "container_port")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    return number, _lookup(entry, "protocol") or "TCP"


class ImageSettings(_Model):
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
        profiles = _lookup(raw, "profiles")
        found: list[Violation] = [
            (
                ("profiles", index, "name"),
                f"image profile name {name!r} is used more than once (also profiles[{first}]); "
                "image profile names must be unique",
            )
            for index, first, name in repeats(profiles, _name)
        ]
        if _lookup(raw, "enabled") is True and isinstance(profiles, list | None) and not profiles:
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


class PresetSettings(_Model):
    cpu: Quantity
    memory_request: Quantity
    memory_limit: Quantity
    storage: Quantity

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        request = _lookup(raw, "memory_request")
        limit = _lookup(raw, "memory_limit")
        if not (is_quantity(request) and is_quantity(limit)):
            return []
        if quantity_value(request) > quantity_value(limit):
            return [(("memoryRequest",), f"{request} must not exceed memoryLimit ({limit})")]
        return []


DEFAULT_PRESETS: dict[Preset, PresetSettings] = {
    "small": PresetSettings(cpu="250m", memory_request="512Mi", memory_limit="4Gi", storage="20Gi"),
    "medium": PresetSettings(cpu="750m", memory_request="2Gi", memory_limit="8Gi", storage="30Gi"),
    "large": PresetSettings(cpu="2", memory_request="4Gi", memory_limit="16Gi", storage="50Gi"),
}


def _empty_host(value: object) -> object:
    # The chart renders an unset host as "": no host, exactly like null.
    return None if value == "" else value


class SshSettings(_Model):
    service_type: Literal["NodePort", "LoadBalancer"] = "NodePort"
    # The address shown in ssh commands for NodePort Services. None by default, as in the
    # chart: only the operator knows which node address users reach. For LoadBalancer
    # Services the Service's ingress address is used instead.
    host: Annotated[Host | None, BeforeValidator(_empty_host)] = None
    # A Secret in the boxes' namespace whose key `authorized_keys` lists the public keys
    # allowed to log in as dev; mounted read-only into every box.
    authorized_keys_secret: DnsSubdomain | None = None


class TtlSettings(_Model):
    default_hours: Annotated[StrictInt, Field(ge=1)] = 24
    max_hours: Annotated[StrictInt, Field(ge=1)] = 168

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        default = _lookup(raw, "default_hours")
        maximum = _lookup(raw, "max_hours")
        default = 24 if default is None else default
        maximum = 168 if maximum is None else maximum
        numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (default, maximum))
        if numbers and default > maximum:
            return [(("defaultHours",), f"{default} must not exceed maxHours ({maximum})")]
        return []


def _env_entries(value: object) -> object:
    """Accept the Kubernetes list shape ``[{name, value}]`` as well as a mapping."""
    if not isinstance(value, list):
        return value
    env: dict[object, object] = {}
    for index, entry in enumerate(value):
        if not isinstance(entry, Mapping) or set(entry) != {"name", "value"}:
            raise fail(f"entry {index} must be a mapping with exactly the keys 'name' and 'value'")
        if not isinstance(entry["name"], str):
            raise fail(f"entry {index}: name must be a string, got {show(entry['name'])}")
        if entry["name"] in env:
            raise fail(f"entry {index}: {entry['name']!r} is set more than once")
        env[entry["name"]] = entry["value"]
    return env


# An entry of the list shape of a sidecar's env, as _env_entries takes it; only the schema
# uses it (a docstring would become its description there).
class _EnvEntry(_Model):
    name: EnvName
    value: StrictStr


def _reserved_container_names(schema: JsonDict) -> None:
    """A sidecar name's schema: a DNS label that names none of the box's own containers."""
    label = dict(schema)
    schema.clear()
    schema["allOf"] = [
        label,
        {
            "description": f"'devbox' is the main container, {ACTIVITY_SIDECAR!r} the "
            f"activity agent and {ENVIRONMENT_SIDECAR!r} a sidecar image profile.",
            "not": {"enum": ["devbox", ACTIVITY_SIDECAR, ENVIRONMENT_SIDECAR]},
        },
    ]


class Sidecar(_Model):
    name: DnsLabel = Field(json_schema_extra=_reserved_container_names)
    # None runs the release's workspace image; a GPU profile's image is never used here.
    image: Image | None = None
    command: list[StrictStr] = Field(default_factory=list)
    args: list[StrictStr] = Field(default_factory=list)
    env: Annotated[
        dict[EnvName, StrictStr],
        BeforeValidator(
            _env_entries, json_schema_input_type=list[_EnvEntry] | dict[EnvName, StrictStr]
        ),
    ] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _not_main(cls, value: str) -> str:
        if value == "devbox":
            raise fail("'devbox' is the main container's name; pick another sidecar name")
        if value == ACTIVITY_SIDECAR:
            raise fail(f"{ACTIVITY_SIDECAR!r} is the activity agent's name; pick another one")
        if value == ENVIRONMENT_SIDECAR:
            raise fail(
                f"{ENVIRONMENT_SIDECAR!r} is the container of sidecar image profiles; pick "
                "another one"
            )
        return value


class AvailabilitySettings(_Model):
    # Watch every node and every pod of the cluster to count free GPUs. Needs the chart's
    # read-only ClusterRole; off, availability reports "unknown" and nothing else changes.
    enabled: StrictBool = True


class QueueSettings(_Model):
    # backfill: a box that fits nowhere for want of CPU, memory or a pod slot beside a free
    # device, or of a device on the nodes it may use, lets the boxes behind it that fit go
    # first. strict: it stops its line, so larger boxes are never overtaken and devices
    # may stay idle.
    order: Literal["backfill", "strict"] = "backfill"


ReadSeconds = Annotated[
    int,
    BeforeValidator(_whole_number),
    AfterValidator(_int_range(1, MAX_READ_SECONDS)),
    _integers(1, MAX_READ_SECONDS),
]
ConnectionCount = Annotated[
    int,
    BeforeValidator(_whole_number),
    AfterValidator(_int_range(1, MAX_CONNECTIONS)),
    _integers(1, MAX_CONNECTIONS),
]


class ConnectionSettings(_Model):
    """How long a client may take to send a request, and how many connections clients may
    hold open. Every replica applies them to its own connections.

    The read deadlines end once a request has been read: an answer that takes long (a
    waiting GET, the dashboard's event stream) is never cut by them.
    """

    # From a request's first byte, or from the connection's opening, to the end of its head.
    header_timeout_seconds: ReadSeconds = 10
    # From the end of the head to the end of the body.
    body_timeout_seconds: ReadSeconds = 30
    # A connection is closed when no next request begins this long after an answer.
    keep_alive_timeout_seconds: ReadSeconds = 5
    max_total: ConnectionCount = DEFAULT_MAX_CONNECTIONS
    # Behind an Ingress or another proxy every client has the proxy's address.
    max_per_client: ConnectionCount = DEFAULT_MAX_CONNECTIONS_PER_CLIENT

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        total = _lookup(raw, "max_total")
        per_client = _lookup(raw, "max_per_client")
        total = DEFAULT_MAX_CONNECTIONS if total is None else total
        shown = f"{per_client}"
        if per_client is None:
            per_client = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
            shown = f"{per_client} (the default)"
        numbers = all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in (total, per_client)
        )
        if numbers and per_client > total:
            return [(("maxPerClient",), f"{shown} must not exceed maxTotal ({total})")]
        return []


IdleMinutes = Annotated[float, Field(gt=0, le=MAX_IDLE_MINUTES)]


class IdleSettings(_Model):
    """When running boxes that nobody uses are stopped, from their activity agent's reports.

    A box is idle while no SSH session is open, no Jupyter kernel is busy and, on a GPU
    box, GPU utilization is known and below the threshold. A window left unset never
    stops a box.
    """

    # GPU boxes whose profile has no entry in ``profiles``.
    stop_after_minutes: IdleMinutes | None = None
    # CPU boxes: off by default, since they hold no scarce device.
    cpu_stop_after_minutes: IdleMinutes | None = None
    profiles: dict[Annotated[StrictStr, _PROFILE_NAME_SCHEMA], IdleMinutes] = Field(
        default_factory=dict
    )
    gpu_utilization_percent: Annotated[StrictInt, Field(ge=0, le=100)] = 5
    # Where agents reach the controller; the chart fills in its Service. Empty, as the
    # chart's default values have it, means unset, like an empty ssh.host.
    controller_url: Annotated[
        HttpUrl | None,
        BeforeValidator(_empty_host, json_schema_input_type=Literal[""] | HttpUrl | None),
    ] = None

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        windows = [_lookup(raw, "stop_after_minutes"), _lookup(raw, "cpu_stop_after_minutes")]
        profiles = _lookup(raw, "profiles")
        enabled = any(w is not None for w in windows) or bool(profiles)
        if enabled and _lookup(raw, "controller_url") in (None, ""):
            return [(("controllerUrl",), "is required when boxes may be stopped for idleness")]
        return []

    def window(self, profile: str | None) -> float | None:
        """Minutes of idleness after which a box of this GPU profile (None: CPU) stops."""
        if profile is None:
            return self.cpu_stop_after_minutes
        return self.profiles.get(profile, self.stop_after_minutes)


GroupName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
MAX_LIMITED_BOXES = 100_000
MAX_LIMITED_DEVICES = 100_000
MAX_LIMITED_GROUPS = 256
LimitCount = Annotated[
    int,
    BeforeValidator(_whole_number),
    AfterValidator(_int_range(0, MAX_LIMITED_BOXES)),
    _integers(0, MAX_LIMITED_BOXES),
]
# A device limit is keyed by what profiles request: an extended resource name or a DRA
# device class name.
DeviceKey = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class Quota(_Model):
    """How much one person, or one group's members together, may hold."""

    # Boxes that exist, running or stopped.
    boxes: LimitCount | None = None
    # Devices held by running boxes, by resource name or DRA device class name.
    devices: dict[DeviceKey, LimitCount] = Field(default_factory=dict, max_length=64)


class GroupLimits(Quota):
    """A group's quota, and what its members may ask for."""

    # The presets members may create boxes with; None: any.
    presets: list[Preset] | None = Field(default=None, min_length=1)
    # The longest time to live members may ask for; None: ttl.maxHours.
    max_ttl_hours: Annotated[StrictInt, Field(ge=1)] | None = None


class LimitSettings(_Model):
    """Per-person and per-group limits, checked on create and start. The operator token has
    none."""

    per_person: Quota = Field(default_factory=Quota)
    groups: dict[GroupName, GroupLimits] = Field(
        default_factory=dict, max_length=MAX_LIMITED_GROUPS
    )

    @property
    def enabled(self) -> bool:
        return bool(self.groups or self.per_person.boxes is not None or self.per_person.devices)


_LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
MAX_ISSUER_LENGTH = 2048


def _check_issuer(value: str) -> str:
    if len(value) > MAX_ISSUER_LENGTH:
        raise fail(f"must be at most {MAX_ISSUER_LENGTH} characters")
    try:
        parts = urllib.parse.urlsplit(value)
        host = parts.hostname
    except ValueError as error:
        raise fail(f"{value!r} is not a URL: {error}") from None
    if parts.username is not None or parts.password is not None:
        # Not quoted: the value holds a secret.
        raise fail("must not carry credentials (user:password@)")
    if parts.scheme not in ("https", "http") or not host:
        raise fail(f"{value!r} is not an issuer URL: use https://<host>[/<path>]")
    if parts.scheme == "http" and host not in _LOOPBACK_HOSTS:
        raise fail(
            f"{value!r} must use https: tokens and keys from a plain-HTTP issuer can be "
            "forged on the way (plain http is allowed for a loopback host only)"
        )
    if parts.query or parts.fragment:
        raise fail(f"{value!r} must not carry a query or a fragment")
    return value


# Compared character for character with the tokens' iss claim, as OpenID Connect asks.
IssuerUrl = Annotated[
    StrictStr,
    AfterValidator(_check_issuer),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^(https://|http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?(/|$))",
            "maxLength": MAX_ISSUER_LENGTH,
        }
    ),
]
ClaimName = Annotated[StrictStr, StringConstraints(min_length=1, max_length=256)]
ClientId = Annotated[StrictStr, StringConstraints(min_length=1, max_length=256)]


class OidcSettings(_Model):
    """People who bring a JWT access token from one OpenID Connect issuer."""

    # Exactly as the issuer writes it in its tokens' iss claim (mind a trailing slash);
    # its discovery document is read from <issuer>/.well-known/openid-configuration.
    issuer: IssuerUrl
    # The value a token's aud claim must hold: with most issuers, the client ID.
    audience: ClientId
    # The claim whose value is the person's username; it must be a non-empty string.
    username_claim: ClaimName = "preferred_username"
    # The claim that lists the person's groups; a token without it has no groups.
    groups_claim: ClaimName = "groups"
    # The public client (no secret; code flow with PKCE) that `devbox login --oidc` uses;
    # unset, the controller offers no such login.
    cli_client_id: ClientId | None = None


MAX_HUB_CACHE_SECONDS = 300


def _hub_address(value: str) -> str:
    """A URL the controller can ask, checked as its HTTP client reads it, so that a host
    or port it cannot use stops the controller at start instead of failing each request."""
    try:
        url = httpx.URL(value)
        # The host is decoded only when read.
        host, port = url.host, url.port
    except (httpx.InvalidURL, ValueError) as err:
        raise fail(f"{value!r} does not name a usable host: {err}") from None
    if not host:
        raise fail(f"{value!r} names no host")
    if port is not None and not 0 < port < 65536:
        raise fail(f"the port must be between 1 and 65535, got {port}")
    return value


class HubSettings(_Model):
    """A JupyterHub whose people's tokens the API accepts (docs/operator-guide.md)."""

    # The hub's REST API, as single-user servers see it in JUPYTERHUB_API_URL,
    # e.g. http://hub.jhub.svc:8081/hub/api.
    api_url: Annotated[UrlWithoutCredentials, AfterValidator(_hub_address)]
    # How long the hub's answer about a token is trusted; a token the hub revokes keeps
    # working for at most this long.
    cache_seconds: Annotated[
        int,
        BeforeValidator(_whole_number),
        AfterValidator(_int_range(1, MAX_HUB_CACHE_SECONDS)),
        _integers(1, MAX_HUB_CACHE_SECONDS),
    ] = 30


class AuthSettings(_Model):
    """Who may call the API besides the operator token, and who among them is an admin."""

    # People in any of these groups see and act on every box, as the operator token does.
    admin_groups: list[GroupName] = Field(default_factory=list, max_length=64)
    oidc: OidcSettings | None = None

    hub: HubSettings | None = None


class Settings(_Model):
    namespace: DnsLabel = "devboxes"
    workspace_image: Image = "devboxes/workspace:0.1.0"
    storage_class_name: DnsSubdomain | None = None
    ttl: TtlSettings = Field(default_factory=TtlSettings)
    ssh: SshSettings = Field(default_factory=SshSettings)
    # Presets, when given, name all of them (see _rules).
    presets: dict[Preset, PresetSettings] = Field(
        default_factory=lambda: dict(DEFAULT_PRESETS), json_schema_extra={"required": list(PRESETS)}
    )
    sidecars: list[Sidecar] = Field(default_factory=list, max_length=MAX_SIDECARS)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    images: ImageSettings = Field(default_factory=ImageSettings)
    availability: AvailabilitySettings = Field(default_factory=AvailabilitySettings)
    queue: QueueSettings = Field(default_factory=QueueSettings)
    idle: IdleSettings = Field(default_factory=IdleSettings)
    connections: ConnectionSettings = Field(default_factory=ConnectionSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = (
            _idle_profile_rules(raw) + _accelerator_rules(raw) + _limit_rules(raw)
        )
        presets = _lookup(raw, "presets")
        if isinstance(presets, Mapping):
            missing = [p for p in PRESETS if p not in presets]
            if missing:
                found.append(
                    (
                        ("presets",),
                        f"missing {', '.join(missing)}: when presets are given, all of "
                        f"{', '.join(PRESETS)} are required",
                    )
                )
        found += [
            (
                ("sidecars", index, "name"),
                f"sidecar name {name!r} is used more than once (also sidecars[{first}])",
            )
            for index, first, name in repeats(_lookup(raw, "sidecars"), _name)
        ]
        return found

    def preset(self, name: Preset) -> PresetSettings:
        return self.presets[name]

    @property
    def counts_devices(self) -> bool:
        """Whether the controller watches the cluster's free devices; only then do box pods
        of extended-resource profiles wait behind the line's scheduling gate."""
        return self.availability.enabled and self.gpu.enabled

    def capabilities(self) -> Capabilities:
        """Discovery: the GPU and image catalogs as users may see them."""
        return Capabilities(gpu=self.gpu.capabilities(), images=self.images.capabilities())


def _limit_rules(raw: Mapping[str, Any]) -> list[Violation]:
    """Device limits name what some profile requests; no group may outlast ttl.maxHours."""
    limits = _lookup(raw, "limits")
    if not isinstance(limits, Mapping):
        return []
    gpu = _lookup(raw, "gpu")
    profiles = _lookup(gpu, "profiles") if isinstance(gpu, Mapping) else None
    requested = {
        key
        for profile in (profiles if isinstance(profiles, list) else [])
        if isinstance(profile, Mapping)
        for key in (_lookup(profile, "resource_name"), _lookup(profile, "device_class_name"))
        if isinstance(key, str)
    }
    offered = ", ".join(sorted(requested)) or "none"
    ttl = _lookup(raw, "ttl")
    max_hours = _lookup(ttl, "max_hours") if isinstance(ttl, Mapping) else None
    max_hours = 168 if max_hours is None else max_hours
    quotas: list[tuple[Loc, object]] = [(("limits", "perPerson"), _lookup(limits, "per_person"))]
    groups = _lookup(limits, "groups")
    if isinstance(groups, Mapping):
        quotas += [(("limits", "groups", str(name)), quota) for name, quota in groups.items()]
    found: list[Violation] = []
    for loc, quota in quotas:
        if not isinstance(quota, Mapping):
            continue
        devices = _lookup(quota, "devices")
        found += [
            (
                (*loc, "devices", str(key)),
                f"no GPU profile requests {key!r} (profiles request: {offered})",
            )
            for key in (devices if isinstance(devices, Mapping) else {})
            if key not in requested
        ]
        hours = _lookup(quota, "max_ttl_hours")
        numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (hours, max_hours))
        if numbers and hours > max_hours:
            found.append(
                ((*loc, "maxTtlHours"), f"{hours} must not exceed ttl.maxHours ({max_hours})")
            )
    return found


def _idle_profile_rules(raw: Mapping[str, Any]) -> list[Violation]:
    """Idle windows may only name configured GPU profiles."""
    idle, gpu = _lookup(raw, "idle"), _lookup(raw, "gpu")
    profiles = _lookup(idle, "profiles") if isinstance(idle, Mapping) else None
    if not isinstance(profiles, Mapping):
        return []
    names = _names(_lookup(gpu, "profiles") if isinstance(gpu, Mapping) else None)
    configured = ", ".join(sorted(names)) or "none"
    return [
        (
            ("idle", "profiles", str(key)),
            f"{key!r} is not a configured GPU profile (configured: {configured})",
        )
        for key in profiles
        if key not in names
    ]


def _accelerator_rules(raw: Mapping[str, Any]) -> list[Violation]:
    """A workspace image profile's accelerators are configured GPU profiles or 'cpu'."""
    images, gpu = _lookup(raw, "images"), _lookup(raw, "gpu")
    profiles = _lookup(images, "profiles") if isinstance(images, Mapping) else None
    if not isinstance(profiles, list):
        return []
    names = _names(_lookup(gpu, "profiles") if isinstance(gpu, Mapping) else None)
    known = ", ".join([CPU_ACCELERATOR, *sorted(names)])
    found: list[Violation] = []
    for index, profile in enumerate(profiles):
        accelerators = _lookup(profile, "accelerators") if isinstance(profile, Mapping) else None
        if not isinstance(accelerators, list):
            continue
        found += [
            (
                ("images", "profiles", index, "accelerators", position),
                f"{value!r} is neither {CPU_ACCELERATOR!r} nor a configured GPU profile "
                f"(known: {known})",
            )
            for position, value in enumerate(accelerators)
            if isinstance(value, str) and value != CPU_ACCELERATOR and value not in names
        ]
    return found


# --- validation --------------------------------------------------------------------------


def _nested(annotation: Any) -> tuple[str, type[_Model]] | None:
    """How a field holds settings models: one, a list of them or a mapping to them."""
    annotation = unwrap(annotation)
    if is_model(annotation):
        return "one", annotation
    origin = get_origin(annotation)
    if origin in (list, dict):
        item = unwrap(get_args(annotation)[-1])
        if is_model(item):
            return ("list" if origin is list else "dict"), item
    return None


def _raw_rules(model: type[_Model], raw: object, loc: Loc) -> list[Violation]:
    """Every cross-field rule of ``model`` and of the models inside it, over raw input."""
    if not isinstance(raw, Mapping):
        return []
    found = [(loc + sub, message) for sub, message in model._rules(raw)]
    for name, field in model.model_fields.items():
        nested = _nested(field.annotation)
        child = _lookup(raw, name)
        if nested is None or child is None:
            continue
        kind, child_model = nested
        key = field.alias or name
        if kind == "one":
            found += _raw_rules(child_model, child, (*loc, key))
        elif kind == "list" and isinstance(child, list):
            for index, item in enumerate(child):
                found += _raw_rules(child_model, item, (*loc, key, index))
        elif kind == "dict" and isinstance(child, Mapping):
            for item_key, item in child.items():
                found += _raw_rules(child_model, item, (*loc, key, str(item_key)))
    return found


def validate(data: object) -> tuple[Settings | None, list[tuple[str, str]]]:
    """Settings from raw input, or None and every violation as ``(path, message)``."""
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        violations = [
            (path(tuple(e["loc"])), describe(e, Settings))
            for e in errors
            if e["type"] != RULE_ERROR
        ]
        violations += [(path(loc), message) for loc, message in _raw_rules(Settings, data, ())]
        if not violations:
            # Only a model validator failed: report its own wording.
            violations = [(path(tuple(e["loc"])), describe(e, Settings)) for e in errors]
        return None, list(dict.fromkeys(violations))
    return settings, []


def settings_from_mapping(data: Mapping[str, object]) -> Settings:
    """Validate settings; ConfigError lists every violation, one ``path: message`` each."""
    settings, violations = validate(data)
    if settings is None:
        raise config_error(violations)
    return settings
