"""How a box's accelerator, environment, status and auto-stop time read, wherever Python shows them.

The ``devbox`` CLI, the Jupyter widgets and the controller's Kubernetes Events all use
these, so a box reads the same in a terminal, a notebook and ``kubectl describe``. The
Lab's sidebar and the dashboard say the same words in TypeScript
(``jupyter_ext/src/words.ts``); ``tests/jupyter/test_display_words.py`` compares them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from devboxes_sdk.models import (
    AllocatedDevice,
    DevboxState,
    GpuKind,
    ImageAllocation,
    ImageProfile,
    ProfileWhen,
    StopWarning,
)

CPU_ONLY = "CPU only"
# Spelled out so that no one "fixes" it into the letter x.
TIMES = "\N{MULTIPLICATION SIGN}"
DOT = "\N{MIDDLE DOT}"


class Accelerator(Protocol):
    """A profile, or the allocation it gives."""

    @property
    def display_name(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def kind(self) -> GpuKind: ...

    @property
    def resource_name(self) -> str: ...

    @property
    def devices(self) -> str | None: ...


def accelerator_label(gpu: Accelerator | None) -> str:
    """``NVIDIA L4 · 1 \N{MULTIPLICATION SIGN} nvidia.com/gpu``: a profile and the allocation it
    gives read alike; a DRA profile shows its devices line; ``CPU only`` for none."""
    if gpu is None:
        return CPU_ONLY
    if gpu.kind == "dra":
        return f"{gpu.display_name} {DOT} {gpu.devices or f'{gpu.count} {TIMES} device'}"
    return f"{gpu.display_name} {DOT} {gpu.count} {TIMES} {gpu.resource_name}"


def allocated_label(devices: Iterable[AllocatedDevice]) -> str:
    """``NVIDIA A100-SXM4-40GB (40Gi, alternative 1)``: what a DRA box actually got, one
    entry per allocated device; the profile's own device (alternative 0) is not marked."""
    parts = []
    for device in devices:
        notes = [device.memory] if device.memory else []
        if device.alternative:
            notes.append(f"alternative {device.alternative}")
        name = device.product or "unnamed device"
        parts.append(f"{name} ({', '.join(notes)})" if notes else name)
    return ", ".join(parts)


DEFAULT_ENVIRONMENT = "Default workspace"


def environment_choice_label(profile: ImageProfile) -> str:
    """An image profile as a create form offers it, with where it runs: ``CUDA 12.8
    workspace (as the workspace)`` replaces the workspace image, ``Web preview (beside the
    workspace)`` runs next to it."""
    where = "beside the workspace" if profile.mode == "sidecar" else "as the workspace"
    return f"{profile.display_name} ({where})"


def environment_label(image: ImageAllocation | None) -> str:
    """The environment pinned to a box: its image profile's display name, or the default."""
    return DEFAULT_ENVIRONMENT if image is None else image.display_name


def status_line(state: DevboxState, reason: str | None) -> str:
    """``starting — Scheduling blocked: ...``: the state, then why, if anything says so."""
    text = (reason or "").strip()
    return f"{state.value} — {text}" if text else state.value


def reason(summary: str | None, message: str | None) -> str | None:
    """The one line a box shows for why it is not ready: the controller's summary when it
    sends one (``Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line (estimate)``),
    else its message, which older controllers send alone."""
    return summary or message or None


def stale_notice(observed_at: datetime | None, now: datetime) -> str:
    """Said on top of a list the controller can no longer refresh, with how old it is."""
    if observed_at is None:
        listed = "No list of boxes yet"
    else:
        age = int((now - observed_at).total_seconds())
        listed = f"The list below is {'less than a minute' if age < 60 else _span(age)} old"
    return f"Controller unreachable. {listed}; actions are off until it answers again."


def elapsed_label(step_seconds: float, total_seconds: float) -> str:
    """How long a start's current step has lasted and how long since it was asked for:
    ``(4 s; 12 s in all)``, one figure while the first step lasts."""
    step, total = int(step_seconds), int(total_seconds)
    return f"({step} s)" if step == total else f"({step} s; {total} s in all)"


def _span(seconds: int) -> str:
    minutes = max(seconds // 60, 1)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min"


# What a warned stop is for, in the words the auto-stop label uses.
STOP_REASONS = {"ttl": "time to live", "idle": "idle"}


def auto_stop_label(
    state: DevboxState,
    expires_at: datetime | None,
    now: datetime,
    warning: StopWarning | None = None,
) -> str:
    """When a running box stops on its own: ``in 3 h 20 min``, ``due now`` or ``never``;
    a stop the controller has warned of, which may come before ``expires_at``, with its
    reason: ``in 9 min (idle)``."""
    if state is DevboxState.STOPPED:
        return "stopped"
    if warning is not None:
        return f"{_countdown(warning.stops_at, now)} ({STOP_REASONS[warning.reason]})"
    if expires_at is None:
        return "never"
    return _countdown(expires_at, now)


def _countdown(moment: datetime, now: datetime) -> str:
    remaining = int((moment - now).total_seconds())
    return "due now" if remaining <= 0 else f"in {_span(remaining)}"


def duration(seconds: float) -> str:
    """A coarse, human duration: ``45s``, ``12m``, ``23h``, ``3d``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m"
    if whole < 2 * 86400:
        return f"{whole // 3600}h"
    return f"{whole // 86400}d"


def next_free_label(entry: ProfileWhen | None, observed_at: datetime) -> str:
    """When a new box of a profile would get a device: ``now``, ``within 2h`` (the latest
    as things stand), ``about 2h`` (an estimate) or ``?``; ``devbox gpu when`` says why."""
    if entry is None or entry.free_at is None:
        return "?"
    seconds = (entry.free_at - observed_at).total_seconds()
    if seconds < 1:
        return "now"
    return f"{'within' if entry.bound else 'about'} {duration(seconds)}"
