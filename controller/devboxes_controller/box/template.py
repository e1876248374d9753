"""A box's pod template as the release wants it now, and what differs from the deployed one.

Pure functions. The desired template is the box's pinned record (GPU profile snapshot,
preset, main image and resources) rendered with the release's current non-profile parts
(sidecars, hardening, mounts, environment). Stopped boxes are rebuilt at once by the
reconciler; a running box reports that a restart would apply the change.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..config.settings import Settings
from ..k8s.kube import Obj
from . import naming, render, template_hash
from .spec import pinned_from_template, spec_from_deployment


def desired(deployment: Obj, settings: Settings) -> Obj:
    """The box's Deployment rendered from its record and the current settings.

    SnapshotError when the record cannot be read.
    """
    spec = spec_from_deployment(deployment)
    if spec.pinned is None:
        spec = replace(spec, pinned=pinned_from_template(deployment))
    replicas = int((deployment.get("spec") or {}).get("replicas", 1))
    return render.render_deployment(spec, settings, replicas=replicas)


def container_names(deployment: Obj) -> set[str]:
    """The containers of the box's pod, from its template record or, for a box written
    before the record, from the deployed template: the cache keeps only the one it needs."""
    recorded = template_hash.recorded(deployment)
    if recorded is not None:
        prefix = "container:"
        return {part.removeprefix(prefix) for part in recorded if part.startswith(prefix)}
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {str(c.get("name")) for c in pod.get("containers") or []}


def reads_deployed_template(deployment: Obj) -> bool:
    """Whether this box's pod template as deployed is read: to compare it, when the box has
    no readable record of the template's parts, and for its main container, when the box
    has no pinned record of it. Only boxes written before those records qualify."""
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    return (
        template_hash.recorded(deployment) is None
        or naming.ANNOTATION_PINNED_MAIN not in annotations
    )


def _covers(wanted: Any, actual: Any) -> bool:
    """Whether ``actual`` holds everything of ``wanted``; the apiserver adds defaults."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            key in actual and _covers(value, actual[key]) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(actual, list)
            and len(wanted) == len(actual)
            and all(_covers(w, a) for w, a in zip(wanted, actual, strict=True))
        )
    return bool(wanted == actual)


def _changed_parts(deployment: Obj, wanted: Obj) -> list[tuple[str, str]]:
    """(part, how) for every part of the template that differs between the box's
    ``deployment`` and the Deployment the release ``wanted``: added, removed, changed."""
    hashes = template_hash.recorded(wanted) or {}
    recorded = template_hash.recorded(deployment)
    if recorded is not None:
        # The record the box has against the record the release would write.
        differs = {part for part in hashes if hashes[part] != recorded.get(part)}
        present = set(recorded)
    else:
        # A box written before the template record: compare with the deployed template.
        parts = template_hash.parts(wanted["spec"]["template"])
        actual = template_hash.parts((deployment.get("spec") or {}).get("template") or {})
        differs = {p for p in parts if p not in actual or not _covers(parts[p], actual[p])}
        present = set(actual)
    found = [(p, "added" if p not in present else "changed") for p in sorted(differs)]
    found += [(p, "removed") for p in sorted(present - set(hashes))]
    return found


def _describe(part: str, how: str) -> str:
    if part == f"container:{naming.MAIN_CONTAINER}":
        return "the main container's environment, mounts or security settings changed"
    if part.startswith("container:"):
        return f"sidecar {part.removeprefix('container:')} {how}"
    if part == "volumes":
        return "the pod's volumes changed"
    return "the pod's security or scheduling settings changed"


def changes(deployment: Obj, settings: Settings) -> list[str]:
    """What the release changed in this box's pod template; empty when it is current."""
    wanted = desired(deployment, settings)
    return [_describe(part, how) for part, how in _changed_parts(deployment, wanted)]


def restart_reason(deployment: Obj, settings: Settings) -> str | None:
    """For a running box: why a stop and start would change its pod, or None."""
    found = changes(deployment, settings)
    if not found:
        return None
    return f"The release changed this box: {'; '.join(found)}. Stop and start it to apply."


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def rebuild_patch(deployment: Obj, settings: Settings) -> list[Obj]:
    """A JSON patch that replaces the pod template with the desired one.

    It applies only to the Deployment it was computed from: one deleted and created
    again under the same name (with another record) is left alone.
    """
    wanted = desired(deployment, settings)
    annotations = wanted["metadata"]["annotations"]
    return [
        {"op": "test", "path": "/metadata/uid", "value": deployment["metadata"]["uid"]},
        {"op": "replace", "path": "/spec/template", "value": wanted["spec"]["template"]},
        *(
            {
                "op": "add",
                "path": f"/metadata/annotations/{_pointer(key)}",
                "value": annotations[key],
            }
            for key in (naming.ANNOTATION_PINNED_MAIN, naming.ANNOTATION_TEMPLATE)
        ),
    ]
