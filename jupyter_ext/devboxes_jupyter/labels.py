"""How the accelerator and environment choices read in the widgets: pure functions over
the wire models.

A box's accelerator, status and auto-stop time read as everywhere else in Python, through
:mod:`devboxes_sdk.labels`.
"""

from __future__ import annotations

from devboxes_sdk import models
from devboxes_sdk.labels import (
    CPU_ONLY,
    DEFAULT_ENVIRONMENT,
    accelerator_label,
    environment_choice_label,
)

# The option key of "no accelerator": a profile name can never be empty.
CPU_KEY = ""
# The option key of "the operator's workspace image", for the same reason.
DEFAULT_ENVIRONMENT_KEY = ""
GPU_DISABLED_NOTE = "GPU acceleration is disabled by the operator: new boxes get CPU only."
CPU_NOTE = "No accelerator: the box gets CPU and memory only."


def profile_label(profile: models.GpuProfile) -> str:
    """One line per profile: display name, count times resource, and a default mark."""
    label = accelerator_label(profile)
    return f"{label} (default)" if profile.default else label


def accelerator_options(gpu: models.GpuCapabilities) -> list[tuple[str, str]]:
    """``(label, key)`` pairs: CPU only first, then every profile in catalog order."""
    options = [(CPU_ONLY, CPU_KEY)]
    if gpu.enabled:
        options.extend((profile_label(profile), profile.name) for profile in gpu.profiles)
    return options


def accelerator_help(gpu: models.GpuCapabilities, key: str) -> str:
    """The sentence under the accelerator choice: the profile's description or why CPU."""
    if not gpu.enabled:
        return GPU_DISABLED_NOTE
    for profile in gpu.profiles:
        if profile.name == key:
            return profile.description or profile_label(profile)
    return CPU_NOTE


def environment_options(images: models.ImageCapabilities) -> list[tuple[str, str]]:
    """``(label, key)`` pairs: the operator's workspace image first, then every image
    profile in catalog order, each saying whether it replaces the workspace or runs
    beside it."""
    options = [(DEFAULT_ENVIRONMENT, DEFAULT_ENVIRONMENT_KEY)]
    if images.enabled:
        options.extend((environment_choice_label(p), p.name) for p in images.profiles)
    return options
