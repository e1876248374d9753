"""A pod template cut into the parts a release change is reported by, and the record of
each part's hash that a box's Deployment carries, to tell later what a release changed."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..k8s.kube import Obj
from .naming import ANNOTATION_TEMPLATE, canonical_json


def parts(template: dict[str, Any]) -> dict[str, Any]:
    """Each container, the volumes, and the rest of the pod, by part name."""
    pod = dict(template.get("spec") or {})
    found: dict[str, Any] = {
        f"container:{c.get('name')}": c for c in pod.pop("containers", None) or []
    }
    found["volumes"] = pod.pop("volumes", None) or []
    found["pod"] = {"metadata": template.get("metadata") or {}, "spec": pod}
    return found


def record(template: dict[str, Any]) -> str:
    """The annotation value: each part's hash."""
    return canonical_json(
        {
            part: hashlib.sha256(canonical_json(value).encode()).hexdigest()[:16]
            for part, value in parts(template).items()
        }
    )


def recorded(deployment: Obj) -> dict[str, str] | None:
    """The hashes a Deployment's record holds; None without a readable one."""
    text = ((deployment.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_TEMPLATE)
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        return None
    return data
