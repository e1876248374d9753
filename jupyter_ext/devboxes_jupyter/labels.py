"""How the accelerator, environment and cluster choices read in the widgets: pure
functions over the wire models.

A box's accelerator, status and auto-stop time read as everywhere else in Python, through
:mod:`devboxes_sdk.labels`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from devboxes_sdk import models
from devboxes_sdk.config import AUTO_CLUSTER, CLUSTER_SEPARATOR
from devboxes_sdk.labels import (
    CPU_ONLY,
    DEFAULT_ENVIRONMENT,
    DOT,
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


# -- several clusters -------------------------------------------------------------------

# The cluster choice that lets the create go where a device is free: the SDK's
# ``cluster="auto"``, never a cluster's name.
ALL_CLUSTERS = "All clusters"
ALL_CLUSTERS_KEY = AUTO_CLUSTER


@dataclass(frozen=True)
class ClusterOffer:
    """What one cluster that answered offers a new box: its GPU catalog, its free counts
    (None when it does not count them) and its image profiles."""

    cluster: str
    gpu: models.GpuCapabilities
    availability: models.GpuAvailability | None = None
    images: models.ImageCapabilities = field(
        default_factory=lambda: models.ImageCapabilities(enabled=False)
    )


def cluster_options(names: Sequence[str]) -> list[tuple[str, str]]:
    """``(label, key)`` pairs: "All clusters" first, then every cluster by name."""
    return [(ALL_CLUSTERS, ALL_CLUSTERS_KEY), *((name, name) for name in names)]


def default_cluster_key(names: Sequence[str]) -> str:
    """The "All clusters" key when several are configured, else the one cluster."""
    return names[0] if len(names) == 1 else ALL_CLUSTERS_KEY


def free_text(entry: models.ProfileAvailability | None) -> str:
    """``0 of 2 free``, ``1 of 2 free, 3 waiting``, or ``free count unknown`` when the
    cluster cannot count the profile."""
    if entry is None or entry.available is None or entry.capacity is None:
        return "free count unknown"
    waiting = f", {entry.waiting} waiting" if entry.waiting else ""
    return f"{entry.available} of {entry.capacity} free{waiting}"


def _offering(offers: Sequence[ClusterOffer], name: str) -> list[ClusterOffer]:
    return [o for o in offers if o.gpu.enabled and any(p.name == name for p in o.gpu.profiles)]


def merged_profiles(offers: Sequence[ClusterOffer]) -> list[models.GpuProfile]:
    """Every profile some cluster offers, once by name, in the order the clusters (in
    configuration order) list them; each as the first cluster that offers it has it."""
    seen: dict[str, models.GpuProfile] = {}
    for offer in offers:
        if offer.gpu.enabled:
            for profile in offer.gpu.profiles:
                seen.setdefault(profile.name, profile)
    return list(seen.values())


def merged_gpu(offers: Sequence[ClusterOffer]) -> models.GpuCapabilities:
    """One catalog of every profile some cluster offers; no default, since each cluster
    has its own."""
    enabled = any(offer.gpu.enabled for offer in offers)
    return models.GpuCapabilities(enabled=enabled, profiles=merged_profiles(offers))


def merged_profile_label(profile: models.GpuProfile, offers: Sequence[ClusterOffer]) -> str:
    """``NVIDIA L4 — lab-a: 0 of 2 free · lab-b: 1 of 1 free``: the free count of each
    cluster that offers the profile, never summed."""
    counts = []
    for offer in _offering(offers, profile.name):
        found = offer.availability.profile(profile.name) if offer.availability else None
        counts.append(f"{offer.cluster}: {free_text(found)}")
    return f"{profile.display_name} — {f' {DOT} '.join(counts)}"


def merged_accelerator_options(offers: Sequence[ClusterOffer]) -> list[tuple[str, str]]:
    """``(label, key)`` pairs over every cluster: CPU only first, then every profile some
    cluster offers, with each cluster's free count."""
    options = [(CPU_ONLY, CPU_KEY)]
    options.extend((merged_profile_label(p, offers), p.name) for p in merged_profiles(offers))
    return options


GPU_DISABLED_EVERYWHERE_NOTE = (
    "GPU acceleration is disabled on every cluster that answered: new boxes get CPU only."
)
AUTO_NOTE = (
    "The box goes to the first cluster with one free now, else to the one where the "
    "fewest boxes wait per device."
)
AUTO_CPU_NOTE = "No accelerator: the box goes to the first cluster that answers."


def merged_accelerator_help(offers: Sequence[ClusterOffer], key: str) -> str:
    """The sentence under the accelerator choice over every cluster: the profile's
    description (from the first cluster that offers it) and where the box goes."""
    if not any(offer.gpu.enabled for offer in offers):
        return GPU_DISABLED_EVERYWHERE_NOTE
    for profile in merged_profiles(offers):
        if profile.name == key:
            text = profile.description or profile.display_name
            return f"{text}{'' if text.endswith(('.', '!', '?')) else '.'} {AUTO_NOTE}"
    return AUTO_CPU_NOTE


def merged_environment_options(offers: Sequence[ClusterOffer]) -> list[tuple[str, str]]:
    """Like :func:`environment_options`, over every image profile some cluster offers,
    once by name."""
    seen: dict[str, models.ImageProfile] = {}
    for offer in offers:
        if offer.images.enabled:
            for profile in offer.images.profiles:
                seen.setdefault(profile.name, profile)
    options = [(DEFAULT_ENVIRONMENT, DEFAULT_ENVIRONMENT_KEY)]
    options.extend((environment_choice_label(p), p.name) for p in seen.values())
    return options


def cluster_problem(cluster: str, message: str) -> str:
    """One line for a cluster that gave no answer: ``lab-c: did not answer in 3 s``."""
    return f"{cluster}: {message}"


def placement_line(name: str, reason: str) -> str:
    """Where a box went and why, from the create's reason (``lab-b: nvidia-l4 has 1
    free now``): ``created atlas on lab-b: nvidia-l4 has 1 free now``."""
    return f"created {name} on {reason}"


def box_on(name: str, cluster: str | None) -> str:
    """A box as the widgets name it: ``atlas``, or ``atlas@lab-b`` with several clusters."""
    return name if cluster is None else f"{name}{CLUSTER_SEPARATOR}{cluster}"
