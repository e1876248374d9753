"""What every box gets and how long it runs: the ``presets`` of CPU, memory and storage,
the ``sidecars`` beside its workspace, its ``ssh`` Service, its time to live (``ttl``)
and when it stops for idleness (``idle``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictInt, StrictStr, field_validator
from pydantic.config import JsonDict

from devboxes_sdk.models import PRESETS, Preset

from .base import Model, lookup
from .catalog import PROFILE_NAME_SCHEMA
from .formats import (
    DnsLabel,
    DnsSubdomain,
    EnvName,
    Host,
    HttpUrl,
    Image,
    Quantity,
    is_quantity,
    quantity_value,
)
from .violations import Violation, fail, show

MAX_SIDECARS = 8
MAX_IDLE_MINUTES = 7 * 24 * 60
# The sidecar that reports a box's activity; never a name in the settings' sidecars.
ACTIVITY_SIDECAR = "activity"
# The container of a sidecar-mode image profile; never a name in the settings' sidecars.
ENVIRONMENT_SIDECAR = "environment"
# The workspace's SSH server listens here in every box.
SSH_CONTAINER_PORT = 2222


class PresetSettings(Model):
    cpu: Quantity
    memory_request: Quantity
    memory_limit: Quantity
    storage: Quantity

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        request = lookup(raw, "memory_request")
        limit = lookup(raw, "memory_limit")
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

# Presets, when given, name all of them (the root settings' rules say which are missing).
Presets = Annotated[
    dict[Preset, PresetSettings], Field(json_schema_extra={"required": list(PRESETS)})
]


def _empty_host(value: object) -> object:
    # The chart renders an unset host as "": no host, exactly like null.
    return None if value == "" else value


# How a box's SSH Service is exposed; "None": boxes have no Service, and people reach
# them only through the controller's tunnel.
SshServiceType = Literal["NodePort", "LoadBalancer", "None"]


class SshSettings(Model):
    service_type: SshServiceType = "NodePort"
    # The address shown in ssh commands for NodePort Services. None by default, as in the
    # chart: only the operator knows which node address users reach. For LoadBalancer
    # Services the Service's ingress address is used instead.
    host: Annotated[Host | None, BeforeValidator(_empty_host)] = None
    # A Secret in the boxes' namespace whose key `authorized_keys` lists the public keys
    # allowed to log in as dev; mounted read-only into every box.
    authorized_keys_secret: DnsSubdomain | None = None

    @property
    def has_service(self) -> bool:
        """Whether each box gets an SSH Service of its own."""
        return self.service_type != "None"


# A time to live.
Hours = Annotated[StrictInt, Field(ge=1)]


class TtlSettings(Model):
    default_hours: Hours = 24
    max_hours: Hours = 168

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        default = lookup(raw, "default_hours")
        maximum = lookup(raw, "max_hours")
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
class _EnvEntry(Model):
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


class Sidecar(Model):
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


IdleMinutes = Annotated[float, Field(gt=0, le=MAX_IDLE_MINUTES)]


class IdleSettings(Model):
    """When running boxes that nobody uses are stopped, from their activity agent's reports.

    A box is idle while no SSH session is open, no Jupyter kernel is busy and, on a GPU
    box, GPU utilization is known and below the threshold. A window left unset never
    stops a box.
    """

    # GPU boxes whose profile has no entry in ``profiles``.
    stop_after_minutes: IdleMinutes | None = None
    # CPU boxes: off by default, since they hold no scarce device.
    cpu_stop_after_minutes: IdleMinutes | None = None
    profiles: dict[Annotated[StrictStr, PROFILE_NAME_SCHEMA], IdleMinutes] = Field(
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
        windows = [lookup(raw, "stop_after_minutes"), lookup(raw, "cpu_stop_after_minutes")]
        profiles = lookup(raw, "profiles")
        enabled = any(w is not None for w in windows) or bool(profiles)
        if enabled and lookup(raw, "controller_url") in (None, ""):
            return [(("controllerUrl",), "is required when boxes may be stopped for idleness")]
        return []

    def window(self, profile: str | None) -> float | None:
        """Minutes of idleness after which a box of this GPU profile (None: CPU) stops."""
        if profile is None:
            return self.cpu_stop_after_minutes
        return self.profiles.get(profile, self.stop_after_minutes)
