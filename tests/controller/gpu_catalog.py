"""GPU profiles as the settings write them (camelCase keys), for the tests of the settings
and of what the controller renders and decides from them."""

from __future__ import annotations

from typing import Any


def gpu_profile(name: str, display_name: str, **fields: Any) -> dict[str, Any]:
    """A profile of one whole ``nvidia.com/gpu``; ``fields`` (camelCase) add keys or replace
    the resource and the count."""
    return {
        "name": name,
        "displayName": display_name,
        "resourceName": "nvidia.com/gpu",
        "count": 1,
        **fields,
    }


# An L4 with its optional fields set, so that each can be followed into what is rendered
# or checked to stay out of what people read.
DEDICATED_L4 = gpu_profile(
    "nvidia-l4",
    "NVIDIA L4",
    description="One dedicated L4",
    workspaceImage="ghcr.io/example/devboxes-workspace-cuda:12.8",
    runtimeClassName="nvidia",
    supplementalGroups=[44, 109],
    nodeSelector={"accelerator": "nvidia-l4"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
)
