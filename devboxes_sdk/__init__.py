"""Typed Python SDK for the Devboxes API.

Usage::

    from devboxes_sdk import Client

    client = Client()                       # DEVBOX_URL / DEVBOX_TOKEN or the config file
    box = client.create("atlas", gpu=True)  # the operator's default GPU profile
    print(box.wait_ready().ssh_command)

The names below are loaded when first used (PEP 562): ``python -m devboxes_sdk``, which
ssh starts on every login, must not pay for the client, requests and pydantic before it
knows it needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devboxes_sdk._version import __version__
    from devboxes_sdk.client import Client, Devbox, GpuNamespace
    from devboxes_sdk.clusters import Clusters
    from devboxes_sdk.errors import (
        ApiError,
        AuthenticationError,
        BoxDegraded,
        BoxNotReady,
        BoxStopped,
        ConfigurationError,
        Conflict,
        DevboxesError,
        ListExpired,
        NotADevboxesServer,
        NotConfigured,
        NotFound,
        PermissionDenied,
        StartTimeout,
        Unavailable,
        ValidationError,
    )
    from devboxes_sdk.models import (
        Activity,
        AllocatedDevice,
        Capabilities,
        DeleteResult,
        DevboxState,
        DoctorCheck,
        DoctorReport,
        FieldError,
        GpuAllocation,
        GpuAvailability,
        GpuCapabilities,
        GpuProfile,
        ImageAllocation,
        ImageCapabilities,
        ImagePort,
        ImageProfile,
        ProfileAvailability,
        Volume,
        WhoAmI,
    )

# Each public name and the module that defines it.
_LAZY: dict[str, str] = {
    "__version__": "devboxes_sdk._version",
    "Client": "devboxes_sdk.client",
    "Devbox": "devboxes_sdk.client",
    "GpuNamespace": "devboxes_sdk.client",
    "Clusters": "devboxes_sdk.clusters",
    "ApiError": "devboxes_sdk.errors",
    "AuthenticationError": "devboxes_sdk.errors",
    "BoxDegraded": "devboxes_sdk.errors",
    "BoxNotReady": "devboxes_sdk.errors",
    "BoxStopped": "devboxes_sdk.errors",
    "ConfigurationError": "devboxes_sdk.errors",
    "Conflict": "devboxes_sdk.errors",
    "DevboxesError": "devboxes_sdk.errors",
    "ListExpired": "devboxes_sdk.errors",
    "NotADevboxesServer": "devboxes_sdk.errors",
    "NotConfigured": "devboxes_sdk.errors",
    "NotFound": "devboxes_sdk.errors",
    "PermissionDenied": "devboxes_sdk.errors",
    "StartTimeout": "devboxes_sdk.errors",
    "Unavailable": "devboxes_sdk.errors",
    "ValidationError": "devboxes_sdk.errors",
    "Activity": "devboxes_sdk.models",
    "AllocatedDevice": "devboxes_sdk.models",
    "Capabilities": "devboxes_sdk.models",
    "DeleteResult": "devboxes_sdk.models",
    "DevboxState": "devboxes_sdk.models",
    "DoctorCheck": "devboxes_sdk.models",
    "DoctorReport": "devboxes_sdk.models",
    "FieldError": "devboxes_sdk.models",
    "GpuAllocation": "devboxes_sdk.models",
    "GpuAvailability": "devboxes_sdk.models",
    "GpuCapabilities": "devboxes_sdk.models",
    "GpuProfile": "devboxes_sdk.models",
    "ImageAllocation": "devboxes_sdk.models",
    "ImageCapabilities": "devboxes_sdk.models",
    "ImagePort": "devboxes_sdk.models",
    "ImageProfile": "devboxes_sdk.models",
    "ProfileAvailability": "devboxes_sdk.models",
    "Volume": "devboxes_sdk.models",
    "WhoAmI": "devboxes_sdk.models",
}

__all__ = [
    "Activity",
    "AllocatedDevice",
    "ApiError",
    "AuthenticationError",
    "BoxDegraded",
    "BoxNotReady",
    "BoxStopped",
    "Capabilities",
    "Client",
    "Clusters",
    "ConfigurationError",
    "Conflict",
    "DeleteResult",
    "Devbox",
    "DevboxState",
    "DevboxesError",
    "DoctorCheck",
    "DoctorReport",
    "FieldError",
    "GpuAllocation",
    "GpuAvailability",
    "GpuCapabilities",
    "GpuNamespace",
    "GpuProfile",
    "ImageAllocation",
    "ImageCapabilities",
    "ImagePort",
    "ImageProfile",
    "ListExpired",
    "NotADevboxesServer",
    "NotConfigured",
    "NotFound",
    "PermissionDenied",
    "ProfileAvailability",
    "StartTimeout",
    "Unavailable",
    "ValidationError",
    "Volume",
    "WhoAmI",
    "__version__",
]
# The submodules that importing the package used to load as a side effect, so that
# ``import devboxes_sdk`` then ``devboxes_sdk.models`` still works.
_SUBMODULES = frozenset(
    {"_transport", "_version", "client", "config", "errors", "labels", "models", "tunnel"}
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
