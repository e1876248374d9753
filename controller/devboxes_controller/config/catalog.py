"""What the GPU and image catalogs share: profile names, the words people read, and the
snapshot of a profile that is pinned to a box.

The catalogs themselves are :mod:`.gpu` and :mod:`.images`.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    StrictStr,
    ValidationError,
    WithJsonSchema,
)

from .base import entry_name
from .violations import Violation, describe, fail, join, repeats

MAX_PROFILES = 32
MAX_DISPLAY_NAME = 80
MAX_DESCRIPTION = 160
# In an image profile's accelerators: boxes without a GPU.
CPU_ACCELERATOR = "cpu"

# Upper bound, in bytes, of GpuProfileConfig.snapshot_json() for any profile that passes
# validation. Every field of a profile is bounded, so the largest legal profile (every
# list full, every string at its length limit and made of characters that JSON escapes to
# the most bytes) is under 48 KiB; tests build the largest of each kind and check it fits.
# Kubernetes allows 256 KiB for all annotations of an object together.
# The same bound holds for ImageProfileConfig.snapshot_json(), whose largest legal profile
# is about 45 KiB (its command and arguments).
SNAPSHOT_MAX_BYTES = 64 * 1024

PROFILE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
# The default profile and the idle windows name profiles too. Their values are checked
# against the configured profiles, so only the schema checks their format.
PROFILE_NAME_SCHEMA = WithJsonSchema({"type": "string", "pattern": PROFILE_NAME_RE.pattern})


class SnapshotError(ValueError):
    """A pinned profile snapshot or box annotation cannot be read back."""


def check_profile_name(value: str) -> str:
    if not PROFILE_NAME_RE.fullmatch(value):
        raise fail(
            f"{value!r} is not a valid profile name: 1-40 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit"
        )
    return value


def repeated_names(profiles: object, what: str) -> list[Violation]:
    """One violation for each profile whose name an earlier one of ``profiles`` took;
    ``what`` names the catalog in the message ("profile", "image profile")."""
    return [
        (
            ("profiles", index, "name"),
            f"{what} name {name!r} is used more than once (also profiles[{first}]); "
            f"{what} names must be unique",
        )
        for index, first, name in repeats(profiles, entry_name)
    ]


def _check_display_name(value: str) -> str:
    if not value.strip():
        raise fail("must not be empty or blank")
    if len(value) > MAX_DISPLAY_NAME:
        raise fail(f"at most {MAX_DISPLAY_NAME} characters are allowed, got {len(value)}")
    return value


def _check_description(value: str) -> str:
    if len(value) > MAX_DESCRIPTION:
        raise fail(f"at most {MAX_DESCRIPTION} characters are allowed, got {len(value)}")
    return value


# What people read in a catalog, GPU or image: a name to show, and what it gives.
DisplayName = Annotated[
    StrictStr,
    AfterValidator(_check_display_name),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": MAX_DISPLAY_NAME, "pattern": r"\S"}
    ),
]
Description = Annotated[
    StrictStr,
    AfterValidator(_check_description),
    WithJsonSchema({"type": "string", "maxLength": MAX_DESCRIPTION}),
]


def _snapshot_value(value: Any) -> Any:
    """Drop None and empty collections, recursively, so the snapshot stays canonical."""
    if isinstance(value, dict):
        kept = {k: _snapshot_value(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not None and v != [] and v != {}}
    if isinstance(value, list):
        return [_snapshot_value(item) for item in value]
    return value


def snapshot_of(profile: BaseModel) -> str:
    """A profile as canonical JSON: camelCase keys, sorted; compact separators; unset and
    empty fields left out; non-ASCII text escaped."""
    data = _snapshot_value(profile.model_dump(by_alias=True))
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_Profile = TypeVar("_Profile", bound=BaseModel)


def read_snapshot(kind: type[_Profile], text: str, what: str) -> _Profile:
    """A profile read back from :func:`snapshot_of`; SnapshotError when it cannot be."""
    if len(text.encode("utf-8", "surrogatepass")) > SNAPSHOT_MAX_BYTES:
        raise SnapshotError(f"the {what} snapshot is larger than {SNAPSHOT_MAX_BYTES} bytes")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SnapshotError(f"the {what} snapshot is not valid JSON: {exc}") from None
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(join(tuple(e["loc"]), describe(e, kind)) for e in exc.errors())
        raise SnapshotError(f"the {what} snapshot is invalid: {problems}") from None
