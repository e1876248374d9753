"""How each object of a box is written: idempotently, never over another owner's object,
and never onto an object an earlier box of the same name left behind.

The objects come rendered and complete (:func:`~..box.render.box`); which ones a verb
writes, and when, is the lifecycle's.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from ..box import naming, ownership, ssh_port
from ..config.formats import quantity_value
from ..k8s import kube
from ..k8s.kube import RETRY_AFTER_SECONDS, ApiProblem, Conflict, NotFound, Obj
from ..state.store import BoxStore
from .events import Events

log = logging.getLogger(__name__)


class BoxWriter:
    def __init__(self, store: BoxStore, api: kube.Apis, events: Events) -> None:
        self._store = store
        self._namespace = store.settings.namespace
        self._core = api.core
        self._apps = api.apps
        self._resource = api.resource
        self._events = events

    # -- the Deployment ------------------------------------------------------------------
    def create_deployment(self, wanted: Obj) -> Obj:
        """The Deployment as created; Conflict when its name is taken."""
        return kube.write(self._apps.create_namespaced_deployment, self._namespace, wanted)

    def read_deployment(self, name: str) -> Obj:
        """The Deployment ``name`` as the apiserver holds it now, past the cache."""
        return kube.call(self._apps.read_namespaced_deployment, name, self._namespace)

    def patch(self, deployment: Obj, patch: Obj | list[Obj]) -> Obj:
        """Patch the box's Deployment; the updated one, once the cache has seen it."""
        updated = kube.write(
            self._apps.patch_namespaced_deployment,
            deployment["metadata"]["name"],
            self._namespace,
            patch,
        )
        self._store.has_seen(updated)
        return updated

    def annotate_pods(self, names: naming.ObjectNames, annotations: dict[str, str]) -> int:
        """Annotate the box's pods the cache knows; how many took it. A pod gone or a
        failed write is logged and skipped: what this carries is a courtesy."""
        done = 0
        for pod in self._store.pods(names):
            try:
                kube.write(
                    self._core.patch_namespaced_pod,
                    pod["metadata"]["name"],
                    self._namespace,
                    {"metadata": {"annotations": annotations}},
                )
            except NotFound:
                continue
            except ApiProblem as err:
                log.warning("box pod not annotated", extra={"box": names.box, "error": err.detail})
                continue
            done += 1
        return done

    # -- the home claim ------------------------------------------------------------------
    def claim(self, wanted: Obj, existing: Obj | None) -> bool:
        """Create the home claim, or reuse a retained one of the same owner and grow it;
        never shrink it. True when this call created the claim."""
        name = wanted["metadata"]["name"]
        if existing is None:
            try:
                kube.write(
                    self._core.create_namespaced_persistent_volume_claim, self._namespace, wanted
                )
                return True
            except Conflict:
                # Another create won the name first (on this replica or another, which the
                # cache has not shown yet): its claim is reused only if it is ours.
                try:
                    existing = kube.call(
                        self._core.read_namespaced_persistent_volume_claim, name, self._namespace
                    )
                except NotFound:
                    raise Conflict(
                        f"the home volume {name} changed while this request was made; retry",
                        retry_after=RETRY_AFTER_SECONDS,
                    ) from None
        refuse_foreign_claim(wanted, existing)
        patch: Obj = {}
        size = wanted["spec"]["resources"]["requests"]["storage"]
        current = existing["spec"]["resources"]["requests"]["storage"]
        if quantity_value(size) > quantity_value(current):
            patch["spec"] = {"resources": {"requests": {"storage": size}}}
        profile = wanted["metadata"]["labels"].get(naming.LABEL_GPU_PROFILE)
        if (existing["metadata"].get("labels") or {}).get(naming.LABEL_GPU_PROFILE) != profile:
            # None removes the label: a CPU box now owns a volume a GPU box used before.
            patch["metadata"] = {"labels": {naming.LABEL_GPU_PROFILE: profile}}
        if patch:
            kube.write(
                self._core.patch_namespaced_persistent_volume_claim, name, self._namespace, patch
            )
        return False

    # -- what belongs to the Deployment --------------------------------------------------
    def service(self, wanted: Obj, deployment: Obj) -> bool:
        """Create the box's SSH Service, on the node port recorded when it stopped if it
        has one and that port is still free. True when this call created it."""
        port = ssh_port.recorded(deployment) if self.node_ports else None

        def create() -> None:
            if port is None:
                kube.write(self._core.create_namespaced_service, self._namespace, wanted)
            else:
                self._create_on_port(wanted, port, deployment)

        return self._create_owned(
            create,
            self._core.read_namespaced_service,
            self._core.delete_namespaced_service,
            wanted["metadata"]["name"],
            deployment,
        )

    @property
    def node_ports(self) -> bool:
        """Whether users reach boxes on node ports, which are then worth keeping."""
        return self._store.settings.ssh.service_type == "NodePort"

    def _create_on_port(self, service: Obj, port: int, deployment: Obj) -> None:
        try:
            kube.write(
                self._core.create_namespaced_service,
                self._namespace,
                ssh_port.asking_for(service, port),
            )
            return
        except ApiProblem as err:
            # Taken by another Service while the box was stopped, or outside a range the
            # operator changed: any free port beats no SSH at all.
            if err.status != 422:
                raise
        created = kube.write(self._core.create_namespaced_service, self._namespace, service)
        moved_to = ssh_port.node_port(created)
        self._events.record(
            deployment,
            "SshPortChanged",
            f"SSH node port {port} was taken while the box was stopped; "
            f"it now has node port {moved_to}, and its ssh command changed",
        )
        log.info(
            "box ssh port changed",
            extra={"box": naming.box_name_of(deployment), "was": port, "now": moved_to},
        )

    def claim_template(self, wanted: Obj, deployment: Obj) -> bool:
        """Create a DRA box's ResourceClaimTemplate; True when this call created it. Until
        it exists the box's pod waits: Kubernetes makes the pod's claim from it."""
        return self._create_owned(
            lambda: kube.write(
                self._resource.create_namespaced_resource_claim_template,
                self._namespace,
                wanted,
            ),
            self._resource.read_namespaced_resource_claim_template,
            self._resource.delete_namespaced_resource_claim_template,
            wanted["metadata"]["name"],
            deployment,
        )

    def host_key_secret(self, wanted: Obj) -> None:
        """Write the private half of the box's host key, made with the box."""
        self._write_secret(wanted)

    def activity_secret(self, wanted: Obj) -> None:
        """Write the box's agent credential: created, or rewritten with the current key."""
        self._write_secret(wanted)

    def _write_secret(self, wanted: Obj) -> None:
        """Create a Secret of the box. One already under its name (the box's own, or one an
        earlier box of the name left, not yet collected) is overwritten whole, its data,
        labels and owner replaced and nothing of it kept, rather than read: the controller
        writes Secrets but may never read them."""
        name = wanted["metadata"]["name"]
        data = {
            key: base64.b64encode(value.encode()).decode()
            for key, value in wanted["stringData"].items()
        }
        replace = [
            {"op": "add", "path": "/metadata/labels", "value": wanted["metadata"]["labels"]},
            {
                "op": "add",
                "path": "/metadata/ownerReferences",
                "value": wanted["metadata"]["ownerReferences"],
            },
            {"op": "add", "path": "/data", "value": data},
        ]
        for _ in range(2):
            try:
                kube.write(self._core.create_namespaced_secret, self._namespace, wanted)
                return
            except Conflict:
                pass
            try:
                kube.write(self._core.patch_namespaced_secret, name, self._namespace, replace)
                return
            except NotFound:
                # Collected in between: it can be created now.
                continue

    def _create_owned(
        self,
        create: Callable[[], Any],
        read: Callable[..., Any],
        delete: Callable[..., Any],
        name: str,
        deployment: Obj,
    ) -> bool:
        """Create an object that belongs to the box's Deployment; True when this call
        created it. One found under its name that belongs to anything else (an earlier
        box of that name, not yet collected) is deleted first and never used."""
        for _ in range(2):
            try:
                create()
            except Conflict:
                if not self._delete_stale(read, delete, name, deployment):
                    return False
                continue
            return True
        # Still there: being deleted; the reconciler makes the box's own once it is gone.
        return False

    def _delete_stale(
        self, read: Callable[..., Any], delete: Callable[..., Any], name: str, deployment: Obj
    ) -> bool:
        """Delete the object ``name`` unless it belongs to ``deployment``; True when it did
        not belong, so that a create may be tried again."""
        try:
            found = kube.call(read, name, self._namespace)
        except NotFound:
            return True
        if belongs_to(found, deployment):
            return False
        if not found["metadata"].get("deletionTimestamp"):
            # The uid precondition: never the box's own object, should one replace it now.
            options = kube.in_background(uid=found["metadata"]["uid"])
            with contextlib.suppress(NotFound, Conflict):
                kube.write(delete, name, self._namespace, body=options)
        log.info(
            "object of an earlier box removed",
            extra={"box": naming.box_name_of(deployment), "object": name},
        )
        return True

    # -- deletes -------------------------------------------------------------------------
    def delete_deployment(self, names: naming.ObjectNames) -> bool:
        return self._delete(self._apps.delete_namespaced_deployment, names.deployment)

    def delete_service(self, names: naming.ObjectNames) -> bool:
        return self._delete(self._core.delete_namespaced_service, names.service)

    def delete_claim(self, names: naming.ObjectNames) -> bool:
        return self._delete(self._core.delete_namespaced_persistent_volume_claim, names.pvc)

    def _delete(self, function: Callable[..., Any], object_name: str) -> bool:
        """Delete one object in the background; False when it was already gone."""
        try:
            kube.write(function, object_name, self._namespace, body=kube.in_background())
        except NotFound:
            return False
        return True


def refuse_foreign_claim(wanted: Obj, claim: Obj) -> None:
    """Refuse a home claim of another owner, or one being deleted: nothing of it is used."""
    name = claim["metadata"]["name"]
    box = naming.box_name_of(claim) or name
    if ownership.owner_of(claim) != ownership.owner_of(wanted):
        # Another person's retained home volume: theirs to reuse or purge, never ours.
        raise Conflict(taken(box))
    if claim["metadata"].get("deletionTimestamp"):
        raise Conflict(
            f"the home volume {name} of a purged devbox '{box}' is still being "
            "deleted; create the box again once it is gone",
            retry_after=RETRY_AFTER_SECONDS,
        )


def taken(name: str) -> str:
    return f"the name '{name}' is taken by someone else's box; choose another"


def belongs_to(obj: Obj, deployment: Obj) -> bool:
    """Whether ``obj`` is one of this Deployment's own objects and is not going away."""
    metadata = obj["metadata"]
    uid = deployment["metadata"].get("uid")
    owners = metadata.get("ownerReferences") or []
    return not metadata.get("deletionTimestamp") and any(o.get("uid") == uid for o in owners)
