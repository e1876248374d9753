"""How boxes and accelerators read in the widgets: pure functions over the wire models."""

from __future__ import annotations

from datetime import datetime

from devboxes_sdk import models

CPU_ONLY = "CPU only"
# Spelled out so that no one "fixes" it into the letter x.
TIMES = "\N{MULTIPLICATION SIGN}"
DOT = "\N{MIDDLE DOT}"
# The option key of "no accelerator": a profile name can never be empty.
CPU_KEY = ""
GPU_DISABLED_NOTE = "GPU acceleration is disabled by the operator: new boxes get CPU only."
CPU_NOTE = "No accelerator: the box gets CPU and memory only."


def profile_label(profile: models.GpuProfile) -> str:
    """One line per profile: display name, count times resource, and a default mark."""
    label = f"{profile.display_name} {DOT} {profile.count} {TIMES} {profile.resource_name}"
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


def allocation_label(gpu: models.GpuAllocation | None) -> str:
    """The accelerator pinned to a box, in the same words as its profile's label."""
    if gpu is None:
        return CPU_ONLY
    return f"{gpu.display_name} {DOT} {gpu.count} {TIMES} {gpu.resource_name}"


def status_line(state: models.DevboxState, message: str | None) -> str:
    """``starting — Scheduling blocked: ...``: the state, then the controller's words."""
    text = (message or "").strip()
    return f"{state.value} — {text}" if text else state.value


def _span(seconds: int) -> str:
    minutes = max(seconds // 60, 1)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min"


def auto_stop_label(state: models.DevboxState, expires_at: datetime | None, now: datetime) -> str:
    """When a running box stops on its own: ``in 3 h 20 min``, ``due now`` or ``never``."""
    if state is models.DevboxState.STOPPED:
        return "stopped"
    if expires_at is None:
        return "never"
    remaining = int((expires_at - now).total_seconds())
    if remaining <= 0:
        return "due now"
    return f"in {_span(remaining)}"
