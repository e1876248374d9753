"""Typed Python SDK for the Devboxes API.

Usage::

    from devboxes_sdk import Client

    client = Client()                       # DEVBOX_URL / DEVBOX_TOKEN or the config file
    box = client.create("atlas", gpu=True)  # the operator's default GPU profile
    print(box.wait_ready().ssh_command)
"""

from devboxes_sdk._version import __version__
from devboxes_sdk.client import Client, Devbox, GpuNamespace
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
