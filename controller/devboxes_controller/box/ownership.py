"""Who owns a box: the person whose request created it.

The exact name is an annotation; a label carries a form of it Kubernetes accepts as a
label value, so that a person's objects can be selected. Boxes the operator token
creates, and boxes made before people existed, carry neither: they are the operator's.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

LABEL_OWNER = "devboxes.io/owner"
ANNOTATION_OWNER = "devboxes.io/owner"
# The owner's groups that the operator's limits name, as a JSON list: a box counts towards
# the limits of the groups its owner was in when the box was last created or started.
ANNOTATION_OWNER_GROUPS = "devboxes.io/owner-groups"
# The owner of a box without an owner annotation, and the name whoami gives the token.
OPERATOR = "operator"

_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def owner_label(user: str) -> str:
    """The user's name when it is a valid label value, else a readable part of it and a
    hash of the whole, so that two names never share a label."""
    if _LABEL_VALUE.fullmatch(user):
        return user
    readable = _UNSAFE.sub("-", user).strip("._-")[:40].rstrip("._-")
    digest = hashlib.sha256(user.encode()).hexdigest()[:12]
    return f"{readable}-{digest}" if readable else f"u-{digest}"


def owner_of(obj: dict[str, Any]) -> str:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    owner = annotations.get(ANNOTATION_OWNER)
    return owner if isinstance(owner, str) and owner else OPERATOR


def person(owner: str | None) -> str | None:
    """The person who owns a box, or None for the operator's boxes."""
    return None if owner is None or owner == OPERATOR else owner


def marks(owner: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations that record ``owner``; none for the operator."""
    owner = person(owner)
    if owner is None:
        return {}, {}
    return {LABEL_OWNER: owner_label(owner)}, {ANNOTATION_OWNER: owner}


def groups_record(groups: Sequence[str]) -> str:
    """The ``ANNOTATION_OWNER_GROUPS`` record of these groups."""
    return json.dumps(list(groups))


def groups_of(obj: Any) -> tuple[str, ...]:
    """The groups recorded on a box by ``groups_record``; none when unreadable."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    try:
        recorded = json.loads(annotations.get(ANNOTATION_OWNER_GROUPS) or "[]")
    except ValueError:
        return ()
    if not isinstance(recorded, list):
        return ()
    return tuple(sorted({g for g in recorded if isinstance(g, str)}))


def visible(obj: dict[str, Any], scope: str | None) -> bool:
    """Whether a caller who sees ``scope``'s boxes (every box when None) sees this one."""
    return scope is None or owner_of(obj) == scope


def owner_references(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    """Owner references that let the garbage collector remove an object with its box."""
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment["metadata"]["name"],
            "uid": deployment["metadata"]["uid"],
        }
    ]
