"""What a box's objects are rendered from, and its read-back from the record pinned on the
box's Deployment.

A box's GPU contract is the profile pinned in its Deployment's snapshot annotation, so
:func:`spec_from_deployment` rebuilds a spec from that annotation and never from the live
catalog; the same holds for its image profile and its main container.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from devboxes_sdk.models import PRESETS, Preset

from ..config.catalog import SnapshotError
from ..config.gpu import GpuProfileConfig
from ..config.images import ImageProfileConfig
from ..k8s.timestamps import format_timestamp, parse_timestamp
from . import ownership
from .host_key import published
from .naming import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_GPU_COUNT,
    ANNOTATION_GPU_DEVICE_CLASS,
    ANNOTATION_GPU_PROFILE,
    ANNOTATION_GPU_RESOURCE,
    ANNOTATION_GPU_SNAPSHOT,
    ANNOTATION_HOST_KEY,
    ANNOTATION_IMAGE_PROFILE,
    ANNOTATION_IMAGE_SNAPSHOT,
    ANNOTATION_PINNED_MAIN,
    ANNOTATION_PRESET,
    ANNOTATION_REPOSITORY,
    ANNOTATION_TTL_HOURS,
    LABEL_BOX,
    MAIN_CONTAINER,
    ObjectNames,
    box_name_of,
    canonical_json,
    object_names,
)

_PRESET_BY_NAME: dict[str, Preset] = {preset: preset for preset in PRESETS}
_Profile = TypeVar("_Profile", GpuProfileConfig, ImageProfileConfig)


@dataclass(frozen=True)
class PinnedMain:
    """The main container's image and resources, fixed when the box is created."""

    image: str
    resources: dict[str, dict[str, str]]

    def to_json(self) -> str:
        return canonical_json({"image": self.image, "resources": self.resources})


@dataclass(frozen=True)
class BoxSpec:
    """Everything the objects of one box are rendered from."""

    name: str
    preset: Preset
    ttl_hours: int
    repository: str | None
    expires_at: datetime
    gpu: GpuProfileConfig | None
    # None for a new box: rendered from the settings, then pinned.
    pinned: PinnedMain | None = None
    image: ImageProfileConfig | None = None
    # The person the box belongs to; None for the operator's boxes.
    owner: str | None = None
    # The box's SSH host public key as published; None for a box made before the
    # controller made host keys, whose sshd keeps its own.
    host_key: str | None = None
    # Made once with the spec: the names of the box's objects, the person who owns it
    # (None for the operator's boxes) and the labels and annotations that record them.
    names: ObjectNames = field(init=False, repr=False)
    person: str | None = field(init=False, repr=False)
    marks: tuple[dict[str, str], dict[str, str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", object_names(self.name))
        object.__setattr__(self, "person", ownership.person(self.owner))
        object.__setattr__(self, "marks", ownership.marks(self.owner))


def spec_from_deployment(deployment: dict[str, Any]) -> BoxSpec:
    """Rebuild a box's spec from its Deployment's annotations, the pinned contract.

    Used on start and on repair, so that catalog edits, a removed profile or GPU or image
    profiles being disabled never change an existing box. SnapshotError when an annotation
    is missing or unreadable.
    """
    metadata = deployment.get("metadata") or {}
    name = box_name_of(deployment)
    if name is None:
        raise SnapshotError(f"Deployment {metadata.get('name')!r} has no {LABEL_BOX} label")
    annotations: dict[str, Any] = metadata.get("annotations") or {}

    def required(key: str) -> str:
        value = annotations.get(key)
        if not isinstance(value, str) or not value:
            raise SnapshotError(f"box {name!r}: the {key} annotation is missing")
        return value

    preset_text = required(ANNOTATION_PRESET)
    preset = _PRESET_BY_NAME.get(preset_text)
    if preset is None:
        raise SnapshotError(
            f"box {name!r}: {ANNOTATION_PRESET} is {preset_text!r}, not one of {', '.join(PRESETS)}"
        )
    ttl_text = required(ANNOTATION_TTL_HOURS)
    if not (ttl_text.isascii() and ttl_text.isdigit()) or int(ttl_text) < 1:
        raise SnapshotError(
            f"box {name!r}: {ANNOTATION_TTL_HOURS} is {ttl_text!r}, not a whole number of hours"
        )
    expires_text = required(ANNOTATION_EXPIRES_AT)
    try:
        expires_at = parse_timestamp(expires_text)
    except ValueError:
        raise SnapshotError(
            f"box {name!r}: {ANNOTATION_EXPIRES_AT} is {expires_text!r}, not an RFC 3339 time"
        ) from None
    gpu = _pinned_profile(name, GpuProfileConfig, annotations.get(ANNOTATION_GPU_SNAPSHOT))
    image = _pinned_profile(name, ImageProfileConfig, annotations.get(ANNOTATION_IMAGE_SNAPSHOT))
    repository = annotations.get(ANNOTATION_REPOSITORY)
    pinned_text = annotations.get(ANNOTATION_PINNED_MAIN)
    owner = ownership.owner_of(deployment)
    return BoxSpec(
        name=name,
        preset=preset,
        ttl_hours=int(ttl_text),
        repository=repository if isinstance(repository, str) and repository else None,
        expires_at=expires_at,
        gpu=gpu,
        pinned=None if pinned_text is None else _read_pinned(name, pinned_text),
        image=image,
        owner=ownership.person(owner),
        host_key=next(iter(published(deployment)), None),
    )


def _pinned_profile(box: str, kind: type[_Profile], snapshot: object) -> _Profile | None:
    """The profile of ``kind`` pinned on the box, or None when it has none."""
    if snapshot is None:
        return None
    try:
        return kind.from_snapshot(str(snapshot))
    except SnapshotError as exc:
        raise SnapshotError(f"box {box!r}: {exc}") from None


def _read_pinned(box: str, text: str) -> PinnedMain:
    problem = f"box {box!r}: {ANNOTATION_PINNED_MAIN} is not an image and resources record"
    try:
        data = json.loads(text)
    except ValueError:
        raise SnapshotError(problem) from None
    image = data.get("image") if isinstance(data, dict) else None
    resources = data.get("resources") if isinstance(data, dict) else None
    if not isinstance(image, str) or not image or not isinstance(resources, dict):
        raise SnapshotError(problem)
    for kind, values in resources.items():
        if kind not in ("requests", "limits") or not isinstance(values, dict):
            raise SnapshotError(problem)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
            raise SnapshotError(problem)
    return PinnedMain(image=image, resources=resources)


def main_pins(template: dict[str, Any]) -> PinnedMain | None:
    """The main container's image and resources in a pod template, or None when it has
    no main container with an image."""
    for container in (template.get("spec") or {}).get("containers") or []:
        if container.get("name") == MAIN_CONTAINER and container.get("image"):
            resources = container.get("resources") or {}
            # A DRA box's claim follows its pinned profile, not these amounts.
            return PinnedMain(
                image=str(container["image"]),
                resources={
                    kind: {str(k): str(v) for k, v in (resources.get(kind) or {}).items()}
                    for kind in ("requests", "limits")
                },
            )
    return None


def pinned_from_template(deployment: dict[str, Any]) -> PinnedMain | None:
    """The main container's image and resources as deployed, for a box created before
    they were pinned in an annotation."""
    return main_pins((deployment.get("spec") or {}).get("template") or {})


def pin_annotations(spec: BoxSpec, template: dict[str, Any]) -> dict[str, str]:
    """The annotations that pin ``spec`` on its Deployment, read back by
    :func:`spec_from_deployment`; ``template`` is the pod template rendered from it."""
    annotations = {
        ANNOTATION_PRESET: spec.preset,
        ANNOTATION_TTL_HOURS: str(spec.ttl_hours),
        ANNOTATION_EXPIRES_AT: format_timestamp(spec.expires_at),
    }
    if spec.repository:
        annotations[ANNOTATION_REPOSITORY] = spec.repository
    if spec.gpu is not None:
        annotations[ANNOTATION_GPU_SNAPSHOT] = spec.gpu.snapshot_json()
        annotations[ANNOTATION_GPU_PROFILE] = spec.gpu.name
        if spec.gpu.resource_name is not None:
            annotations[ANNOTATION_GPU_RESOURCE] = spec.gpu.resource_name
        if spec.gpu.device_class_name is not None:
            annotations[ANNOTATION_GPU_DEVICE_CLASS] = spec.gpu.device_class_name
        annotations[ANNOTATION_GPU_COUNT] = str(spec.gpu.count)
    if spec.image is not None:
        annotations[ANNOTATION_IMAGE_SNAPSHOT] = spec.image.snapshot_json()
        annotations[ANNOTATION_IMAGE_PROFILE] = spec.image.name
    if spec.host_key is not None:
        annotations[ANNOTATION_HOST_KEY] = spec.host_key
    pinned = main_pins(template)
    if pinned is not None:
        annotations[ANNOTATION_PINNED_MAIN] = pinned.to_json()
    return annotations
