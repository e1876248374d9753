"""Per-person and per-group limits: whether a create or a start stays within them.

Pure: the holdings are read from the box caches by the caller. What counts:

- boxes: every box that exists, running or stopped;
- devices: the devices running boxes hold (their pinned profile's count), by the resource
  name or DRA device class name the profile requests;
- a group's holdings: the boxes whose owner was in the group when the box was last
  created or started (the group is recorded on the box then).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..box import naming, ownership
from ..config.limits import GroupLimits, LimitSettings, Quota
from ..k8s.kube import Conflict, rule_broken


@dataclass(frozen=True)
class Holding:
    owner: str
    groups: frozenset[str]
    running: bool
    device: str | None
    count: int


class Holdings:
    """What every box holds, each Deployment read once per resourceVersion: a create or a
    start under limits asks for all of them, and at 10,000 boxes reading every record
    again took tens of milliseconds under the limits lock. Not thread-safe: callers hold
    that lock."""

    def __init__(self) -> None:
        self._read: dict[Any, tuple[Any, Holding]] = {}

    def of(
        self, deployments: Sequence[Mapping[str, Any]], leaving_out: str | None = None
    ) -> list[Holding]:
        """The holdings of ``deployments`` but the one named ``leaving_out``; records of
        Deployments no longer among them are forgotten."""
        read = self._read
        found: list[Holding] = []
        for deployment in deployments:
            metadata = deployment.get("metadata") or {}
            name, version = metadata.get("name"), metadata.get("resourceVersion")
            kept = read.get(name)
            if kept is None or kept[0] != version:
                kept = read[name] = (version, holding(deployment))
            if name != leaving_out:
                found.append(kept[1])
        if len(read) > len(deployments):
            present = {(d.get("metadata") or {}).get("name") for d in deployments}
            self._read = {name: kept for name, kept in read.items() if name in present}
        return found


@dataclass(frozen=True)
class Asker:
    """The person a create or start is for, with the groups their provider gave."""

    person: str
    groups: frozenset[str]


@dataclass(frozen=True)
class Ask:
    asker: Asker
    # A create adds a box; a start only makes one run.
    new_box: bool
    device: str | None
    count: int


def limited_groups(limits: LimitSettings, groups: Iterable[str]) -> list[str]:
    """The groups of ``groups`` that the limits name, in a stable order."""
    return sorted(set(groups) & set(limits.groups))


def holding(deployment: Mapping[str, Any]) -> Holding:
    """What one box holds, from its Deployment's annotations."""
    metadata = deployment.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    count_text = annotations.get(naming.ANNOTATION_GPU_COUNT) or "0"
    device = annotations.get(naming.ANNOTATION_GPU_RESOURCE) or annotations.get(
        naming.ANNOTATION_GPU_DEVICE_CLASS
    )
    return Holding(
        owner=ownership.owner_of(dict(deployment)),
        groups=frozenset(ownership.groups_of(deployment)),
        running=not naming.is_stopped(deployment),
        device=device,
        count=int(count_text) if count_text.isdigit() else 0,
    )


def check_request(limits: LimitSettings, asker: Asker, preset: str, ttl_hours: int) -> None:
    """The preset and TTL bounds of the asker's groups; Invalid (422) when broken."""
    bounded = [(g, limits.groups[g]) for g in limited_groups(limits, asker.groups)]
    preset_groups = [(g, q) for g, q in bounded if q.presets is not None]
    if preset_groups and not any(preset in (q.presets or ()) for _, q in preset_groups):
        allowed = sorted({p for _, q in preset_groups for p in q.presets or ()})
        raise rule_broken(
            ["body", "preset"],
            f"preset {preset} is not allowed for your groups "
            f"({', '.join(g for g, _ in preset_groups)}); allowed: {', '.join(allowed)}",
        )
    ttl_groups = [(g, q.max_ttl_hours) for g, q in bounded if q.max_ttl_hours is not None]
    if ttl_groups:
        longest = max(hours for _, hours in ttl_groups if hours is not None)
        if ttl_hours > longest:
            raise rule_broken(
                ["body", "ttl_hours"],
                f"must be at most {longest} for your groups "
                f"({', '.join(g for g, _ in ttl_groups)})",
                "less_than_equal",
            )


def _over(quota: Quota, held: list[Holding], ask: Ask, whose: str) -> str | None:
    if ask.new_box and quota.boxes is not None and len(held) + 1 > quota.boxes:
        return (
            f"{whose} {len(held)} boxes, and the limit is {quota.boxes}; "
            "delete a box first (its home volume can be kept)"
        )
    if ask.device is None or ask.device not in quota.devices:
        return None
    limit = quota.devices[ask.device]
    running = sum(h.count for h in held if h.running and h.device == ask.device)
    if running + ask.count > limit:
        return (
            f"{whose} running boxes that hold {running} {ask.device}, this box needs "
            f"{ask.count}, and the limit is {limit}; stop a box first"
        )
    return None


def check_quota(limits: LimitSettings, ask: Ask, holdings: Iterable[Holding]) -> None:
    """Conflict (409) naming the limit a create or start would pass."""
    everything = list(holdings)
    mine = [h for h in everything if h.owner == ask.asker.person]
    refusal = _over(limits.per_person, mine, ask, "you have")
    for group in limited_groups(limits, ask.asker.groups):
        if refusal is not None:
            break
        quota: GroupLimits = limits.groups[group]
        members = [h for h in everything if group in h.groups]
        refusal = _over(quota, members, ask, f"group {group}'s members have")
    if refusal is not None:
        raise Conflict(refusal)
