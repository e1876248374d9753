"""The box lifecycle: create, start, stop, delete, extend, and the writes reconciliation
and the activity agent's reports need.

Every rule is checked before the first write, and a box's objects are rendered complete
(:func:`~..box.render.box`); what belongs to the Deployment is rendered once the
Deployment exists, for its uid. Writes are idempotent (:mod:`.writer`), so a create
interrupted between steps is finished by reconciliation, and the response to a write waits
(briefly) until the store has seen it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from devboxes_sdk.labels import accelerator_label
from devboxes_sdk.models import ActivityReport, DeleteResult, Devbox, DevboxCreate

from ..box import (
    activity,
    budget_stop,
    host_key,
    idempotency,
    naming,
    ownership,
    render,
    ssh_port,
    status,
    stop_warning,
    template,
)
from ..box.naming import ObjectNames
from ..box.spec import BoxSpec, spec_from_deployment
from ..config.boxes import ACTIVITY_SIDECAR
from ..config.catalog import SnapshotError
from ..config.gpu import ProfileRejected
from ..config.images import ImageRejected
from ..config.settings import Settings
from ..k8s import kube
from ..k8s.kube import Conflict, NotFound, Obj, Unavailable, rule_broken
from ..k8s.timestamps import format_timestamp, parse_timestamp
from ..placement import budgets, limits
from ..state.store import BoxStore
from .events import Events
from .promises import Clash, Promises
from .stop_warnings import StopWarnings
from .writer import BoxWriter, belongs_to, refuse_foreign_claim, taken

log = logging.getLogger(__name__)


class Lifecycle:
    """The verbs that change boxes; reads go to the store."""

    def __init__(self, store: BoxStore, api: kube.ApiClient, *, activity_key: bytes) -> None:
        self.store = store
        self.settings: Settings = store.settings
        self.namespace = store.settings.namespace
        self.activity_key = activity_key
        self.clock = store.clock
        self.api = api
        apis = kube.apis(api)
        self._events = Events(apis, self.namespace, self.clock)
        self._writer = BoxWriter(store, apis, self._events)
        self._limits_lock = threading.Lock()
        self._holdings = limits.Holdings()
        # One for the process: its cache of each box's hold serves every reader.
        self.promises = Promises(store)
        self.warnings = StopWarnings(store, self._writer, self._events)

    def stop(self) -> None:
        self._events.stop()

    def record(self, deployment: Obj, reason: str, message: str) -> None:
        """A Kubernetes Event on the box's Deployment, sent off the request path."""
        self._events.record(deployment, reason, message)

    def validate(self, request: DevboxCreate, owner: str | None = None) -> BoxSpec:
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
        return BoxSpec(
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
            existing = self.store.deployment(spec.names)
            if existing is None:
                holdings = self._holdings.of(self.store.deployments())
                limits.check_quota(self.settings.limits, ask, holdings)
                self._check_budgets(asker, spec)
            return self._create(spec, request, key, asker)

    def _create(
        self,
        spec: BoxSpec,
        request: DevboxCreate,
        key: str | None,
        asker: limits.Asker | None,
    ) -> Devbox:
        owner = spec.owner
        made_by = idempotency.CreateRequest.of(key, request) if key is not None else None
        existing = self.store.deployment(spec.names)
        if existing is not None:
            return self._created_before(spec.names, existing, made_by, owner)
        claim = self.store.claim(spec.names)
        groups = None if asker is None else _limited_groups(self.settings, asker)
        made_key = host_key.generate()
        spec = dataclasses.replace(spec, host_key=made_key.public)
        # Everything is rendered before the first write; what belongs to the Deployment
        # is rendered again with it once it is written, for its uid.
        wanted = self._wanted(spec, made_by=made_by, owner_groups=groups)
        if claim is not None:
            # Refused before any write; checked again where the claim is won.
            refuse_foreign_claim(wanted.claim, claim)
        # The claim first: until it exists the scheduler refuses the pod with a confusing
        # "unbound immediate PersistentVolumeClaims" message instead of the real reason.
        self._writer.claim(wanted.claim, claim)
        try:
            deployment = self._writer.create_deployment(wanted.deployment)
        except Conflict:
            if made_by is None:
                raise Conflict(f"devbox '{spec.name}' already exists") from None
            # The store has not seen the winner yet: it may be this request's own first try,
            # still in flight when the client gave up on it.
            try:
                existing = self._writer.read_deployment(spec.names.deployment)
            except NotFound:
                # Someone deleted the winner in between; making it again could undo that.
                raise Conflict(
                    f"devbox '{spec.name}' was deleted while this create was being made; "
                    "send the create again to make a new box"
                ) from None
            return self._created_before(spec.names, existing, made_by, owner)
        wanted = self._wanted(
            spec,
            deployment,
            made_by=made_by,
            owner_groups=groups,
            private_host_key=made_key.private,
        )
        if wanted.host_key_secret is not None:
            self._writer.host_key_secret(wanted.host_key_secret)
        if wanted.service is not None:
            self._writer.service(wanted.service, deployment)
        if wanted.claim_template is not None:
            self._writer.claim_template(wanted.claim_template, deployment)
        if wanted.activity_secret is not None:
            self._writer.activity_secret(wanted.activity_secret)
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
        return self._current(spec.names, deployment)

    def _created_before(
        self,
        names: ObjectNames,
        existing: Obj,
        made_by: idempotency.CreateRequest | None,
        owner: str | None,
    ) -> Devbox:
        """The box as it is now when this request created it on an earlier try; else the
        name is taken."""
        mine = ownership.owner_of(existing) == (owner or ownership.OPERATOR)
        if not mine:
            # Names are unique across people, but whose box holds one is not told.
            raise Conflict(taken(names.box))
        if made_by is None or not made_by.made(existing):
            raise Conflict(f"devbox '{names.box}' already exists")
        return self._current(names, existing)

    def _current(self, names: ObjectNames, deployment: Obj) -> Devbox:
        """The box's status, derived at once so the response reflects the write just made:
        the box's objects as the store holds them, with ``deployment`` when the store has
        not seen it yet."""
        objects = self.store.objects(names)
        if objects is None:
            objects = status.BoxObjects(deployment=deployment)
        elif kube.resource_version(objects.deployment) < kube.resource_version(deployment):
            objects = dataclasses.replace(objects, deployment=deployment)
        return status.derive(objects, self.settings, self.clock())

    def _wanted(
        self,
        spec: BoxSpec,
        deployment: Obj | None = None,
        *,
        made_by: idempotency.CreateRequest | None = None,
        owner_groups: list[str] | None = None,
        private_host_key: str | None = None,
    ) -> render.Box:
        """Every object of the box; those that belong to its Deployment once it is given,
        the agent's Secret among them when the Deployment's pod runs the agent."""
        credential = None
        if deployment is not None and ACTIVITY_SIDECAR in template.container_names(deployment):
            uid = deployment["metadata"]["uid"]
            credential = activity.credential(self.activity_key, spec.name, uid)
        return render.box(
            spec,
            self.settings,
            made_by=made_by,
            owner_groups=owner_groups,
            owned_by=deployment,
            credential=credential,
            private_host_key=private_host_key,
        )

    def still_present(self, deployment: Obj) -> bool:
        """Whether the apiserver still holds this very Deployment, not being deleted. A
        purge deletes the Deployment before the home claim, but the watches may deliver
        the claim's end first: the cache alone cannot tell a purge from a lost claim."""
        try:
            live = self._writer.read_deployment(deployment["metadata"]["name"])
        except NotFound:
            return False
        metadata = live["metadata"]
        return metadata.get("uid") == deployment["metadata"].get("uid") and not metadata.get(
            "deletionTimestamp"
        )

    def ensure_storage(self, spec: BoxSpec, wanted: render.Box | None = None) -> bool:
        """Create the home claim, or reuse a retained one and grow it; never shrink it.
        True when this call created the claim."""
        wanted = wanted or self._wanted(spec)
        return self._writer.claim(wanted.claim, self.store.claim(spec.names))

    def ensure_service(
        self, spec: BoxSpec, deployment: Obj, wanted: render.Box | None = None
    ) -> bool:
        """True when this call created the Service."""
        service = self.store.service(spec.names)
        if service is not None and belongs_to(service, deployment):
            return False
        wanted = wanted or self._wanted(spec, deployment)
        return wanted.service is not None and self._writer.service(wanted.service, deployment)

    def ensure_claim_template(
        self, spec: BoxSpec, deployment: Obj, wanted: render.Box | None = None
    ) -> bool:
        """True when this call created the DRA box's ResourceClaimTemplate. Without a
        cache to tell a missing template (no profile is of DRA devices any more), a box
        pinned to a DRA profile is not repaired, rather than written to on every pass."""
        if not self.store.watches_claims:
            return False
        existing = self.store.claim_template(spec.names)
        if existing is not None and belongs_to(existing, deployment):
            return False
        wanted = wanted or self._wanted(spec, deployment)
        claim_template = wanted.claim_template
        return claim_template is not None and self._writer.claim_template(
            claim_template, deployment
        )

    def release_service(self, names: ObjectNames) -> bool:
        """Delete a stopped box's SSH Service, which frees its node port; True when this
        call deleted it."""
        deleted = self._writer.delete_service(names)
        # So that the answer to the stop, and a start right after it, see it gone.
        self.store.has_forgotten_service(names)
        return deleted

    def _keep_ssh_port(self, names: ObjectNames, annotations: dict[str, Any]) -> None:
        """Add the box's node port to the annotations a stop writes, for the next start."""
        port = ssh_port.node_port(self.store.service(names))
        if port is not None and self._writer.node_ports:
            annotations[ssh_port.ANNOTATION_SSH_NODE_PORT] = str(port)

    def keep_ssh_port(self, names: ObjectNames, deployment: Obj) -> int | None:
        """Record a stopped box's node port before its Service goes; the port kept."""
        annotations: dict[str, Any] = {}
        self._keep_ssh_port(names, annotations)
        port = annotations.get(ssh_port.ANNOTATION_SSH_NODE_PORT)
        if port is not None and ssh_port.recorded(deployment) != int(port):
            self._writer.patch(deployment, {"metadata": {"annotations": annotations}})
        return int(port) if port is not None else None

    def renew_activity_secret(self, name: str, deployment: Obj) -> None:
        """Rewrite the box's credential with the current key, then note which key that
        was. The kubelet updates the mounted Secret in place and the agent reads it before
        every report, so a running box follows a rotated key without a restart."""
        secret = self._wanted(spec_from_deployment(deployment), deployment).activity_secret
        if secret is not None:
            self._writer.activity_secret(secret)
        key = activity.key_id(self.activity_key)
        self._writer.patch(
            deployment, {"metadata": {"annotations": {activity.ANNOTATION_CREDENTIAL_KEY: key}}}
        )
        log.info("box activity credential renewed", extra={"box": name})

    def record_activity(self, name: str, report: ActivityReport) -> None:
        """Write back what a box's agent reported, when it changes what is known."""
        deployment = self._deployment(naming.object_names(name))
        if naming.is_stopped(deployment):
            return
        now = self.clock()
        previous = activity.recorded(deployment)
        gpu_box = activity.gpu_profile(deployment) is not None
        idle = activity.is_idle(report, gpu_box, self.settings.idle.gpu_utilization_percent)
        record = activity.next_record(previous, idle, now, report.gpu_utilization)
        threshold = self.settings.idle.gpu_utilization_percent
        if activity.needs_write(previous, record, now, threshold):
            self._writer.patch(
                deployment,
                {"metadata": {"annotations": {activity.ANNOTATION_ACTIVITY: record.to_json()}}},
            )

    def stop_idle(self, name: str, limit: timedelta) -> Devbox:
        """Stop a box nobody used for ``limit``, like a TTL expiry."""
        names = naming.object_names(name)
        deployment = self._deployment(names)
        minutes = activity.minutes_text(limit)
        annotations = {activity.ANNOTATION_IDLE_STOPPED: minutes}
        self._keep_ssh_port(names, annotations)
        updated = self._writer.patch(
            deployment, {"metadata": {"annotations": annotations}, "spec": {"replicas": 0}}
        )
        self.release_service(names)
        self.record(updated, "IdleStopped", f"Stopped after {minutes} min idle; storage kept")
        log.info("box stopped for idleness", extra={"box": name, "minutes": minutes})
        return self._current(names, updated)

    def stop_over_budget(self, name: str, message: str) -> Devbox:
        """Stop a running box whose owner or group used up a budget, like an idle stop:
        replicas 0, the home volume kept; ``message`` is what its status says."""
        names = naming.object_names(name)
        deployment = self._deployment(names)
        annotations = {budget_stop.ANNOTATION_BUDGET_STOPPED: message}
        self._keep_ssh_port(names, annotations)
        updated = self._writer.patch(
            deployment, {"metadata": {"annotations": annotations}, "spec": {"replicas": 0}}
        )
        self.release_service(names)
        self.record(updated, "BudgetStopped", f"{message} Storage kept.")
        log.info("box stopped for its budget", extra={"box": name})
        return self._current(names, updated)

    def note_budgets(self, deployment: Obj, crossed: frozenset[str]) -> Obj | None:
        """Write the budgets a running box has crossed (their keys) over the version read;
        None when another writer changed the box in between."""
        try:
            return self._writer.patch(
                deployment,
                {
                    "metadata": {
                        "annotations": {
                            budget_stop.ANNOTATION_BUDGETS_EXCEEDED: budget_stop.exceeded_record(
                                crossed
                            )
                        },
                        # Told once per crossing, even when two replicas briefly both lead.
                        "resourceVersion": deployment["metadata"]["resourceVersion"],
                    }
                },
            )
        except Conflict:
            return None

    def _check_budgets(self, asker: limits.Asker, spec: BoxSpec) -> None:
        """Conflict when the asker or a group of theirs used up a budget of the box's
        profile; Unavailable while the usage record is not yet read, since budgets fail
        closed."""
        settings = self.settings.limits
        profile = spec.gpu.name if spec.gpu is not None else None
        if not budgets.applying(settings, asker.person, asker.groups, profile):
            return
        if not self.store.usage.synced():
            raise Unavailable(
                "the GPU usage record is still being read, so budgets cannot be checked "
                "yet; try again in a moment"
            )
        today = self.clock().astimezone(UTC).date()
        rows = self.store.usage.rows(budgets.first_day(settings, today))
        budgets.check(settings, rows, asker, profile, today)

    def _deployment(self, names: ObjectNames, scope: str | None = None) -> Obj:
        """The box's Deployment, when the box is ``scope``'s (any box's when None):
        another person's box is as absent as one that does not exist."""
        deployment = self.store.deployment(names)
        if deployment is None or not ownership.visible(deployment, scope):
            raise NotFound(f"devbox '{names.box}' not found")
        return deployment

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
        deployment = self._deployment(naming.object_names(name), scope)
        try:
            spec = spec_from_deployment(deployment)
        except SnapshotError as err:
            raise Conflict(f"devbox '{name}' cannot be started: {err}") from None
        stopped = naming.is_stopped(deployment)
        groups: dict[str, str] = {}
        if asker is not None and stopped and spec.owner == asker.person:
            ask = limits.Ask(asker, new_box=False, device=_device(spec), count=_count(spec))
            box = deployment["metadata"]["name"]
            others = self._holdings.of(self.store.deployments(), leaving_out=box)
            limits.check_quota(self.settings.limits, ask, others)
            self._check_budgets(asker, spec)
            groups[ownership.ANNOTATION_OWNER_GROUPS] = ownership.groups_record(
                _limited_groups(self.settings, asker)
            )
        if stopped:
            # The release's changes go in before the pod exists, so it starts with them.
            deployment = self.rebuild_if_changed(deployment) or deployment
        wanted = self._wanted(spec, deployment)
        # The Service before the pod: a running box without one would look broken to the
        # reconciler, which repairs it.
        self.ensure_storage(spec, wanted)
        self.ensure_service(spec, deployment, wanted)
        now = self.clock()
        expires = now + timedelta(hours=spec.ttl_hours)
        spec_patch: dict[str, Any] = {"replicas": 1}
        if stopped:
            stamp = {naming.ANNOTATION_STARTED_AT: format_timestamp(now, microseconds=True)}
            spec_patch["template"] = {"metadata": {"annotations": stamp}}
        updated = self._writer.patch(
            deployment,
            {
                "metadata": {
                    "annotations": {
                        **groups,
                        naming.ANNOTATION_EXPIRES_AT: format_timestamp(expires),
                        naming.ANNOTATION_WAITING_SINCE: format_timestamp(now),
                        naming.ANNOTATION_EXPIRED_AT: None,
                        # A new pod: what the last one's agent said no longer holds.
                        activity.ANNOTATION_ACTIVITY: None,
                        activity.ANNOTATION_IDLE_STOPPED: None,
                        # A new run: a budget it crosses is told of again.
                        budget_stop.ANNOTATION_BUDGET_STOPPED: None,
                        budget_stop.ANNOTATION_BUDGETS_EXCEEDED: None,
                    }
                },
                "spec": spec_patch,
            },
        )
        self.ensure_claim_template(spec, updated, wanted)
        if wanted.activity_secret is not None:
            self._writer.activity_secret(wanted.activity_secret)
        self.record(
            updated,
            "Started",
            f"Started; stops automatically at {format_timestamp(expires)}",
        )
        return self._current(spec.names, updated)

    def _record_cut(self, updated: Obj, stamp: str, clash: Clash) -> None:
        self.record(
            updated,
            "TimeToLiveCut",
            f"Stops automatically at {stamp}, before its time to live ends, to keep a "
            f"booking: {clash.sentence()}",
        )

    def keep_booking(self, name: str, clash: Clash) -> bool:
        """End a running box's time to live where a booking opens, the box being one too
        many there; False when the box changed in between (the next pass looks again)."""
        deployment = self.store.deployment(naming.object_names(name))
        ends = stop_warning.time_to_live_end(deployment) if deployment is not None else None
        if deployment is None or ends is None or ends <= clash.at:
            return False
        stamp = format_timestamp(clash.at)
        try:
            updated = self._writer.patch(
                deployment,
                {
                    "metadata": {
                        "annotations": {naming.ANNOTATION_EXPIRES_AT: stamp},
                        "resourceVersion": deployment["metadata"]["resourceVersion"],
                    }
                },
            )
        except Conflict:
            return False
        self._record_cut(updated, stamp, clash)
        log.warning(
            "box time to live cut to keep a booking",
            extra={"box": name, "stops_at": stamp, "bookings": [r.name for r in clash.bookings]},
        )
        return True

    def begin_time_to_live(self, name: str, deployment: Obj, now: datetime) -> Obj:
        """A box whose pod was first given a node since it was created or started: its
        deadline moves later by the time it waited, so a wait in line costs none of its
        time to live."""
        annotations = deployment["metadata"].get("annotations") or {}
        since = parse_timestamp(annotations[naming.ANNOTATION_WAITING_SINCE])
        waited = max(now - since, timedelta(0))
        expires = parse_timestamp(annotations[naming.ANNOTATION_EXPIRES_AT]) + waited
        profile = activity.gpu_profile(deployment)
        clash = (
            None
            if profile is None
            else self.promises.clash(profile, name, ownership.owner_of(deployment), expires, now)
        )
        if clash is not None:
            expires = clash.at
        stamp = format_timestamp(expires)
        updated = self._writer.patch(
            deployment,
            {
                "metadata": {
                    "annotations": {
                        naming.ANNOTATION_EXPIRES_AT: stamp,
                        naming.ANNOTATION_WAITING_SINCE: None,
                    },
                    # Another writer's change in between (an extend, a stop) wins.
                    "resourceVersion": deployment["metadata"]["resourceVersion"],
                }
            },
        )
        if clash is not None:
            self._record_cut(updated, stamp, clash)
        elif waited >= timedelta(minutes=1):
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
        name = naming.box_name_of(deployment)
        try:
            changed = template.changes(deployment, self.settings)
            patch = template.rebuild_patch(deployment, self.settings) if changed else None
        except SnapshotError as err:
            raise Conflict(f"devbox '{name}' cannot be rebuilt: {err}") from None
        if name is None or patch is None:
            return None
        updated = self._writer.patch(deployment, patch)
        self.record(updated, "Rebuilt", f"Pod template rebuilt: {'; '.join(changed)}")
        log.info("box rebuilt", extra={"box": name, "changes": changed})
        return updated

    def stop_box(
        self, name: str, expired_at: datetime | None = None, scope: str | None = None
    ) -> Devbox:
        """Replicas 0 and no Service; the claim, the snapshot and the TTL annotation stay."""
        names = naming.object_names(name)
        deployment = self._deployment(names, scope)
        annotations: dict[str, Any] = {}
        if expired_at is not None:
            annotations[naming.ANNOTATION_EXPIRED_AT] = format_timestamp(expired_at)
        self._keep_ssh_port(names, annotations)
        updated = self._writer.patch(
            deployment, {"metadata": {"annotations": annotations}, "spec": {"replicas": 0}}
        )
        self.release_service(names)
        if expired_at is not None:
            self.record(updated, "Expired", "Stopped: its time to live ran out; storage kept")
        else:
            self.record(updated, "Stopped", "Stopped on request; storage kept")
        return self._current(names, updated)

    def delete(self, name: str, purge: bool, scope: str | None = None) -> DeleteResult:
        """Compute and Service go; the home claim stays unless ``purge``."""
        names = naming.object_names(name)
        deployment = self.store.deployment(names)
        claim = self.store.claim(names)
        if deployment is not None and not ownership.visible(deployment, scope):
            deployment = claim = None
        if claim is not None and not ownership.visible(claim, scope):
            claim = None
        if deployment is None and not (purge and claim is not None):
            raise NotFound(f"devbox '{name}' not found")
        self._writer.delete_deployment(names)
        self._writer.delete_service(names)
        if purge:
            self.purge_claim(names)
        self.store.has_forgotten(names)
        message = (
            f"devbox '{name}' deleted with its home volume"
            if purge
            else f"devbox '{name}' deleted; home volume {names.pvc} kept"
        )
        log.info("box deleted", extra={"box": name, "purged": purge})
        return DeleteResult(name=name, purged=purge, message=message)

    def purge_claim(self, names: ObjectNames) -> bool:
        """Delete a box's home claim: the only code path that deletes one."""
        deleted = self._writer.delete_claim(names)
        if deleted:
            # So that the volume list read right after the purge no longer shows it.
            self.store.has_forgotten_claim(names)
        return deleted

    def extend_box(self, name: str, hours: int, scope: str | None = None) -> Devbox:
        """Push a running box's deadline back, never beyond ``ttl.maxHours`` from now."""
        deployment = self._deployment(naming.object_names(name), scope)
        if naming.is_stopped(deployment):
            raise Conflict(f"devbox '{name}' is stopped; start it, which renews its time to live")
        try:
            spec = spec_from_deployment(deployment)
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
        self._keeps_bookings(name, deployment, spec, base, expires, now)
        stamp = format_timestamp(expires)
        annotations = {naming.ANNOTATION_EXPIRES_AT: stamp}
        record = activity.recorded(deployment)
        if record is not None and record.idle_since is not None:
            # Asking for more time is a sign of life: the idle window starts again.
            annotations[activity.ANNOTATION_ACTIVITY] = dataclasses.replace(
                record, idle_since=now
            ).to_json()
        updated = self._writer.patch(deployment, {"metadata": {"annotations": annotations}})
        self.record(
            updated,
            "Extended",
            f"Extended by {hours} h; stops automatically at {stamp}",
        )
        return self._current(spec.names, updated)

    def _keeps_bookings(
        self,
        name: str,
        deployment: Obj,
        spec: BoxSpec,
        base: datetime,
        expires: datetime,
        now: datetime,
    ) -> None:
        """Conflict naming the booking that running until ``expires`` would break."""
        if spec.gpu is None:
            return
        owner = ownership.owner_of(deployment)
        clash = self.promises.clash(spec.gpu.name, name, owner, expires, now, since=base)
        if clash is None:
            return
        room = int((clash.at - base) / timedelta(hours=1))
        more = (
            f"it can be extended by at most {room} h"
            if room >= 1
            else "it cannot be extended by a whole hour"
        )
        raise Conflict(
            f"{name} cannot run past {format_timestamp(clash.at)}: every {spec.gpu.name} "
            f"device is promised then ({clash.sentence()}); {more}"
        )


def _device(spec: BoxSpec) -> str | None:
    """What a box's devices are counted by in the limits."""
    return spec.gpu.device_name if spec.gpu is not None else None


def _count(spec: BoxSpec) -> int:
    return spec.gpu.count if spec.gpu is not None else 0


def _limited_groups(settings: Settings, asker: limits.Asker) -> list[str]:
    return limits.limited_groups(settings.limits, asker.groups)


def _created_message(spec: BoxSpec, reused: bool) -> str:
    # The accelerator in the words every client shows it in.
    accelerator = (
        f"GPU profile {spec.gpu.name} ({accelerator_label(spec.gpu.allocation())})"
        if spec.gpu
        else accelerator_label(None)
    )
    image = f", image profile {spec.image.name} ({spec.image.mode})" if spec.image else ""
    home = "; reusing its retained home volume" if reused else ""
    return f"Created with preset {spec.preset}, {accelerator}{image}{home}"
