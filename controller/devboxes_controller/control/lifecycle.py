"""The box lifecycle: create, start, stop, delete, extend, and the writes reconciliation
and the activity agent's reports need.

Every rule is checked and every object rendered before the first write. Writes are
idempotent, so a create interrupted between steps is finished by reconciliation, and the
response to a write waits (briefly) until the store has seen it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client

from devboxes_sdk.labels import accelerator_label
from devboxes_sdk.models import ActivityReport, DeleteResult, Devbox, DevboxCreate

from ..box import activity, idempotency, ownership, render, ssh_port, status, template
from ..config.formats import quantity_value
from ..config.settings import (
    ACTIVITY_SIDECAR,
    ImageRejected,
    ProfileRejected,
    Settings,
    SnapshotError,
)
from ..k8s import kube
from ..k8s.kube import RETRY_AFTER_SECONDS, ApiProblem, Conflict, NotFound, Obj, rule_broken
from ..k8s.timestamps import format_timestamp, parse_timestamp
from ..placement import limits
from ..state.metrics import METRICS
from ..state.store import BoxStore

log = logging.getLogger(__name__)


class Lifecycle:
    """The verbs that change boxes; reads go to the store."""

    def __init__(self, store: BoxStore, api: client.ApiClient, *, activity_key: bytes) -> None:
        self.store = store
        self.settings: Settings = store.settings
        self.namespace = store.settings.namespace
        self.activity_key = activity_key
        self.clock = store.clock
        self.api = api
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._resource = client.ResourceV1Api(api)
        self._events = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k8s-events")
        self._limits_lock = threading.Lock()
        self._holdings = limits.Holdings()

    def stop(self) -> None:
        self._events.shutdown(wait=False)

    def record(self, deployment: Obj, reason: str, message: str) -> None:
        """A Kubernetes Event on the box's Deployment, sent off the request path."""
        metadata = deployment["metadata"]
        now = format_timestamp(self.clock())
        body = {
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": self.namespace},
            "involvedObject": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": metadata["name"],
                "namespace": self.namespace,
                "uid": metadata.get("uid"),
            },
            "reason": reason,
            "message": message,
            "type": "Normal",
            "source": {"component": render.MANAGER},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

        def send() -> None:
            try:
                kube.call(self._core.create_namespaced_event, self.namespace, body)
            except ApiProblem as err:
                log.warning("event not recorded", extra={"reason": reason, "error": err.detail})

        self._events.submit(send)

    def validate(self, request: DevboxCreate, owner: str | None = None) -> render.BoxSpec:
        """Every rule, before any write: TTL bound, preset, the GPU and image profiles."""
        ttl = self.settings.ttl
        if request.ttl_hours > ttl.max_hours:
            raise rule_broken(
                ["body", "ttl_hours"], f"must be at most {ttl.max_hours}", "less_than_equal"
            )
        try:
            profile = self.settings.gpu.resolve(request.gpu)
        except ProfileRejected as err:
            raise rule_broken(["body", "gpu", *err.field], err.message) from None
        try:
            image = self.settings.images.resolve(request.image, profile)
        except ImageRejected as err:
            raise rule_broken(["body", "image"], err.message) from None
        return render.BoxSpec(
            name=request.name,
            preset=request.preset,
            ttl_hours=request.ttl_hours,
            repository=request.repository,
            expires_at=self.clock() + timedelta(hours=request.ttl_hours),
            gpu=profile,
            image=image,
            owner=owner,
        )

    def create(
        self, request: DevboxCreate, key: str | None = None, asker: limits.Asker | None = None
    ) -> Devbox:
        """A new box of ``asker`` (None: the operator's), within their limits; with the
        client's idempotency ``key``, a retry of a create that already made the box answers
        that box instead of a conflict."""
        owner = asker.person if asker is not None else None
        spec = self.validate(request, owner)
        if asker is None or not self.settings.limits.enabled:
            return self._create(spec, request, key, None)
        limits.check_request(self.settings.limits, asker, spec.preset, spec.ttl_hours)
        # Checked and written under one lock, so that two creates of one replica cannot
        # both take the last place.
        with self._limits_lock:
            ask = limits.Ask(asker, new_box=True, device=_device(spec), count=_count(spec))
            existing = self.store.deployment(spec.name)
            if existing is None:
                holdings = self._holdings.of(self.store.deployments())
                limits.check_quota(self.settings.limits, ask, holdings)
            return self._create(spec, request, key, asker)

    def _create(
        self,
        spec: render.BoxSpec,
        request: DevboxCreate,
        key: str | None,
        asker: limits.Asker | None,
    ) -> Devbox:
        owner = spec.owner
        names = render.object_names(spec.name)
        made_by = idempotency.CreateRequest.of(key, request) if key is not None else None
        existing = self.store.deployment(spec.name)
        if existing is not None:
            return self._created_before(spec.name, existing, made_by, owner)
        claim = self.store.claim(spec.name)
        # Everything is rendered before the first write; only the agent's credential waits
        # for the Deployment, whose uid it is bound to.
        wanted_claim = render.render_pvc(spec, self.settings)
        if claim is not None:
            # Refused before any write; checked again where the claim is won.
            _refuse_foreign_claim(wanted_claim, claim)
        wanted_deployment = render.render_deployment(spec, self.settings)
        if made_by is not None:
            # In the same write as the box, so that no retry can see one without the other.
            wanted_deployment["metadata"]["annotations"][idempotency.ANNOTATION_CREATE_REQUEST] = (
                made_by.annotation()
            )
        if asker is not None:
            wanted_deployment["metadata"]["annotations"][ownership.ANNOTATION_OWNER_GROUPS] = (
                _groups_record(self.settings, asker)
            )
        wanted_service = render.render_service(spec, self.settings)
        # The claim first: until it exists the scheduler refuses the pod with a confusing
        # "unbound immediate PersistentVolumeClaims" message instead of the real reason.
        self._apply_claim(wanted_claim, claim)
        try:
            deployment = kube.call(
                self._apps.create_namespaced_deployment, self.namespace, wanted_deployment
            )
        except Conflict:
            if made_by is None:
                raise Conflict(f"devbox '{spec.name}' already exists") from None
            # The store has not seen the winner yet: it may be this request's own first try,
            # still in flight when the client gave up on it.
            try:
                existing = kube.call(
                    self._apps.read_namespaced_deployment, names.deployment, self.namespace
                )
            except NotFound:
                # Someone deleted the winner in between; making it again could undo that.
                raise Conflict(
                    f"devbox '{spec.name}' was deleted while this create was being made; "
                    "send the create again to make a new box"
                ) from None
            return self._created_before(spec.name, existing, made_by, owner)
        METRICS.writes.labels("create").inc()
        self._apply_service(wanted_service, deployment)
        self._apply_claim_template(spec, deployment)
        self.ensure_activity_secret(deployment)
        self.store.has_seen(deployment)
        self.record(deployment, "Created", _created_message(spec, reused=claim is not None))
        log.info(
            "box created",
            extra={
                "box": spec.name,
                "preset": spec.preset,
                "gpu_profile": spec.gpu.name if spec.gpu else None,
                "image_profile": spec.image.name if spec.image else None,
            },
        )
        return self._current(spec.name, deployment)

    def _created_before(
        self,
        name: str,
        existing: Obj,
        made_by: idempotency.CreateRequest | None,
        owner: str | None,
    ) -> Devbox:
        """The box as it is now when this request created it on an earlier try; else the
        name is taken."""
        mine = ownership.owner_of(existing) == (owner or ownership.OPERATOR)
        if not mine:
            # Names are unique across people, but whose box holds one is not told.
            raise Conflict(_taken(name))
        if made_by is None or not made_by.made(existing):
            raise Conflict(f"devbox '{name}' already exists")
        return self._current(name, existing)

    def _current(self, name: str, deployment: Obj) -> Devbox:
        """The box's status, derived at once so the response reflects the write just made."""
        objects = self.store.objects(name) or status.BoxObjects(deployment=deployment)
        if kube.resource_version(objects.deployment) < kube.resource_version(deployment):
            objects = status.BoxObjects(
                deployment=deployment,
                pods=objects.pods,
                replicasets=objects.replicasets,
                events=objects.events,
                service=objects.service,
                pvc=objects.pvc,
            )
        return status.derive(objects, self.settings, self.clock())

    def ensure_storage(self, spec: render.BoxSpec) -> bool:
        """Create the home claim, or reuse a retained one and grow it; never shrink it.
        True when this call created the claim."""
        return self._apply_claim(
            render.render_pvc(spec, self.settings), self.store.claim(spec.name)
        )

    def _apply_claim(self, wanted: Obj, existing: Obj | None) -> bool:
        name = wanted["metadata"]["name"]
        if existing is None:
            try:
                kube.call(
                    self._core.create_namespaced_persistent_volume_claim, self.namespace, wanted
                )
                METRICS.writes.labels("create").inc()
                return True
            except Conflict:
                # Another create won the name first (on this replica or another, which the
                # cache has not shown yet): its claim is reused only if it is ours.
                try:
                    existing = kube.call(
                        self._core.read_namespaced_persistent_volume_claim, name, self.namespace
                    )
                except NotFound:
                    raise Conflict(
                        f"the home volume {name} changed while this request was made; retry",
                        retry_after=RETRY_AFTER_SECONDS,
                    ) from None
        _refuse_foreign_claim(wanted, existing)
        patch: Obj = {}
        size = wanted["spec"]["resources"]["requests"]["storage"]
        current = existing["spec"]["resources"]["requests"]["storage"]
        if quantity_value(size) > quantity_value(current):
            patch["spec"] = {"resources": {"requests": {"storage": size}}}
        profile = wanted["metadata"]["labels"].get(render.LABEL_GPU_PROFILE)
        if (existing["metadata"].get("labels") or {}).get(render.LABEL_GPU_PROFILE) != profile:
            # None removes the label: a CPU box now owns a volume a GPU box used before.
            patch["metadata"] = {"labels": {render.LABEL_GPU_PROFILE: profile}}
        if patch:
            kube.call(
                self._core.patch_namespaced_persistent_volume_claim, name, self.namespace, patch
            )
            METRICS.writes.labels("patch").inc()
        return False

    def ensure_service(self, spec: render.BoxSpec, deployment: Obj) -> bool:
        """True when this call created the Service."""
        service = self.store.service(spec.name)
        if service is not None and _belongs_to(service, deployment):
            return False
        return self._apply_service(render.render_service(spec, self.settings), deployment)

    def _apply_service(self, service: Obj, deployment: Obj) -> bool:
        """Create the box's SSH Service, on the node port recorded when it stopped if it
        has one and that port is still free."""
        service["metadata"]["ownerReferences"] = _owned_by(deployment)
        port = ssh_port.recorded(deployment) if self._node_ports else None

        def create() -> None:
            if port is None:
                kube.call(self._core.create_namespaced_service, self.namespace, service)
            else:
                self._create_on_port(service, port, deployment)

        return self._create_owned(
            create,
            self._core.read_namespaced_service,
            self._core.delete_namespaced_service,
            service["metadata"]["name"],
            deployment,
        )

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
            METRICS.writes.labels("create").inc()
            return True
        # Still there: being deleted; the reconciler makes the box's own once it is gone.
        return False

    def _delete_stale(
        self, read: Callable[..., Any], delete: Callable[..., Any], name: str, deployment: Obj
    ) -> bool:
        """Delete the object ``name`` unless it belongs to ``deployment``; True when it did
        not belong, so that a create may be tried again."""
        try:
            found = kube.call(read, name, self.namespace)
        except NotFound:
            return True
        if _belongs_to(found, deployment):
            return False
        if not found["metadata"].get("deletionTimestamp"):
            # The uid precondition: never the box's own object, should one replace it now.
            options = client.V1DeleteOptions(
                propagation_policy="Background",
                preconditions=client.V1Preconditions(uid=found["metadata"]["uid"]),
            )
            try:
                kube.call(delete, name, self.namespace, body=options)
                METRICS.writes.labels("delete").inc()
            except (NotFound, Conflict):
                pass
        log.info(
            "object of an earlier box removed",
            extra={"box": render.box_name_of(deployment), "object": name},
        )
        return True

    @property
    def _node_ports(self) -> bool:
        """Whether users reach boxes on node ports, which are then worth keeping."""
        return self.settings.ssh.service_type == "NodePort"

    def _create_on_port(self, service: Obj, port: int, deployment: Obj) -> None:
        try:
            kube.call(
                self._core.create_namespaced_service,
                self.namespace,
                ssh_port.asking_for(service, port),
            )
            return
        except ApiProblem as err:
            # Taken by another Service while the box was stopped, or outside a range the
            # operator changed: any free port beats no SSH at all.
            if err.status != 422:
                raise
        created = kube.call(self._core.create_namespaced_service, self.namespace, service)
        moved_to = ssh_port.node_port(created)
        self.record(
            deployment,
            "SshPortChanged",
            f"SSH node port {port} was taken while the box was stopped; "
            f"it now has node port {moved_to}, and its ssh command changed",
        )
        log.info(
            "box ssh port changed",
            extra={"box": render.box_name_of(deployment), "was": port, "now": moved_to},
        )

    def release_service(self, name: str) -> bool:
        """Delete a stopped box's SSH Service, which frees its node port; True when this
        call deleted it."""
        deleted = self._delete(
            self._core.delete_namespaced_service, render.object_names(name).service
        )
        # So that the answer to the stop, and a start right after it, see it gone.
        self.store.has_forgotten_service(name)
        return deleted

    def _keep_ssh_port(self, name: str, annotations: dict[str, Any]) -> None:
        """Add the box's node port to the annotations a stop writes, for the next start."""
        port = ssh_port.node_port(self.store.service(name))
        if port is not None and self._node_ports:
            annotations[ssh_port.ANNOTATION_SSH_NODE_PORT] = str(port)

    def keep_ssh_port(self, name: str, deployment: Obj) -> int | None:
        """Record a stopped box's node port before its Service goes; the port kept."""
        annotations: dict[str, Any] = {}
        self._keep_ssh_port(name, annotations)
        port = annotations.get(ssh_port.ANNOTATION_SSH_NODE_PORT)
        if port is not None and ssh_port.recorded(deployment) != int(port):
            self._patch(name, {"metadata": {"annotations": annotations}})
        return int(port) if port is not None else None

    def ensure_claim_template(self, spec: render.BoxSpec, deployment: Obj) -> bool:
        """True when this call created the DRA box's ResourceClaimTemplate. Without a
        cache to tell a missing template (no profile is of DRA devices any more), a box
        pinned to a DRA profile is not repaired, rather than written to on every pass."""
        if not self.store.watches_claims:
            return False
        template = self.store.claim_template(spec.name)
        if template is not None and _belongs_to(template, deployment):
            return False
        return self._apply_claim_template(spec, deployment)

    def _apply_claim_template(self, spec: render.BoxSpec, deployment: Obj) -> bool:
        # Until it exists the box's pod waits: Kubernetes makes the pod's claim from it.
        wanted = render.render_claim_template(spec, self.settings)
        if wanted is None:
            return False
        wanted["metadata"]["ownerReferences"] = _owned_by(deployment)
        return self._create_owned(
            lambda: kube.call(
                self._resource.create_namespaced_resource_claim_template, self.namespace, wanted
            ),
            self._resource.read_namespaced_resource_claim_template,
            self._resource.delete_namespaced_resource_claim_template,
            wanted["metadata"]["name"],
            deployment,
        )

    def ensure_activity_secret(self, deployment: Obj) -> None:
        """Write the box's agent credential, for its Deployment's uid and the current key;
        a box that runs no agent needs none."""
        name = render.box_name_of(deployment)
        if name is None or ACTIVITY_SIDECAR not in template.container_names(deployment):
            return
        secret = render.render_activity_secret(
            name,
            self.settings,
            activity.credential(self.activity_key, name, deployment["metadata"]["uid"]),
        )
        secret["metadata"]["ownerReferences"] = _owned_by(deployment)
        created = self._create_owned(
            lambda: kube.call(self._core.create_namespaced_secret, self.namespace, secret),
            self._core.read_namespaced_secret,
            self._core.delete_namespaced_secret,
            secret["metadata"]["name"],
            deployment,
        )
        if not created:
            # The box's own: rewritten for the current key.
            kube.call(
                self._core.patch_namespaced_secret,
                secret["metadata"]["name"],
                self.namespace,
                {
                    "metadata": {"ownerReferences": secret["metadata"]["ownerReferences"]},
                    "stringData": secret["stringData"],
                },
            )
            METRICS.writes.labels("patch").inc()

    def renew_activity_secret(self, name: str, deployment: Obj) -> None:
        """Rewrite the box's credential with the current key, then note which key that
        was. The kubelet updates the mounted Secret in place and the agent reads it before
        every report, so a running box follows a rotated key without a restart."""
        self.ensure_activity_secret(deployment)
        key = activity.key_id(self.activity_key)
        self._patch(name, {"metadata": {"annotations": {activity.ANNOTATION_CREDENTIAL_KEY: key}}})
        log.info("box activity credential renewed", extra={"box": name})

    def record_activity(self, name: str, report: ActivityReport) -> None:
        """Write back what a box's agent reported, when it changes what is known."""
        deployment = self._deployment(name)
        if (deployment.get("spec") or {}).get("replicas", 1) == 0:
            return
        now = self.clock()
        previous = activity.recorded(deployment)
        gpu_box = activity.gpu_profile(deployment) is not None
        idle = activity.is_idle(report, gpu_box, self.settings.idle.gpu_utilization_percent)
        record = activity.next_record(previous, idle, now)
        if activity.needs_write(previous, record, now):
            self._patch(
                name,
                {"metadata": {"annotations": {activity.ANNOTATION_ACTIVITY: record.to_json()}}},
            )

    def stop_idle(self, name: str, limit: timedelta) -> Devbox:
        """Stop a box nobody used for ``limit``, like a TTL expiry."""
        minutes = activity.minutes_text(limit)
        annotations = {activity.ANNOTATION_IDLE_STOPPED: minutes}
        self._keep_ssh_port(name, annotations)
        updated = self._patch(
            name, {"metadata": {"annotations": annotations}, "spec": {"replicas": 0}}
        )
        self.release_service(name)
        self.record(updated, "IdleStopped", f"Stopped after {minutes} min idle; storage kept")
        log.info("box stopped for idleness", extra={"box": name, "minutes": minutes})
        return self._current(name, updated)

    def _deployment(self, name: str, scope: str | None = None) -> Obj:
        """The box's Deployment, when the box is ``scope``'s (any box's when None):
        another person's box is as absent as one that does not exist."""
        deployment = self.store.deployment(name)
        if deployment is None or not ownership.visible(deployment, scope):
            raise NotFound(f"devbox '{name}' not found")
        return deployment

    def _patch(self, name: str, patch: Obj | list[Obj]) -> Obj:
        updated = kube.call(
            self._apps.patch_namespaced_deployment,
            render.object_names(name).deployment,
            self.namespace,
            patch,
        )
        METRICS.writes.labels("patch").inc()
        self.store.has_seen(updated)
        return updated

    def start_box(
        self, name: str, scope: str | None = None, asker: limits.Asker | None = None
    ) -> Devbox:
        """Replicas 1 and a renewed TTL, from the pinned snapshot; storage and Service
        repaired. A person's start stays within the limits of the box's owner."""
        if asker is None or not self.settings.limits.enabled:
            return self._start(name, scope, None)
        with self._limits_lock:
            return self._start(name, scope, asker)

    def _start(self, name: str, scope: str | None, asker: limits.Asker | None) -> Devbox:
        deployment = self._deployment(name, scope)
        try:
            spec = render.spec_from_deployment(deployment)
        except SnapshotError as err:
            raise Conflict(f"devbox '{name}' cannot be started: {err}") from None
        stopped = (deployment.get("spec") or {}).get("replicas", 1) == 0
        groups: dict[str, str] = {}
        if asker is not None and stopped and spec.owner == asker.person:
            ask = limits.Ask(asker, new_box=False, device=_device(spec), count=_count(spec))
            box = deployment["metadata"]["name"]
            others = self._holdings.of(self.store.deployments(), leaving_out=box)
            limits.check_quota(self.settings.limits, ask, others)
            groups[ownership.ANNOTATION_OWNER_GROUPS] = _groups_record(self.settings, asker)
        if stopped:
            # The release's changes go in before the pod exists, so it starts with them.
            self.rebuild_if_changed(deployment)
        # The Service before the pod: a running box without one would look broken to the
        # reconciler, which repairs it.
        self.ensure_storage(spec)
        self.ensure_service(spec, deployment)
        now = self.clock()
        expires = now + timedelta(hours=spec.ttl_hours)
        spec_patch: dict[str, Any] = {"replicas": 1}
        if stopped:
            stamp = {render.ANNOTATION_STARTED_AT: format_timestamp(now, microseconds=True)}
            spec_patch["template"] = {"metadata": {"annotations": stamp}}
        updated = self._patch(
            name,
            {
                "metadata": {
                    "annotations": {
                        **groups,
                        render.ANNOTATION_EXPIRES_AT: format_timestamp(expires),
                        render.ANNOTATION_WAITING_SINCE: format_timestamp(now),
                        render.ANNOTATION_EXPIRED_AT: None,
                        # A new pod: what the last one's agent said no longer holds.
                        activity.ANNOTATION_ACTIVITY: None,
                        activity.ANNOTATION_IDLE_STOPPED: None,
                    }
                },
                "spec": spec_patch,
            },
        )
        self.ensure_claim_template(spec, updated)
        self.ensure_activity_secret(updated)
        self.record(
            updated,
            "Started",
            f"Started; stops automatically at {format_timestamp(expires)}",
        )
        return self._current(name, updated)

    def begin_time_to_live(self, name: str, deployment: Obj, now: datetime) -> Obj:
        """A box whose pod was first given a node since it was created or started: its
        deadline moves later by the time it waited, so a wait in line costs none of its
        time to live."""
        annotations = deployment["metadata"].get("annotations") or {}
        since = parse_timestamp(annotations[render.ANNOTATION_WAITING_SINCE])
        waited = max(now - since, timedelta(0))
        expires = parse_timestamp(annotations[render.ANNOTATION_EXPIRES_AT]) + waited
        stamp = format_timestamp(expires)
        updated = self._patch(
            name,
            {
                "metadata": {
                    "annotations": {
                        render.ANNOTATION_EXPIRES_AT: stamp,
                        render.ANNOTATION_WAITING_SINCE: None,
                    },
                    # Another writer's change in between (an extend, a stop) wins.
                    "resourceVersion": deployment["metadata"]["resourceVersion"],
                }
            },
        )
        if waited >= timedelta(minutes=1):
            self.record(
                updated,
                "TimeToLiveMoved",
                f"Given a node after waiting {int(waited.total_seconds() // 60)} min; "
                f"stops automatically at {stamp}",
            )
        return updated

    def rebuild_if_changed(self, deployment: Obj) -> Obj | None:
        """Replace the pod template with the release's, rendered from the box's pinned
        record, when the release changed it; the updated Deployment, or None."""
        name = render.box_name_of(deployment)
        try:
            changed = template.changes(deployment, self.settings)
            patch = template.rebuild_patch(deployment, self.settings) if changed else None
        except SnapshotError as err:
            raise Conflict(f"devbox '{name}' cannot be rebuilt: {err}") from None
        if name is None or patch is None:
            return None
        updated = self._patch(name, patch)
        self.record(updated, "Rebuilt", f"Pod template rebuilt: {'; '.join(changed)}")
        log.info("box rebuilt", extra={"box": name, "changes": changed})
        return updated

    def stop_box(
        self, name: str, expired_at: datetime | None = None, scope: str | None = None
    ) -> Devbox:
        """Replicas 0 and no Service; the claim, the snapshot and the TTL annotation stay."""
        self._deployment(name, scope)
        annotations: dict[str, Any] = {}
        if expired_at is not None:
            annotations[render.ANNOTATION_EXPIRED_AT] = format_timestamp(expired_at)
        self._keep_ssh_port(name, annotations)
        updated = self._patch(
            name, {"metadata": {"annotations": annotations}, "spec": {"replicas": 0}}
        )
        self.release_service(name)
        if expired_at is not None:
            self.record(updated, "Expired", "Stopped: its time to live ran out; storage kept")
        else:
            self.record(updated, "Stopped", "Stopped on request; storage kept")
        return self._current(name, updated)

    def delete(self, name: str, purge: bool, scope: str | None = None) -> DeleteResult:
        """Compute and Service go; the home claim stays unless ``purge``."""
        names = render.object_names(name)
        deployment = self.store.deployment(name)
        claim = self.store.claim(name)
        if deployment is not None and not ownership.visible(deployment, scope):
            deployment = claim = None
        if claim is not None and not ownership.visible(claim, scope):
            claim = None
        if deployment is None and not (purge and claim is not None):
            raise NotFound(f"devbox '{name}' not found")
        for function, object_name in (
            (self._apps.delete_namespaced_deployment, names.deployment),
            (self._core.delete_namespaced_service, names.service),
        ):
            self._delete(function, object_name)
        if purge:
            self.purge_claim(name)
        self.store.has_forgotten(name)
        message = (
            f"devbox '{name}' deleted with its home volume"
            if purge
            else f"devbox '{name}' deleted; home volume {names.pvc} kept"
        )
        log.info("box deleted", extra={"box": name, "purged": purge})
        return DeleteResult(name=name, purged=purge, message=message)

    def _delete(self, function: Callable[..., Any], object_name: str) -> bool:
        """Delete one object in the background; False when it was already gone."""
        background = client.V1DeleteOptions(propagation_policy="Background")
        try:
            kube.call(function, object_name, self.namespace, body=background)
        except NotFound:
            return False
        METRICS.writes.labels("delete").inc()
        return True

    def purge_claim(self, name: str) -> bool:
        """Delete a box's home claim: the only code path that deletes one."""
        deleted = self._delete(
            self._core.delete_namespaced_persistent_volume_claim, render.object_names(name).pvc
        )
        if deleted:
            # So that the volume list read right after the purge no longer shows it.
            self.store.has_forgotten_claim(name)
        return deleted

    def extend_box(self, name: str, hours: int, scope: str | None = None) -> Devbox:
        """Push a running box's deadline back, never beyond ``ttl.maxHours`` from now."""
        deployment = self._deployment(name, scope)
        if (deployment.get("spec") or {}).get("replicas", 1) == 0:
            raise Conflict(f"devbox '{name}' is stopped; start it, which renews its time to live")
        try:
            spec = render.spec_from_deployment(deployment)
        except SnapshotError as err:
            raise Conflict(f"devbox '{name}' cannot be extended: {err}") from None
        now = self.clock()
        maximum = self.settings.ttl.max_hours
        if hours > maximum:
            raise rule_broken(
                ["body", "hours"],
                f"must be at most {maximum}, the maximum time to live",
                "less_than_equal",
            )
        base = max(spec.expires_at, now)
        room = int((now + timedelta(hours=maximum) - base) / timedelta(hours=1))
        if hours > room:
            # A conflict with the box's current deadline, not a malformed request: the same
            # hours are accepted for a box with more room.
            if room < 1:
                # No number of hours fits: say when the first one will.
                raise Conflict(
                    f"{name} already stops at the latest time allowed, "
                    f"{format_timestamp(base)}: a box stops at most {maximum} hours from now "
                    f"(the maximum time to live); it can be extended by 1 hour from "
                    f"{format_timestamp(base - timedelta(hours=maximum - 1))}"
                )
            raise Conflict(
                f"hours must be at most {room}: a box stops at most {maximum} hours "
                f"from now (the maximum time to live), and {name} already runs until "
                f"{format_timestamp(base)}"
            )
        expires = base + timedelta(hours=hours)
        stamp = format_timestamp(expires)
        annotations = {render.ANNOTATION_EXPIRES_AT: stamp}
        record = activity.recorded(deployment)
        if record is not None and record.idle_since is not None:
            # Asking for more time is a sign of life: the idle window starts again.
            annotations[activity.ANNOTATION_ACTIVITY] = activity.Record(
                reported_at=record.reported_at, idle_since=now
            ).to_json()
        updated = self._patch(name, {"metadata": {"annotations": annotations}})
        self.record(
            updated,
            "Extended",
            f"Extended by {hours} h; stops automatically at {stamp}",
        )
        return self._current(name, updated)


def _device(spec: render.BoxSpec) -> str | None:
    """What a box's devices are counted by in the limits."""
    return spec.gpu.device_name if spec.gpu is not None else None


def _count(spec: render.BoxSpec) -> int:
    return spec.gpu.count if spec.gpu is not None else 0


def _groups_record(settings: Settings, asker: limits.Asker) -> str:
    return json.dumps(limits.limited_groups(settings.limits, asker.groups))


def _taken(name: str) -> str:
    return f"the name '{name}' is taken by someone else's box; choose another"


def _refuse_foreign_claim(wanted: Obj, claim: Obj) -> None:
    """Refuse a home claim of another owner, or one being deleted: nothing of it is used."""
    name = claim["metadata"]["name"]
    box = render.box_name_of(claim) or name
    if ownership.owner_of(claim) != ownership.owner_of(wanted):
        # Another person's retained home volume: theirs to reuse or purge, never ours.
        raise Conflict(_taken(box))
    if claim["metadata"].get("deletionTimestamp"):
        raise Conflict(
            f"the home volume {name} of a purged devbox '{box}' is still being "
            "deleted; create the box again once it is gone",
            retry_after=RETRY_AFTER_SECONDS,
        )


def _belongs_to(obj: Obj, deployment: Obj) -> bool:
    """Whether ``obj`` is one of this Deployment's own objects and is not going away."""
    metadata = obj["metadata"]
    uid = deployment["metadata"].get("uid")
    owners = metadata.get("ownerReferences") or []
    return not metadata.get("deletionTimestamp") and any(o.get("uid") == uid for o in owners)


def _owned_by(deployment: Obj) -> list[Obj]:
    """Owner references that let the garbage collector remove an object with its box."""
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment["metadata"]["name"],
            "uid": deployment["metadata"]["uid"],
        }
    ]


def _created_message(spec: render.BoxSpec, reused: bool) -> str:
    # The accelerator in the words every client shows it in.
    accelerator = (
        f"GPU profile {spec.gpu.name} ({accelerator_label(spec.gpu.allocation())})"
        if spec.gpu
        else accelerator_label(None)
    )
    image = f", image profile {spec.image.name} ({spec.image.mode})" if spec.image else ""
    home = "; reusing its retained home volume" if reused else ""
    return f"Created with preset {spec.preset}, {accelerator}{image}{home}"
