"""The controller's settings: the ``controller`` and ``gpu`` blocks of the Helm values.

Settings fail closed. Every rule is checked at start-up and every violation is reported
at once, as ``path: message`` with the key names an operator writes in the values file,
so a bad rollout never becomes Ready. Each block is a model in a module of its own
(:mod:`.gpu`, :mod:`.images`, :mod:`.boxes`, :mod:`.connections`, :mod:`.auth`,
:mod:`.limits`, :mod:`.bookings`, :mod:`.cluster`, :mod:`.usage`), built on the shared model of
:mod:`.base`; here are their root and the rules that relate several blocks. Value
formats are in :mod:`.formats`, the wording of violations in :mod:`.violations`, reading
files in :mod:`.loading` and the chart's values in :mod:`.chart_values`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError

from devboxes_sdk.models import PRESETS, Capabilities, ClusterIdentity, Preset

from .auth import AuthSettings
from .base import Model, entry_name, entry_names, lookup, raw_rules
from .bookings import BookingSettings
from .boxes import (
    DEFAULT_PRESETS,
    MAX_SIDECARS,
    IdleSettings,
    Presets,
    PresetSettings,
    Sidecar,
    SshSettings,
    TtlSettings,
)
from .catalog import CPU_ACCELERATOR
from .cluster import ClusterSettings
from .connections import ConnectionSettings
from .formats import DnsLabel, DnsSubdomain, Image
from .gpu import AvailabilitySettings, GpuSettings, QueueSettings
from .images import ImageSettings
from .limits import LimitSettings
from .stop_warnings import StopWarningSettings
from .usage import UsageSettings
from .violations import RULE_ERROR, Loc, Violation, config_error, describe, path, repeats


class Settings(Model):
    namespace: DnsLabel = "devboxes"
    workspace_image: Image = "devboxes/workspace:0.1.0"
    storage_class_name: DnsSubdomain | None = None
    ttl: TtlSettings = Field(default_factory=TtlSettings)
    ssh: SshSettings = Field(default_factory=SshSettings)
    presets: Presets = Field(default_factory=lambda: dict(DEFAULT_PRESETS))
    sidecars: list[Sidecar] = Field(default_factory=list, max_length=MAX_SIDECARS)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    images: ImageSettings = Field(default_factory=ImageSettings)
    availability: AvailabilitySettings = Field(default_factory=AvailabilitySettings)
    queue: QueueSettings = Field(default_factory=QueueSettings)
    idle: IdleSettings = Field(default_factory=IdleSettings)
    stop_warnings: StopWarningSettings = Field(default_factory=StopWarningSettings)
    bookings: BookingSettings = Field(default_factory=BookingSettings)
    connections: ConnectionSettings = Field(default_factory=ConnectionSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    usage: UsageSettings = Field(default_factory=UsageSettings)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        found: list[Violation] = (
            _idle_profile_rules(raw) + _accelerator_rules(raw) + _limit_rules(raw)
        )
        presets = lookup(raw, "presets")
        if isinstance(presets, Mapping):
            missing = [p for p in PRESETS if p not in presets]
            if missing:
                found.append(
                    (
                        ("presets",),
                        f"missing {', '.join(missing)}: when presets are given, all of "
                        f"{', '.join(PRESETS)} are required",
                    )
                )
        found += [
            (
                ("sidecars", index, "name"),
                f"sidecar name {name!r} is used more than once (also sidecars[{first}])",
            )
            for index, first, name in repeats(lookup(raw, "sidecars"), entry_name)
        ]
        return found

    def preset(self, name: Preset) -> PresetSettings:
        return self.presets[name]

    @property
    def counts_devices(self) -> bool:
        """Whether the controller watches the cluster's free devices; only then do box pods
        of extended-resource profiles wait behind the line's scheduling gate."""
        return self.availability.enabled and self.gpu.enabled

    def capabilities(self, cluster_id: str | None = None) -> Capabilities:
        """Discovery: the GPU and image catalogs as users may see them, and the cluster
        they are of: its configured name and ``cluster_id``, the id the controller read
        from it (None while it could not)."""
        return Capabilities(
            gpu=self.gpu.capabilities(),
            images=self.images.capabilities(),
            ssh_access=["tunnel", "service"] if self.ssh.has_service else ["tunnel"],
            cluster=ClusterIdentity(name=self.cluster.name, id=cluster_id),
        )


def _limit_rules(raw: Mapping[str, Any]) -> list[Violation]:
    """Device limits name what some profile requests; no group may outlast ttl.maxHours;
    budgets name configured GPU profiles and span no more days than the record keeps."""
    limits = lookup(raw, "limits")
    if not isinstance(limits, Mapping):
        return []
    gpu = lookup(raw, "gpu")
    profiles = lookup(gpu, "profiles") if isinstance(gpu, Mapping) else None
    requested = {
        key
        for profile in (profiles if isinstance(profiles, list) else [])
        if isinstance(profile, Mapping)
        for key in (lookup(profile, "resource_name"), lookup(profile, "device_class_name"))
        if isinstance(key, str)
    }
    offered = ", ".join(sorted(requested)) or "none"
    ttl = lookup(raw, "ttl")
    max_hours = lookup(ttl, "max_hours") if isinstance(ttl, Mapping) else None
    max_hours = 168 if max_hours is None else max_hours
    names = entry_names(profiles)
    usage = lookup(raw, "usage")
    kept = lookup(usage, "retention_days") if isinstance(usage, Mapping) else None
    kept = UsageSettings.model_fields["retention_days"].default if kept is None else kept
    quotas: list[tuple[Loc, object]] = [(("limits", "perPerson"), lookup(limits, "per_person"))]
    groups = lookup(limits, "groups")
    if isinstance(groups, Mapping):
        quotas += [(("limits", "groups", str(name)), quota) for name, quota in groups.items()]
    found: list[Violation] = []
    for loc, quota in quotas:
        if not isinstance(quota, Mapping):
            continue
        devices = lookup(quota, "devices")
        found += [
            (
                (*loc, "devices", str(key)),
                f"no GPU profile requests {key!r} (profiles request: {offered})",
            )
            for key in (devices if isinstance(devices, Mapping) else {})
            if key not in requested
        ]
        hours = lookup(quota, "max_ttl_hours")
        numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (hours, max_hours))
        if numbers and hours > max_hours:
            found.append(
                ((*loc, "maxTtlHours"), f"{hours} must not exceed ttl.maxHours ({max_hours})")
            )
        found += _budget_rules((*loc, "budgets"), lookup(quota, "budgets"), names, kept)
    return found


def _budget_rules(loc: Loc, budgets: object, names: list[str], kept: object) -> list[Violation]:
    """Each budget's profile is a configured GPU profile, its days at most
    usage.retentionDays."""
    found: list[Violation] = []
    configured = ", ".join(sorted(names)) or "none"
    kept_days = _whole(kept)
    for index, budget in enumerate(budgets if isinstance(budgets, list) else []):
        if not isinstance(budget, Mapping):
            continue
        profile, days = lookup(budget, "profile"), _whole(lookup(budget, "days"))
        if isinstance(profile, str) and profile not in names:
            found.append(
                (
                    (*loc, index, "profile"),
                    f"{profile!r} is not a configured GPU profile (configured: {configured})",
                )
            )
        if days is not None and kept_days is not None and days > kept_days:
            found.append(
                (
                    (*loc, index, "days"),
                    f"{days} must not exceed usage.retentionDays ({kept_days}): the record "
                    "of older days is deleted",
                )
            )
    return found


def _whole(value: object) -> int | None:
    """A whole number as the settings read one (2.0 is 2); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if float(value).is_integer() else None


def _idle_profile_rules(raw: Mapping[str, Any]) -> list[Violation]:
    """Idle windows may only name configured GPU profiles."""
    idle, gpu = lookup(raw, "idle"), lookup(raw, "gpu")
    profiles = lookup(idle, "profiles") if isinstance(idle, Mapping) else None
    if not isinstance(profiles, Mapping):
        return []
    names = entry_names(lookup(gpu, "profiles") if isinstance(gpu, Mapping) else None)
    configured = ", ".join(sorted(names)) or "none"
    return [
        (
            ("idle", "profiles", str(key)),
            f"{key!r} is not a configured GPU profile (configured: {configured})",
        )
        for key in profiles
        if key not in names
    ]


def _accelerator_rules(raw: Mapping[str, Any]) -> list[Violation]:
    """A workspace image profile's accelerators are configured GPU profiles or 'cpu'."""
    images, gpu = lookup(raw, "images"), lookup(raw, "gpu")
    profiles = lookup(images, "profiles") if isinstance(images, Mapping) else None
    if not isinstance(profiles, list):
        return []
    names = entry_names(lookup(gpu, "profiles") if isinstance(gpu, Mapping) else None)
    known = ", ".join([CPU_ACCELERATOR, *sorted(names)])
    found: list[Violation] = []
    for index, profile in enumerate(profiles):
        accelerators = lookup(profile, "accelerators") if isinstance(profile, Mapping) else None
        if not isinstance(accelerators, list):
            continue
        found += [
            (
                ("images", "profiles", index, "accelerators", position),
                f"{value!r} is neither {CPU_ACCELERATOR!r} nor a configured GPU profile "
                f"(known: {known})",
            )
            for position, value in enumerate(accelerators)
            if isinstance(value, str) and value != CPU_ACCELERATOR and value not in names
        ]
    return found


def validate(data: object) -> tuple[Settings | None, list[tuple[str, str]]]:
    """Settings from raw input, or None and every violation as ``(path, message)``."""
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        violations = [
            (path(tuple(e["loc"])), describe(e, Settings))
            for e in errors
            if e["type"] != RULE_ERROR
        ]
        violations += [(path(loc), message) for loc, message in raw_rules(Settings, data, ())]
        if not violations:
            # Only a model validator failed: report its own wording.
            violations = [(path(tuple(e["loc"])), describe(e, Settings)) for e in errors]
        return None, list(dict.fromkeys(violations))
    return settings, []


def settings_from_mapping(data: Mapping[str, object]) -> Settings:
    """Validate settings; ConfigError lists every violation, one ``path: message`` each."""
    settings, violations = validate(data)
    if settings is None:
        raise config_error(violations)
    return settings
