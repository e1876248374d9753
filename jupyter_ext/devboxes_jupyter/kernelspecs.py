"""Kernelspecs "Python 3 on <profile> (devbox)", one per GPU profile some node serves,
plus CPU only.

They live in a directory of the running server only (added to its kernel search path),
because the catalog belongs to the controller and may change while Jupyter runs.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from devboxes_jupyter.logo import chip_png
from devboxes_jupyter.provisioner import PROVISIONER_NAME
from devboxes_sdk import models

PREFIX = "devbox-"
CPU_KERNEL = f"{PREFIX}cpu"
# The sizes the Launcher and the kernel picker look for, as logo-WxH.png.
LOGO_SIZES = (32, 64)


def kernel_name(profile: models.GpuProfile | None) -> str:
    return CPU_KERNEL if profile is None else f"{PREFIX}{profile.name}"


def kernelspec(profile: models.GpuProfile | None, python: str) -> dict[str, Any]:
    """The kernel.json of one profile; ``python`` is the interpreter on the box."""
    where = "CPU" if profile is None else profile.display_name
    return {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 on {where} (devbox)",
        "language": "python",
        # Signals cannot cross SSH; the interrupt travels on the control channel.
        "interrupt_mode": "message",
        "metadata": {
            "kernel_provisioner": {
                "provisioner_name": PROVISIONER_NAME,
                "config": {"profile": "" if profile is None else profile.name},
            },
            "devboxes": {"profile": None if profile is None else profile.name},
        },
    }


def write_kernelspecs(
    directory: Path, profiles: Iterable[models.GpuProfile], python: str
) -> list[str]:
    """Make ``directory`` hold exactly the CPU kernelspec and one per profile."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted: dict[str, dict[str, Any]] = {CPU_KERNEL: kernelspec(None, python)}
    for profile in profiles:
        wanted[kernel_name(profile)] = kernelspec(profile, python)
    for stale in directory.iterdir():
        if stale.name.startswith(PREFIX) and stale.name not in wanted:
            shutil.rmtree(stale, ignore_errors=True)
    for name, spec in wanted.items():
        folder = directory / name
        folder.mkdir(exist_ok=True)
        for size in LOGO_SIZES:
            _replace(folder / f"logo-{size}x{size}.png", _logo(size))
        _replace(folder / "kernel.json", json.dumps(spec, indent=1).encode())
    return sorted(wanted)


def unservable(availability: models.GpuAvailability | None) -> dict[str, str]:
    """The profiles no node can serve, by name, each with the controller's reason.

    A kernel of such a profile could only fail, after waiting for a box that never gets a
    device. A count the controller cannot make (a DRA profile, a cluster it cannot see)
    holds nothing back, and neither does a controller without availability (None).
    """
    if availability is None:
        return {}
    return {
        entry.name: entry.reason or "no node offers its devices"
        for entry in availability.profiles
        if entry.capacity == 0
    }


@functools.cache
def _logo(size: int) -> bytes:
    return chip_png(size)


def _replace(path: Path, data: bytes) -> None:
    """Replaced atomically: the kernelspec listing may read the folder at any moment."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)
