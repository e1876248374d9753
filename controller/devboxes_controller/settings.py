"""The controller's settings: the ``controller`` and ``gpu`` blocks of the Helm values.

Settings fail closed. Every GPU catalog rule (docs/controller.md, "GPU profiles") is
checked at start-up and every violation is reported at once, as ``path: message`` with
the key names an operator writes in the values file, so a bad rollout never becomes
Ready.

Two kinds of rules exist. Per-field rules (formats, ranges, unknown keys) are pydantic
validators, which already collect every failure. Rules that relate several values
(unique names, the default profile, toleration operator and value, ...) are written once
as ``_rules`` on each model and run twice: as a model validator, so that a model built
in code is always consistent, and over the raw input by :func:`settings_from_mapping`,
so that they are reported even when an unrelated field of the same model is invalid.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, Self, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from devboxes_sdk.models import (
    PRESETS,
    Capabilities,
    GpuAllocation,
    GpuCapabilities,
    GpuProfile,
    GpuRequest,
    Preset,
)

Loc = tuple[str | int, ...]
Violation = tuple[Loc, str]

MAX_PROFILES = 32
MAX_SUPPLEMENTAL_GROUPS = 8
MAX_NODE_SELECTOR = 16
MAX_TOLERATIONS = 16
MAX_SIDECARS = 8
MAX_IDLE_MINUTES = 7 * 24 * 60
# The sidecar that reports a box's activity; never a name in the settings' sidecars.
ACTIVITY_SIDECAR = "activity"
MAX_IMAGE_LENGTH = 512
MAX_GPU_COUNT = 64
MAX_GROUP_ID = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# Upper bound, in bytes, of GpuProfileConfig.snapshot_json() for any profile that passes
# validation. Every field of a profile is bounded, so the largest legal profile (every
# list full, every string at its length limit and made of characters that JSON escapes to
# twelve bytes) is under 24 KiB; a test builds that profile and checks it fits.
# Kubernetes allows 256 KiB for all annotations of an object together.
SNAPSHOT_MAX_BYTES = 32 * 1024

ENV_NAMESPACE = "DEVBOXES_NAMESPACE"
ENV_WORKSPACE_IMAGE = "DEVBOXES_WORKSPACE_IMAGE"
ENV_SSH_HOST = "DEVBOXES_SSH_HOST"

# The error type of a rule raised by a model validator. settings_from_mapping drops these
# because it reports the same rules from the raw input, with precise paths.
_RULE_ERROR = "devboxes_rule"
# The error type of a per-field rule; its message is shown as is.
_FIELD_ERROR = "devboxes_field"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_DNS_LABEL_RE = re.compile(rf"^{_DNS_LABEL}$")
_DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_QUALIFIED_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PROFILE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_QUANTITY_RE = re.compile(r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_WHITESPACE_RE = re.compile(r"\s")
# Keys shown after a dot in error paths; others (label keys, say) are shown quoted.
_PLAIN_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")

_QUANTITY_FACTORS: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

# Kubernetes reserves these domains for its own resource names and labels.
_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")
# Kubernetes checks extended resources again as "requests.<name>" for quotas, so the
# prefix must leave room for those nine characters within a 253-character subdomain.
_QUOTA_PREFIX = "requests."
_MAX_RESOURCE_PREFIX = 253 - len(_QUOTA_PREFIX)


class ConfigError(Exception):
    """The settings break one or more rules; ``violations`` lists every one."""

    def __init__(self, violations: list[str]) -> None:
        self.violations = list(violations)
        super().__init__("\n".join(self.violations))


class ProfileRejected(Exception):
    """A create asked for a GPU profile that cannot be used; the message suits a 422."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class SnapshotError(ValueError):
    """A pinned profile snapshot or box annotation cannot be read back."""


# --- per-field checks --------------------------------------------------------------------


def _fail(message: str) -> PydanticCustomError:
    return PydanticCustomError(_FIELD_ERROR, "{message}", {"message": message})


def _dns_label_problem(value: str) -> str | None:
    if len(value) > 63 or not _DNS_LABEL_RE.match(value):
        return (
            f"{value!r} is not a valid DNS label: 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def _dns_subdomain_problem(value: str) -> str | None:
    if len(value) > 253 or not _DNS_SUBDOMAIN_RE.match(value):
        return (
            f"{value!r} is not a valid DNS subdomain: at most 253 characters of "
            "dot-separated DNS labels (lowercase letters, digits and '-')"
        )
    return None


def _qualified_name_problem(value: str, what: str) -> str | None:
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or _dns_subdomain_problem(prefix)):
        return f"{value!r} is not a valid {what}: the prefix before '/' must be a DNS subdomain"
    if not _QUALIFIED_NAME_RE.match(name):
        return (
            f"{value!r} is not a valid {what}: the name must be 1-63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def _check_dns_label(value: str) -> str:
    problem = _dns_label_problem(value)
    if problem:
        raise _fail(problem)
    return value


def _check_dns_subdomain(value: str) -> str:
    problem = _dns_subdomain_problem(value)
    if problem:
        raise _fail(problem)
    return value


def _check_label_key(value: str) -> str:
    problem = _qualified_name_problem(value, "label key")
    if problem:
        raise _fail(problem)
    return value


def _check_label_value(value: str) -> str:
    if value and not _QUALIFIED_NAME_RE.match(value):
        raise _fail(
            f"{value!r} is not a valid label value: at most 63 letters, digits, '-', '_' "
            "or '.', starting and ending with a letter or digit"
        )
    return value


def _check_image(value: str) -> str:
    if not value:
        raise _fail("an image reference must not be empty")
    if len(value) > MAX_IMAGE_LENGTH:
        raise _fail(f"an image reference is at most {MAX_IMAGE_LENGTH} characters")
    if "://" in value:
        raise _fail(f"{value!r} is not an image reference: drop the scheme (no '://')")
    if _WHITESPACE_RE.search(value):
        raise _fail(f"{value!r} is not an image reference: it contains whitespace")
    return value


def _check_resource_name(value: str) -> str:
    prefix, slash, name = value.partition("/")
    if not slash:
        raise _fail(
            f"{value!r} is not vendor-qualified: use '<domain>/<name>', e.g. nvidia.com/gpu"
        )
    domain_problem = _dns_subdomain_problem(prefix)
    if domain_problem:
        raise _fail(f"{value!r}: the domain before '/' is invalid: {domain_problem}")
    for reserved in _RESERVED_DOMAINS:
        if prefix == reserved or prefix.endswith("." + reserved):
            raise _fail(
                f"{value!r} is in the {reserved} domain, which Kubernetes reserves; "
                "use the device plugin's vendor domain, e.g. nvidia.com/gpu"
            )
    if prefix.startswith(_QUOTA_PREFIX):
        raise _fail(f"{value!r} must not start with {_QUOTA_PREFIX!r}")
    if len(prefix) > _MAX_RESOURCE_PREFIX:
        raise _fail(
            f"the domain of {value!r} is longer than {_MAX_RESOURCE_PREFIX} characters, "
            "which Kubernetes cannot use for an extended resource"
        )
    if not _QUALIFIED_NAME_RE.match(name):
        raise _fail(
            f"{value!r}: the name after '/' must be 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return value


def _check_quantity(value: str) -> str:
    if not _QUANTITY_RE.match(value):
        raise _fail(f"{value!r} is not a Kubernetes quantity such as 250m, 2, 512Mi or 20Gi")
    if quantity_value(value) <= 0:
        raise _fail(f"{value!r} must be greater than zero")
    return value


def quantity_value(value: str) -> Decimal:
    """The numeric value of a quantity that matches the quantity rule (``2Gi`` -> 2**31)."""
    match = _QUANTITY_RE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    suffix = match.group(3) or ""
    return Decimal(value[: len(value) - len(suffix)]) * _QUANTITY_FACTORS[suffix]


def _whole_number(value: object) -> object:
    """Integers, and numbers like 2.0 that JSON Schema and Helm treat as the integer 2."""
    shown = json.dumps(value) if isinstance(value, bool | int | float) else repr(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"must be an integer, got {shown}")
    if isinstance(value, float):
        if not value.is_integer():
            raise _fail(f"must be an integer, got {shown}")
        return int(value)
    return value


def _int_range(low: int, high: int) -> Callable[[int], int]:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise _fail(f"must be between {low} and {high}, got {value}")
        return value

    return check


def _check_group(value: int) -> int:
    if value == 0:
        raise _fail("group 0 (root) is never allowed as a supplemental group")
    if not 1 <= value <= MAX_GROUP_ID:
        raise _fail(f"a group id must be between 1 and {MAX_GROUP_ID}, got {value}")
    return value


def _check_profile_name(value: str) -> str:
    if not _PROFILE_NAME_RE.match(value):
        raise _fail(
            f"{value!r} is not a valid profile name: 1-40 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit"
        )
    return value


def _check_display_name(value: str) -> str:
    if not value.strip():
        raise _fail("must not be empty or blank")
    if len(value) > 80:
        raise _fail(f"at most 80 characters are allowed, got {len(value)}")
    return value


def _check_description(value: str) -> str:
    if len(value) > 160:
        raise _fail(f"at most 160 characters are allowed, got {len(value)}")
    return value


def _check_env_name(value: str) -> str:
    if not _ENV_NAME_RE.match(value):
        raise _fail(
            f"{value!r} is not a valid environment variable name: letters, digits, '-', "
            "'_' and '.', not starting with a digit"
        )
    return value


DnsLabel = Annotated[StrictStr, AfterValidator(_check_dns_label)]
DnsSubdomain = Annotated[StrictStr, AfterValidator(_check_dns_subdomain)]
LabelKey = Annotated[StrictStr, AfterValidator(_check_label_key)]
LabelValue = Annotated[StrictStr, AfterValidator(_check_label_value)]
Image = Annotated[StrictStr, AfterValidator(_check_image)]
Quantity = Annotated[StrictStr, AfterValidator(_check_quantity)]
GroupId = Annotated[StrictInt, AfterValidator(_check_group)]
EnvName = Annotated[StrictStr, AfterValidator(_check_env_name)]


# --- models ------------------------------------------------------------------------------


def _lookup(raw: Mapping[str, Any], name: str) -> Any:
    """A field of raw input, by its camelCase key or its snake_case name."""
    alias = to_camel(name)
    return raw[alias] if alias in raw else raw.get(name)


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
            text = "; ".join(_join(loc, message) for loc, message in found)
            raise PydanticCustomError(_RULE_ERROR, "{text}", {"text": text})
        return self


class Toleration(_Model):
    key: LabelKey | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: (
        Annotated[StrictInt, AfterValidator(_int_range(INT64_MIN, INT64_MAX))] | None
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


class GpuProfileConfig(_Model):
    name: Annotated[StrictStr, AfterValidator(_check_profile_name)]
    display_name: Annotated[StrictStr, AfterValidator(_check_display_name)]
    description: Annotated[StrictStr, AfterValidator(_check_description)] | None = None
    resource_name: Annotated[StrictStr, AfterValidator(_check_resource_name)]
    count: Annotated[
        int, BeforeValidator(_whole_number), AfterValidator(_int_range(1, MAX_GPU_COUNT))
    ]
    workspace_image: Image | None = None
    runtime_class_name: DnsSubdomain | None = None
    supplemental_groups: list[GroupId] = Field(
        default_factory=list, max_length=MAX_SUPPLEMENTAL_GROUPS
    )
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=MAX_NODE_SELECTOR
    )
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_TOLERATIONS)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        groups = _lookup(raw, "supplemental_groups")
        if not isinstance(groups, list):
            return []
        found: list[Violation] = []
        first_index: dict[int, int] = {}
        for index, group in enumerate(groups):
            if not isinstance(group, int) or isinstance(group, bool):
                continue
            if group in first_index:
                found.append(
                    (
                        ("supplementalGroups", index),
                        f"group {group} is listed more than once "
                        f"(also supplementalGroups[{first_index[group]}])",
                    )
                )
            else:
                first_index[group] = index
        return found

    def snapshot_json(self) -> str:
        """The full resolved profile as canonical JSON: the pinned contract of a box.

        Keys are the camelCase keys of the Helm values, sorted; separators are compact;
        unset and empty fields are left out; non-ASCII text is escaped. At most
        ``SNAPSHOT_MAX_BYTES`` bytes for any valid profile.
        """
        data = _snapshot_value(self.model_dump(by_alias=True))
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    @classmethod
    def from_snapshot(cls, text: str) -> GpuProfileConfig:
        """Read back a snapshot written by :meth:`snapshot_json`."""
        if len(text.encode("utf-8", "surrogatepass")) > SNAPSHOT_MAX_BYTES:
            raise SnapshotError(
                f"the GPU profile snapshot is larger than {SNAPSHOT_MAX_BYTES} bytes"
            )
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SnapshotError(f"the GPU profile snapshot is not valid JSON: {exc}") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(_pydantic_violations(exc, cls, keep_rules=True))
            raise SnapshotError(f"the GPU profile snapshot is invalid: {problems}") from None

    def to_wire(self, default: bool) -> GpuProfile:
        """The profile as discovery shows it: never the image, runtime or scheduling."""
        return GpuProfile(
            name=self.name,
            display_name=self.display_name,
            description=self.description,
            resource_name=self.resource_name,
            count=self.count,
            default=default,
        )

    def allocation(self) -> GpuAllocation:
        """The accelerator pinned to a box, as the Devbox body reports it."""
        return GpuAllocation(
            profile=self.name,
            display_name=self.display_name,
            resource_name=self.resource_name,
            count=self.count,
        )


class GpuSettings(_Model):
    enabled: StrictBool = False
    default_profile: StrictStr | None = None
    profiles: list[GpuProfileConfig] = Field(default_factory=list, max_length=MAX_PROFILES)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = []
        profiles = _lookup(raw, "profiles")
        names: list[str] = []
        if isinstance(profiles, list):
            first_index: dict[str, int] = {}
            for index, profile in enumerate(profiles):
                name = _lookup(profile, "name") if isinstance(profile, Mapping) else None
                if not isinstance(name, str):
                    continue
                if name in first_index:
                    found.append(
                        (
                            ("profiles", index, "name"),
                            f"profile name {name!r} is used more than once (also "
                            f"profiles[{first_index[name]}]); profile names must be unique",
                        )
                    )
                else:
                    first_index[name] = index
                    names.append(name)
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
            raise ProfileRejected(f"unknown GPU profile {name!r}; available profiles: {available}")
        return profile

    def capabilities(self) -> Capabilities:
        """Discovery: profile names and what they give, never how they are scheduled."""
        if not self.enabled:
            return Capabilities(
                gpu=GpuCapabilities(enabled=False, default_profile=None, profiles=[])
            )
        return Capabilities(
            gpu=GpuCapabilities(
                enabled=True,
                default_profile=self.default_profile,
                profiles=[p.to_wire(p.name == self.default_profile) for p in self.profiles],
            )
        )


class PresetSettings(_Model):
    cpu: Quantity
    memory_request: Quantity
    memory_limit: Quantity
    storage: Quantity

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        request = _lookup(raw, "memory_request")
        limit = _lookup(raw, "memory_limit")
        if not (isinstance(request, str) and isinstance(limit, str)):
            return []
        if not (_QUANTITY_RE.match(request) and _QUANTITY_RE.match(limit)):
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
    # The chart renders an unset host as "", which means "use the address Kubernetes
    # reports", exactly like null.
    return None if value == "" else value


def _check_host(value: str) -> str:
    if len(value) > 253 or _WHITESPACE_RE.search(value):
        raise _fail(f"{value!r} is not a host name or address")
    return value


class SshSettings(_Model):
    service_type: Literal["NodePort", "LoadBalancer"] = "NodePort"
    # The address shown in ssh commands for NodePort Services; None shows none. For
    # LoadBalancer Services the Service's ingress address is used instead.
    host: Annotated[
        Annotated[StrictStr, AfterValidator(_check_host)] | None, BeforeValidator(_empty_host)
    ] = "127.0.0.1"
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
            raise _fail(f"entry {index} must be a mapping with exactly the keys 'name' and 'value'")
        if not isinstance(entry["name"], str):
            raise _fail(f"entry {index}: name must be a string, got {_show(entry['name'])}")
        if entry["name"] in env:
            raise _fail(f"entry {index}: {entry['name']!r} is set more than once")
        env[entry["name"]] = entry["value"]
    return env


class Sidecar(_Model):
    name: DnsLabel
    # None runs the release's workspace image; a GPU profile's image is never used here.
    image: Image | None = None
    command: list[StrictStr] = Field(default_factory=list)
    args: list[StrictStr] = Field(default_factory=list)
    env: Annotated[dict[EnvName, StrictStr], BeforeValidator(_env_entries)] = Field(
        default_factory=dict
    )

    @field_validator("name")
    @classmethod
    def _not_main(cls, value: str) -> str:
        if value == "devbox":
            raise _fail("'devbox' is the main container's name; pick another sidecar name")
        if value == ACTIVITY_SIDECAR:
            raise _fail(f"{ACTIVITY_SIDECAR!r} is the activity agent's name; pick another one")
        return value


class AvailabilitySettings(_Model):
    # Watch every node and every pod of the cluster to count free GPUs. Needs the chart's
    # read-only ClusterRole; off, availability reports "unknown" and nothing else changes.
    enabled: StrictBool = True


def _check_url(value: str) -> str:
    if not re.match(r"^https?://[^\s/?#]+(/[^\s?#]*)?$", value) or len(value) > 512:
        raise _fail(f"{value!r} is not an http:// or https:// URL without query or fragment")
    return value.rstrip("/")


IdleMinutes = Annotated[float, Field(gt=0, le=MAX_IDLE_MINUTES)]


class IdleSettings(_Model):
    """When running boxes that nobody uses are stopped, from their activity agent's reports.

    A box is idle while no SSH session is open, no Jupyter kernel is busy and, on a GPU
    box, GPU utilization is known and below the threshold. None never stops a box.
    """

    # GPU boxes whose profile has no entry in ``profiles``.
    stop_after_minutes: IdleMinutes | None = None
    # CPU boxes: off by default, since they hold no scarce device.
    cpu_stop_after_minutes: IdleMinutes | None = None
    profiles: dict[StrictStr, IdleMinutes] = Field(default_factory=dict)
    gpu_utilization_percent: Annotated[StrictInt, Field(ge=0, le=100)] = 5
    # Where agents reach the controller; the chart fills in its Service. Empty, as the
    # chart's default values have it, means unset, like an empty ssh.host.
    controller_url: Annotated[
        Annotated[StrictStr, AfterValidator(_check_url)] | None, BeforeValidator(_empty_host)
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


class Settings(_Model):
    namespace: DnsLabel = "devboxes"
    workspace_image: Image = "devboxes/workspace:0.1.0"
    storage_class_name: DnsSubdomain | None = None
    ttl: TtlSettings = Field(default_factory=TtlSettings)
    ssh: SshSettings = Field(default_factory=SshSettings)
    presets: dict[Preset, PresetSettings] = Field(default_factory=lambda: dict(DEFAULT_PRESETS))
    sidecars: list[Sidecar] = Field(default_factory=list, max_length=MAX_SIDECARS)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    availability: AvailabilitySettings = Field(default_factory=AvailabilitySettings)
    idle: IdleSettings = Field(default_factory=IdleSettings)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = _idle_profile_rules(raw)
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
        sidecars = _lookup(raw, "sidecars")
        if isinstance(sidecars, list):
            first_index: dict[str, int] = {}
            for index, sidecar in enumerate(sidecars):
                name = _lookup(sidecar, "name") if isinstance(sidecar, Mapping) else None
                if not isinstance(name, str):
                    continue
                if name in first_index:
                    found.append(
                        (
                            ("sidecars", index, "name"),
                            f"sidecar name {name!r} is used more than once "
                            f"(also sidecars[{first_index[name]}])",
                        )
                    )
                else:
                    first_index[name] = index
        return found

    def preset(self, name: Preset) -> PresetSettings:
        return self.presets[name]


def _idle_profile_rules(raw: Mapping[str, Any]) -> list[Violation]:
    """Idle windows may only name configured GPU profiles."""
    idle, gpu = _lookup(raw, "idle"), _lookup(raw, "gpu")
    profiles = _lookup(idle, "profiles") if isinstance(idle, Mapping) else None
    if not isinstance(profiles, Mapping):
        return []
    listed = _lookup(gpu, "profiles") if isinstance(gpu, Mapping) else None
    entries = listed if isinstance(listed, list) else []
    names = {_lookup(p, "name") for p in entries if isinstance(p, Mapping)}
    configured = ", ".join(sorted(str(n) for n in names if isinstance(n, str))) or "none"
    return [
        (
            ("idle", "profiles", str(key)),
            f"{key!r} is not a configured GPU profile (configured: {configured})",
        )
        for key in profiles
        if key not in names
    ]


# --- error reporting ---------------------------------------------------------------------


def _join(loc: Loc, message: str) -> str:
    path = _path(loc)
    return f"{path}: {message}" if path else message


def _path(loc: Loc) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            # pydantic marks a failing dict key; the message already says it is the key.
            continue
        elif _PLAIN_KEY_RE.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


def _unwrap(annotation: Any) -> Any:
    """The annotation without Annotated metadata and without ``| None``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, _Model)


def _field_name(model: type[_Model], key: str | int) -> str | None:
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return name
    return None


def _model_at(root: type[_Model], loc: Loc) -> type[_Model] | None:
    """The settings model that ``loc`` points into, for naming its allowed keys."""
    annotation: Any = root
    for part in loc:
        annotation = _unwrap(annotation)
        if _is_model(annotation):
            name = _field_name(annotation, part)
            if name is None:
                return None
            annotation = annotation.model_fields[name].annotation
        elif get_origin(annotation) is list:
            annotation = get_args(annotation)[0]
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        else:
            return None
    annotation = _unwrap(annotation)
    return annotation if _is_model(annotation) else None


def _show(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return type(value).__name__


def _describe(error: Mapping[str, Any], root: type[_Model]) -> str:
    kind = error["type"]
    loc: Loc = tuple(error["loc"])
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    given = error.get("input")
    if kind in (_FIELD_ERROR, _RULE_ERROR):
        return str(error["msg"])
    if kind == "extra_forbidden":
        key = loc[-1] if loc else ""
        model = _model_at(root, loc[:-1])
        if model is None:
            return f"unknown key {key!r}"
        allowed = [field.alias or name for name, field in model.model_fields.items()]
        hint = difflib.get_close_matches(str(key), allowed, n=1)
        suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
        return f"unknown key {key!r} (allowed: {', '.join(allowed)}){suggestion}"
    if kind == "missing":
        return "is required"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if kind == "int_type":
        return f"must be an integer, got {_show(given)}"
    if kind == "string_type":
        quote = "; quote it in YAML" if isinstance(given, int | float) else ""
        return f"must be a string, got {_show(given)}{quote}"
    if kind == "bool_type":
        return f"must be true or false, got {_show(given)}"
    if kind == "list_type":
        return f"must be a list, got {_show(given)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping, got {_show(given)}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, got {_show(given)}"
    if kind == "too_long":
        return (
            f"at most {ctx.get('max_length')} entries are allowed, got {ctx.get('actual_length')}"
        )
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}, got {_show(given)}"
    message = str(error["msg"])
    return message[:1].lower() + message[1:]


def _pydantic_violations(
    exc: ValidationError, root: type[_Model], *, keep_rules: bool = False
) -> list[str]:
    return [
        _join(tuple(error["loc"]), _describe(error, root))
        for error in exc.errors()
        if keep_rules or error["type"] != _RULE_ERROR
    ]


def _nested(annotation: Any) -> tuple[str, type[_Model]] | None:
    """How a field holds settings models: one, a list of them or a mapping to them."""
    annotation = _unwrap(annotation)
    if _is_model(annotation):
        return "one", annotation
    origin = get_origin(annotation)
    if origin in (list, dict):
        item = _unwrap(get_args(annotation)[-1])
        if _is_model(item):
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


def _validate(data: object) -> tuple[Settings | None, list[tuple[str, str]]]:
    """Validate settings; every violation as (path, message)."""
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        violations = [
            (_path(tuple(e["loc"])), _describe(e, Settings))
            for e in errors
            if e["type"] != _RULE_ERROR
        ]
        violations += [(_path(loc), message) for loc, message in _raw_rules(Settings, data, ())]
        if not violations:
            # Only a model validator failed: report its own wording.
            violations = [(_path(tuple(e["loc"])), _describe(e, Settings)) for e in errors]
        return None, list(dict.fromkeys(violations))
    return settings, []


def _raise(violations: list[tuple[str, str]]) -> NoReturn:
    raise ConfigError([f"{path}: {message}" if path else message for path, message in violations])


def settings_from_mapping(data: Mapping[str, object]) -> Settings:
    """Validate settings; ConfigError lists every violation, one ``path: message`` each."""
    settings, violations = _validate(data)
    if settings is None:
        _raise(violations)
    return settings


# --- files -------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key written twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"the key {key!r} is written more than once",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such settings file"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the settings file: {exc.strerror}"]) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML or JSON: {_yaml_problem(exc)}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping, got {_show(data)}"])
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        problem = exc.problem or exc.context or "syntax error"
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
        return problem
    return str(exc)


def load_settings(path: Path | None, environ: Mapping[str, str]) -> Settings:
    """Settings from a YAML or JSON file (None: all defaults) plus environment overrides.

    ``DEVBOXES_NAMESPACE``, ``DEVBOXES_WORKSPACE_IMAGE`` and ``DEVBOXES_SSH_HOST``, when
    set and not empty, replace ``namespace``, ``workspaceImage`` and ``ssh.host``.
    """
    data: dict[str, Any] = {} if path is None else _read_mapping(path)
    sources: dict[str, str] = {}
    for variable, key in ((ENV_NAMESPACE, "namespace"), (ENV_WORKSPACE_IMAGE, "workspaceImage")):
        if environ.get(variable):
            data.pop("workspace_image" if key == "workspaceImage" else key, None)
            data[key] = environ[variable]
            sources[key] = variable
    if environ.get(ENV_SSH_HOST):
        ssh = data.get("ssh")
        if ssh is None:
            data["ssh"] = {"host": environ[ENV_SSH_HOST]}
            sources["ssh.host"] = ENV_SSH_HOST
        elif isinstance(ssh, Mapping):
            data["ssh"] = {**ssh, "host": environ[ENV_SSH_HOST]}
            sources["ssh.host"] = ENV_SSH_HOST
    settings, violations = _validate(data)
    if settings is None:
        _raise([(f"{p} (from {sources[p]})" if p in sources else p, m) for p, m in violations])
    return settings


def load_check_target(path: Path) -> Settings:
    """Validate a settings file or a Helm values file, for ``check-config``.

    A Helm values file is recognised by its top-level ``controller:`` key; its
    ``controller`` and ``gpu`` blocks are checked and the other chart keys are left to
    the chart's JSON schema. Paths in errors then name the values keys.
    """
    data = _read_mapping(path)
    if "controller" not in data:
        settings, violations = _validate(data)
        if settings is None:
            _raise(violations)
        return settings
    controller = data["controller"]
    if controller is None:
        controller = {}
    if not isinstance(controller, Mapping):
        raise ConfigError([f"controller: must be a mapping, got {_show(controller)}"])
    misplaced: list[tuple[str, str]] = []
    if "gpu" in controller:
        misplaced.append(
            ("controller.gpu", "GPU profiles belong in the top-level gpu: block of the values")
        )
    merged = {k: v for k, v in controller.items() if k != "gpu"}
    # The chart replaces an empty namespace with the release namespace.
    if merged.get("namespace") == "":
        del merged["namespace"]
    merged["gpu"] = data.get("gpu", {})
    settings, violations = _validate(merged)
    named = [
        (p if p == "gpu" or p.startswith(("gpu.", "gpu[")) else f"controller.{p}", m)
        for p, m in violations
    ]
    if settings is None or misplaced:
        _raise(misplaced + named)
    return settings
