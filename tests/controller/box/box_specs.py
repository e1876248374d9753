"""The box the tests of this folder render and read back."""

from __future__ import annotations

from datetime import datetime

from devboxes_controller.box.spec import BoxSpec
from devboxes_controller.config.gpu import GpuProfileConfig
from devboxes_controller.config.images import ImageProfileConfig

from devboxes_sdk.models import Preset


def atlas_spec(
    expires_at: datetime,
    gpu: GpuProfileConfig | None = None,
    *,
    preset: Preset = "small",
    ttl_hours: int = 4,
    image: ImageProfileConfig | None = None,
    owner: str | None = None,
) -> BoxSpec:
    """The box "atlas", made without a repository."""
    return BoxSpec(
        name="atlas",
        preset=preset,
        ttl_hours=ttl_hours,
        repository=None,
        expires_at=expires_at,
        gpu=gpu,
        image=image,
        owner=owner,
    )
