"""Where ``--cluster auto`` puts a new box: a pure choice among what each cluster said.

A cluster where the profile has a device free beyond the boxes already waiting wins at
once (the first in configuration order); otherwise the one where the box would have the
fewest boxes ahead of it per device of the profile, then the first configured. A cluster
that does not offer the profile, has none of its devices, or cannot count them is never
chosen over one that can; it is chosen only when no cluster can count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from devboxes_sdk.errors import DevboxesError
from devboxes_sdk.models import GpuCapabilities, ProfileAvailability


@dataclass(frozen=True)
class Offer:
    """What one cluster that answered said about the profile a box asks for.

    ``profile`` is the profile the box would get there (the asked one, or that cluster's
    default), None when the cluster does not offer it; ``availability`` is None when the
    cluster did not count it."""

    cluster: str
    profile: str | None
    availability: ProfileAvailability | None


@dataclass(frozen=True)
class Placement:
    """The cluster chosen, the profile the box gets there, why there in one line, and a
    line for each cluster that could not be asked."""

    cluster: str
    profile: str | None
    reason: str
    unasked: tuple[str, ...] = ()


class NoPlacement(DevboxesError):
    """No cluster that answered can take the box."""


def offer(
    cluster: str,
    catalog: GpuCapabilities,
    counted: Sequence[ProfileAvailability] | None,
    asked: str | None,
) -> Offer:
    """The offer of a cluster whose GPU catalog is ``catalog``, for a box asking for
    profile ``asked`` (None: the cluster's default), with the counts it gave."""
    name = asked if asked is not None else catalog.default_profile
    offered = catalog.enabled and any(p.name == name for p in catalog.profiles)
    if not offered:
        return Offer(cluster, None, None)
    found = next((a for a in counted or () if a.name == name), None)
    return Offer(cluster, name, found)


def _ahead_per_device(found: ProfileAvailability) -> Fraction | None:
    if found.available is None or not found.capacity:
        return None
    return Fraction(max(found.waiting - found.available, 0), found.capacity)


def choose(offers: Sequence[Offer], asked: str | None) -> Placement:
    """The cluster to create in, from the offers in configuration order."""
    wanted = asked or "its default GPU profile"
    offering = [o for o in offers if o.profile is not None]
    if not offering:
        raise NoPlacement(
            f"no cluster that answered offers {wanted}"
            + (f" (asked: {', '.join(o.cluster for o in offers)})" if offers else "")
        )
    for candidate in offering:
        found = candidate.availability
        if found is not None and found.available is not None and found.available > found.waiting:
            free = found.available - found.waiting
            return Placement(
                candidate.cluster,
                candidate.profile,
                f"{candidate.cluster}: {candidate.profile} has {free} free now",
            )
    counted = [
        (ahead, index, o)
        for index, o in enumerate(offering)
        if o.availability is not None and (ahead := _ahead_per_device(o.availability)) is not None
    ]
    if counted:
        ahead, _, best = min(counted, key=lambda item: (item[0], item[1]))
        found = best.availability
        assert found is not None
        waiting = max(found.waiting - (found.available or 0), 0)
        return Placement(
            best.cluster,
            best.profile,
            f"{best.cluster}: no {best.profile} is free anywhere; fewest waiting ahead per "
            f"device there ({waiting} waiting for {found.capacity})",
        )
    first = offering[0]
    return Placement(
        first.cluster,
        first.profile,
        f"{first.cluster}: no cluster could count its free {first.profile}; the first "
        "configured that offers it",
    )
