"""The ``gpu`` block: the GPU catalog, its profiles of extended resources or of DRA
devices, and how a create's GPU request resolves to one; and the blocks of how boxes wait
for a device: ``availability`` (whether free devices are counted) and ``queue`` (the
line's order).

Every catalog rule (docs/controller.md, "GPU profiles") is checked at start-up.
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
)
from pydantic.config import JsonDict

from devboxes_sdk.models import GpuAllocation, GpuCapabilities, GpuProfile, GpuRequest

from .base import (
    GroupId,
    Model,
    WholeNumber,
    entry_names,
    int_range,
    integers,
    lookup,
)
from .catalog import (
    CPU_ACCELERATOR,
    MAX_PROFILES,
    PROFILE_NAME_RE,
    PROFILE_NAME_SCHEMA,
    Description,
    DisplayName,
    check_profile_name,
    read_snapshot,
    repeated_names,
    snapshot_of,
)
from .cel import MAX_SELECTOR_LENGTH, selector_problem
from .formats import DnsSubdomain, Image, LabelKey, LabelValue, ResourceName
from .violations import Violation, fail, repeats

MAX_SUPPLEMENTAL_GROUPS = 8
MAX_NODE_SELECTOR = 16
MAX_TOLERATIONS = 16
MAX_GPU_COUNT = 64
MAX_SELECTORS = 4
# Kubernetes allows 8 subrequests in a firstAvailable list; fewer keep the largest
# snapshot within SNAPSHOT_MAX_BYTES.
MAX_ALTERNATIVES = 3
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_GPU_PROFILE_NAME_SCHEMA = WithJsonSchema(
    {"type": "string", "pattern": PROFILE_NAME_RE.pattern, "not": {"const": CPU_ACCELERATOR}}
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


def _check_gpu_profile_name(value: str) -> str:
    check_profile_name(value)
    if value == CPU_ACCELERATOR:
        raise fail(
            f"{CPU_ACCELERATOR!r} is reserved for boxes without a GPU (image profiles' "
            "accelerators and the box list's profile filter name them so)"
        )
    return value


def _check_selector(value: str) -> str:
    problem = selector_problem(value)
    if problem:
        raise fail(problem)
    return value


def _group(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
GpuCount = Annotated[int, WholeNumber(1, MAX_GPU_COUNT)]


_EXISTS: JsonDict = {"properties": {"operator": {"const": "Exists"}}, "required": ["operator"]}


class Toleration(Model):
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
            AfterValidator(int_range(INT64_MIN, INT64_MAX)),
            integers(INT64_MIN, INT64_MAX),
        ]
        | None
    ) = None

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = []
        operator = lookup(raw, "operator")
        if operator is None:
            operator = "Equal"
        if operator == "Equal" and lookup(raw, "key") in (None, ""):
            found.append(((), "operator Equal needs a key"))
        if operator == "Exists" and lookup(raw, "value") is not None:
            found.append(((), "operator Exists cannot have a value"))
        seconds = lookup(raw, "toleration_seconds")
        if seconds is not None and lookup(raw, "effect") != "NoExecute":
            found.append(((), "tolerationSeconds is only allowed with effect NoExecute"))
        return found

    def to_kubernetes(self) -> dict[str, Any]:
        """The toleration as a pod spec entry, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True)


class DeviceAlternative(Model):
    """A device a DRA profile takes when the ones before it are not free."""

    device_class_name: DnsSubdomain
    selectors: list[Selector] = Field(default_factory=list, max_length=MAX_SELECTORS)
    count: GpuCount = 1

    def device_request(self) -> dict[str, Any]:
        """This alternative as a ResourceClaim's device request, without its name."""
        request: dict[str, Any] = {
            "deviceClassName": self.device_class_name,
            "allocationMode": "ExactCount",
            "count": self.count,
        }
        if self.selectors:
            request["selectors"] = [{"cel": {"expression": e}} for e in self.selectors]
        return request


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


class GpuProfileConfig(Model):
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
    devices: Description | None = None
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
            for index, first, group in repeats(lookup(raw, "supplemental_groups"), _group)
        ]
        resource = lookup(raw, "resource_name")
        device_class = lookup(raw, "device_class_name")
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
                if lookup(raw, key) not in (None, [])
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
        return snapshot_of(self)

    @classmethod
    def from_snapshot(cls, text: str) -> Self:
        """Read back a snapshot written by :meth:`snapshot_json`."""
        return read_snapshot(cls, text, "GPU profile")

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


class GpuSettings(Model):
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
    default_profile: Annotated[StrictStr, PROFILE_NAME_SCHEMA] | None = None
    profiles: list[GpuProfileConfig] = Field(default_factory=list, max_length=MAX_PROFILES)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        profiles = lookup(raw, "profiles")
        found = repeated_names(profiles, "profile")
        names = entry_names(profiles)
        default = lookup(raw, "default_profile")
        if isinstance(default, str) and default not in names:
            configured = ", ".join(names) or "none"
            found.append(
                (
                    ("defaultProfile",),
                    f"{default!r} is not a configured profile (configured: {configured})",
                )
            )
        if lookup(raw, "enabled") is True:
            if isinstance(profiles, list | None) and not profiles:
                found.append((("profiles",), "enabled: true needs at least one profile"))
            if default is None:
                found.append((("defaultProfile",), "enabled: true needs a defaultProfile"))
        return found

    def profile(self, name: str) -> GpuProfileConfig | None:
        return next((p for p in self.profiles if p.name == name), None)

    def sharing_devices(self, profile: GpuProfileConfig) -> list[str]:
        """The other profiles of the catalog whose boxes may take this one's devices:
        they ask for the same resource (or device class), and no node label keeps them
        apart (a label both select on with different values)."""
        asked = profile.resource_name or profile.device_class_name
        mine = profile.node_selector
        return [
            p.name
            for p in self.profiles
            if p.name != profile.name
            and (p.resource_name or p.device_class_name) == asked
            and all(mine[k] == v for k, v in p.node_selector.items() if k in mine)
        ]

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


class AvailabilitySettings(Model):
    # Watch every node and every pod of the cluster to count free GPUs. Needs the chart's
    # read-only ClusterRole; off, availability reports "unknown" and nothing else changes.
    enabled: StrictBool = True


class QueueSettings(Model):
    # backfill: a box that fits nowhere for want of CPU, memory or a pod slot beside a free
    # device, or of a device on the nodes it may use, lets the boxes behind it that fit go
    # first. strict: it stops its line, so larger boxes are never overtaken and devices
    # may stay idle.
    order: Literal["backfill", "strict"] = "backfill"
