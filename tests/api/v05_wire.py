"""What Devboxes v0.5.0 clients (the CLI and the SDK of that release) decode of the API.

These clients decode strictly: a field they require must be present, non-null and of its
type, or the whole answer is refused, so one odd box breaks a whole list. They ignore
fields they do not know. The models below say exactly that and nothing more, so that an
answer of ours these models accept is one those clients can read. They describe another
program, not this one's contract (``devboxes_sdk.models``): validate answers with
``model_validate_json``, as a JSON decoder reads them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

# An unsigned 16-bit integer: ports and device counts.
U16 = Annotated[StrictInt, Field(ge=0, le=65535)]
# RFC 3339: a full date and time with its offset, which ISO 8601 alone does not require.
RFC_3339 = r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"


def _real_time(value: str) -> str:
    # The pattern lets 2026-13-45 through; the calendar does not.
    datetime.fromisoformat(value.upper())
    return value


Timestamp = Annotated[StrictStr, Field(pattern=RFC_3339), AfterValidator(_real_time)]


class _Decoded(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class Port(_Decoded):
    name: StrictStr
    container_port: U16
    protocol: StrictStr


class GpuProfile(_Decoded):
    name: StrictStr
    display_name: StrictStr
    description: StrictStr | None = None
    resource_name: StrictStr
    count: U16
    default: StrictBool


class GpuCapabilities(_Decoded):
    enabled: StrictBool
    default_profile: StrictStr | None = None
    profiles: list[GpuProfile]


class ImageProfile(_Decoded):
    name: StrictStr
    display_name: StrictStr
    mode: StrictStr
    description: StrictStr | None = None
    ports: list[Port] | None = None


class ImageCapabilities(_Decoded):
    enabled: StrictBool
    profiles: list[ImageProfile]


class Capabilities(_Decoded):
    """``GET /api/v1/capabilities``: no ``images`` means image profiles are off."""

    gpu: GpuCapabilities
    images: ImageCapabilities | None = None


class GpuAllocation(_Decoded):
    profile: StrictStr
    display_name: StrictStr
    resource_name: StrictStr
    count: U16


class ImageAllocation(_Decoded):
    profile: StrictStr
    display_name: StrictStr
    mode: StrictStr
    ports: list[Port] | None = None


class Devbox(_Decoded):
    """``GET /api/v1/devboxes/{name}`` and each item of the list."""

    name: StrictStr
    state: StrictStr
    storage_size: StrictStr
    preset: Literal["small", "medium", "large"]
    created_at: Timestamp
    expires_at: Timestamp
    # Required even while the box has no SSH address yet.
    ssh_port: U16
    pod_ready: StrictBool
    restarts: Annotated[StrictInt, Field(ge=0)]
    repository: StrictStr | None = None
    ssh_host: StrictStr | None = None
    ssh_command: StrictStr | None = None
    pod_name: StrictStr | None = None
    message: StrictStr | None = None
    gpu: GpuAllocation | None = None
    image: ImageAllocation | None = None


class DevboxList(_Decoded):
    """``GET /api/v1/devboxes``."""

    items: list[Devbox]


class DeleteResult(_Decoded):
    """``DELETE /api/v1/devboxes/{name}``."""

    message: StrictStr


class WhoAmI(_Decoded):
    """``GET /api/v1/whoami``."""

    user: StrictStr
    mode: StrictStr


def create_body(
    name: str, *, gpu: str | None = None, default_gpu: bool = False, image: str | None = None
) -> dict[str, Any]:
    """A create as those clients send it: every field they always send, ``gpu`` as ``{}``
    for the operator's default profile or ``{"profile": name}``, ``image`` by name."""
    body: dict[str, Any] = {"name": name, "preset": "small", "ttl_hours": 24, "repository": None}
    if default_gpu:
        body["gpu"] = {}
    elif gpu is not None:
        body["gpu"] = {"profile": gpu}
    if image is not None:
        body["image"] = image
    return body
