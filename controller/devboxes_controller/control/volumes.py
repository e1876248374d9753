"""Retained home volumes: claims that outlived their box, listed and purged on request.

A claim is retained when no Deployment of its box exists: the box was deleted without
``purge``, or a create died after writing the claim. Purging is always explicit; nothing
else deletes a claim.
"""

from __future__ import annotations

import logging

from devboxes_sdk.models import DeleteResult, Volume, VolumeList

from ..box import naming, ownership
from ..k8s.kube import Conflict, NotFound, Obj
from ..k8s.timestamps import parse_timestamp
from ..state.store import BoxStore
from .lifecycle import Lifecycle

log = logging.getLogger(__name__)


def _volume(claim: Obj, box: str) -> Volume:
    metadata = claim["metadata"]
    requests = ((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}
    capacity = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
    size = requests.get("storage") or capacity
    return Volume(
        name=box,
        claim=metadata["name"],
        size=str(size) if size else None,
        created_at=parse_timestamp(metadata["creationTimestamp"]),
        last_profile=(metadata.get("labels") or {}).get(naming.LABEL_GPU_PROFILE) or None,
        owner=ownership.owner_of(claim),
    )


def _retained_claim(store: BoxStore, claim: Obj) -> str | None:
    """The box name of a claim that no box uses, or None."""
    metadata = claim["metadata"]
    box = naming.box_name_of(claim)
    if box is None or metadata.get("deletionTimestamp"):
        return None
    if (metadata.get("labels") or {}).get(naming.LABEL_COMPONENT) != naming.COMPONENT_HOME:
        return None
    names = naming.object_names(box)
    if metadata["name"] != names.pvc:
        return None
    if store.deployment(names) is not None:
        return None
    return box


def retained(store: BoxStore, scope: str | None = None) -> VolumeList:
    """Every home claim without a box of ``scope`` (everyone's when None), oldest first."""
    found = []
    for claim in store.claims():
        box = _retained_claim(store, claim)
        if box is not None and ownership.visible(claim, scope):
            found.append(_volume(claim, box))
    found.sort(key=lambda v: (v.created_at, v.name))
    return VolumeList(items=found)


def purge(lifecycle: Lifecycle, name: str, scope: str | None = None) -> DeleteResult:
    """Delete the retained home volume of ``name``; a box that still exists keeps its own.
    Another person's volume (``scope`` set) is as absent as one that does not exist."""
    names = naming.object_names(name)
    pvc = names.pvc
    store = lifecycle.store
    claim = store.claim(names)
    if claim is not None and not ownership.visible(claim, scope):
        claim = None
    deployment = store.deployment(names)
    if deployment is not None and ownership.visible(deployment, scope):
        raise Conflict(
            f"devbox '{name}' still exists and uses {pvc}; delete the box with purge instead"
        )
    if claim is None or _retained_claim(store, claim) is None or not lifecycle.purge_claim(names):
        raise NotFound(f"no retained home volume for '{name}'")
    log.info("volume purged", extra={"box": name})
    return DeleteResult(name=name, purged=True, message=f"home volume {pvc} of '{name}' deleted")
