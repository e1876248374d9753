"""The box lifecycle over watch-backed caches: create, start, stop, delete, status, waiting.

Reads come from memory. Every rule is checked before the first write. Writes are
idempotent, so a create interrupted between steps is finished by reconciliation, and the
response to a write waits (briefly) until the cache has seen it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from devboxes_sdk.models import ActivityReport, DeleteResult, Devbox, DevboxCreate, DevboxState

from . import activity, capacity, kube, render, slim, status, template
from .availability import Availability
from .bodies import Body, body
from .cache import Informer
from .kube import RETRY_AFTER_SECONDS, ApiProblem, Conflict, Invalid, NotFound, Obj
from .metrics import METRICS
from .settings import ProfileRejected, Settings, SnapshotError, quantity_value

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
SETTLED = frozenset({DevboxState.READY, DevboxState.DEGRADED})
DEPLOYMENT_PREFIX = "devbox-"


def utcnow() -> datetime:
    return datetime.now(UTC)


def _box_from_event(event: Obj) -> str | None:
    """Events carry no labels: map the involved object's name back to its box."""
    involved = event.get("involvedObject") or {}
    name = str(involved.get("name") or "")
    if involved.get("kind") not in ("ReplicaSet", "Pod", "Deployment"):
        return None
    if not name.startswith(DEPLOYMENT_PREFIX):
        return None
    parts = name[len(DEPLOYMENT_PREFIX) :].split("-")
    # Deployment devbox-NAME, ReplicaSet devbox-NAME-HASH, Pod devbox-NAME-HASH-SUFFIX
    trim = {"Deployment": 0, "ReplicaSet": 1, "Pod": 2}[str(involved["kind"])]
    return "-".join(parts[: len(parts) - trim]) if len(parts) > trim else None


@dataclass(frozen=True)
class Queued:
    """A GPU box whose pod the scheduler cannot place yet."""

    profile: str
    display_name: str
    since: str


class Boxes:
    """All boxes of one namespace: cached state, derived status, lifecycle verbs."""

    def __init__(
        self,
        settings: Settings,
        api: client.ApiClient,
        *,
        activity_key: bytes,
        clock: Clock = utcnow,
    ) -> None:
        self.settings = settings
        self.activity_key = activity_key
        self.namespace = settings.namespace
        self.clock = clock
        self.api = api
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._status: dict[str, Devbox] = {}
        self._status_body: dict[str, Body] = {}
        self._list_body: Body | None = None
        self._status_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: dict[str, asyncio.Event] = {}
        self._queued: dict[str, Queued] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._events = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k8s-events")
        selector = render.MANAGED_SELECTOR
        ns = self.namespace
        box_of = render.box_name_of
        self.deployments = Informer(
            "deployments",
            self._apps.list_namespaced_deployment,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.deployment,
        )
        self.replicasets = Informer(
            "replicasets",
            self._apps.list_namespaced_replica_set,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.replicaset,
        )
        self.pods = Informer(
            "pods",
            self._core.list_namespaced_pod,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.pod,
        )
        self.services = Informer(
            "services",
            self._core.list_namespaced_service,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.service,
        )
        self.pvcs = Informer(
            "persistentvolumeclaims",
            self._core.list_namespaced_persistent_volume_claim,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.persistent_volume_claim,
        )
        self.events = Informer(
            "events",
            self._core.list_namespaced_event,
            ns,
            _box_from_event,
            self._changed_box,
            strip=slim.event,
        )
        self.informers = (
            self.deployments,
            self.replicasets,
            self.pods,
            self.services,
            self.pvcs,
            self.events,
        )
        # Not among ``informers``: readiness never depends on the cluster-wide watches.
        self.availability = Availability(settings, api, self.waiting_counts)
        self.availability.add_listener(self._availability_changed)

    # -- caches and status -------------------------------------------------------------------
    def start(self) -> None:
        for informer in self.informers:
            informer.start()
        self.availability.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
        self.availability.stop()
        self._events.shutdown(wait=False)

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def stale_kinds(self) -> list[str]:
        """Kinds whose watch is not established right now."""
        return [i.kind for i in self.informers if not i.healthy.is_set()]

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Waiters live on this loop; watch threads wake them through it."""
        self._loop = loop

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Called from watch threads with the box name whenever a box's status is recomputed."""
        self._listeners.append(listener)

    def objects(self, name: str) -> status.BoxObjects | None:
        names = render.object_names(name)
        deployment = self.deployments.get(names.deployment)
        if deployment is None:
            return None
        return status.BoxObjects(
            deployment=deployment,
            pods=self.pods.for_box(name),
            replicasets=self.replicasets.for_box(name),
            events=self.events.for_box(name),
            service=self.services.get(names.service),
            pvc=self.pvcs.get(names.pvc),
        )

    def _changed_box(self, name: str) -> None:
        objects = self.objects(name)
        with self._status_lock:
            was = self._queued.pop(name, None)
            if objects is None:
                self._status.pop(name, None)
                self._status_body.pop(name, None)
                self._list_body = None
            else:
                box = status.derive(objects, self.settings)
                since = status.waiting_since(objects)
                if since is not None and box.gpu is not None:
                    self._queued[name] = Queued(box.gpu.profile, box.gpu.display_name, since)
                self._store(box)
            now = self._queued.get(name)
            profiles = {q.profile for q in (was, now) if q is not None}
            touched = {name} | self._summarize(profiles)
        if was != now:
            self.availability.kick()
        METRICS.boxes_changed()
        self._announce(touched)

    def _store(self, box: Devbox) -> None:
        """Called with the status lock held."""
        self._status[box.name] = box
        self._status_body[box.name] = body(box.model_dump_json().encode())
        self._list_body = None

    def _announce(self, names: set[str]) -> None:
        for name in sorted(names):
            for listener in self._listeners:
                listener(name)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._wake, name)

    def waiting_counts(self) -> dict[str, int]:
        """Boxes waiting for a device, by profile."""
        counts: dict[str, int] = {}
        for queued in list(self._queued.values()):
            counts[queued.profile] = counts.get(queued.profile, 0) + 1
        return counts

    def _summarize(self, profiles: set[str]) -> set[str]:
        """Give each waiting box of these profiles its place in line and the free count;
        returns the boxes whose summary changed. Called with the status lock held."""
        touched: set[str] = set()
        for profile in profiles:
            line = sorted(
                (q.since, name) for name, q in self._queued.items() if q.profile == profile
            )
            entry = self.availability.profile(profile)
            for position, (_, name) in enumerate(line, start=1):
                queued = self._queued[name]
                summary = capacity.waiting_summary(queued.display_name, entry, position)
                box = self._status.get(name)
                if box is not None and box.summary != summary:
                    self._store(box.model_copy(update={"summary": summary}))
                    touched.add(name)
        return touched

    def _availability_changed(self) -> None:
        with self._status_lock:
            touched = self._summarize({q.profile for q in self._queued.values()})
        self._announce(touched)

    def _wake(self, name: str) -> None:
        event = self._changed.pop(name, None)
        if event is not None:
            event.set()

    def get(self, name: str) -> Devbox:
        box = self._status.get(name)
        if box is None:
            raise NotFound(f"devbox '{name}' not found")
        return box

    def get_body(self, name: str) -> Body:
        """The get response body, kept current by the watches."""
        answer = self._status_body.get(name)
        if answer is None:
            raise NotFound(f"devbox '{name}' not found")
        return answer

    def list_body(self) -> Body:
        """The list response body, assembled from the per-box bodies once per change."""
        with self._status_lock:
            if self._list_body is None:
                order = sorted(
                    self._status.values(), key=lambda b: (b.created_at, b.name), reverse=True
                )
                parts = [self._status_body[b.name].data for b in order]
                self._list_body = body(b'{"items":[' + b",".join(parts) + b"]}", compress=True)
            return self._list_body

    def counts(self) -> dict[str, int]:
        totals = {state.value: 0 for state in DevboxState}
        for box in list(self._status.values()):
            totals[box.state.value] += 1
        return totals

    async def wait_settled(self, name: str, timeout: float) -> Devbox:
        """Until the box is ready or degraded, or the timeout passes; no polling, no thread."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            box = self.get(name)
            remaining = deadline - loop.time()
            if box.state in SETTLED or remaining <= 0:
                return box
            event = self._changed.setdefault(name, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return self.get(name)

    # -- writes ------------------------------------------------------------------------------
    def record(self, deployment: Obj, reason: str, message: str) -> None:
        """A Kubernetes Event on the box's Deployment, sent off the request path."""
        metadata = deployment["metadata"]
        now = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
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

    def validate(self, request: DevboxCreate) -> render.BoxSpec:
        """Every rule, before any write: TTL bound, preset and the GPU profile."""
        ttl = self.settings.ttl
        if request.ttl_hours > ttl.max_hours:
            raise Invalid(f"ttl_hours must be at most {ttl.max_hours}")
        try:
            profile = self.settings.gpu.resolve(request.gpu)
        except ProfileRejected as err:
            raise Invalid(err.message) from None
        return render.BoxSpec(
            name=request.name,
            preset=request.preset,
            ttl_hours=request.ttl_hours,
            repository=request.repository,
            expires_at=self.clock() + timedelta(hours=request.ttl_hours),
            gpu=profile,
        )

    def create(self, request: DevboxCreate) -> Devbox:
        spec = self.validate(request)
        names = render.object_names(spec.name)
        if self.deployments.get(names.deployment) is not None:
            raise Conflict(f"devbox '{spec.name}' already exists")
        claim = self.pvcs.get(names.pvc)
        if claim is not None and claim["metadata"].get("deletionTimestamp"):
            raise Conflict(
                f"the home volume {names.pvc} of a purged devbox '{spec.name}' is still being "
                "deleted; create the box again once it is gone",
                retry_after=RETRY_AFTER_SECONDS,
            )
        # The claim first: until it exists the scheduler refuses the pod with a confusing
        # "unbound immediate PersistentVolumeClaims" message instead of the real reason.
        self.ensure_storage(spec)
        try:
            deployment = kube.call(
                self._apps.create_namespaced_deployment,
                self.namespace,
                render.render_deployment(spec, self.settings),
            )
        except Conflict:
            raise Conflict(f"devbox '{spec.name}' already exists") from None
        METRICS.writes.labels("create").inc()
        self.ensure_service(spec, deployment)
        self.ensure_activity_secret(deployment)
        self.deployments.wait_for_version(names.deployment, kube.resource_version(deployment))
        self.record(deployment, "Created", _created_message(spec, reused=claim is not None))
        log.info(
            "box created",
            extra={
                "box": spec.name,
                "preset": spec.preset,
                "gpu_profile": spec.gpu.name if spec.gpu else None,
            },
        )
        return self._current(spec.name, deployment)

    def _current(self, name: str, deployment: Obj) -> Devbox:
        """The box's status, derived at once so the response reflects the write just made."""
        objects = self.objects(name) or status.BoxObjects(deployment=deployment)
        if kube.resource_version(objects.deployment) < kube.resource_version(deployment):
            objects = status.BoxObjects(
                deployment=deployment,
                pods=objects.pods,
                replicasets=objects.replicasets,
                events=objects.events,
                service=objects.service,
                pvc=objects.pvc,
            )
        return status.derive(objects, self.settings)

    def ensure_storage(self, spec: render.BoxSpec) -> None:
        """Create the home claim, or reuse a retained one and grow it; never shrink it."""
        names = render.object_names(spec.name)
        wanted = render.render_pvc(spec, self.settings)
        existing = self.pvcs.get(names.pvc)
        if existing is None:
            try:
                kube.call(
                    self._core.create_namespaced_persistent_volume_claim, self.namespace, wanted
                )
                METRICS.writes.labels("create").inc()
                return
            except Conflict:
                existing = kube.call(
                    self._core.read_namespaced_persistent_volume_claim, names.pvc, self.namespace
                )
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
                self._core.patch_namespaced_persistent_volume_claim,
                names.pvc,
                self.namespace,
                patch,
            )
            METRICS.writes.labels("patch").inc()

    def ensure_service(self, spec: render.BoxSpec, deployment: Obj) -> None:
        names = render.object_names(spec.name)
        if self.services.get(names.service) is not None:
            return
        service = render.render_service(spec, self.settings)
        service["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": deployment["metadata"]["name"],
                "uid": deployment["metadata"]["uid"],
            }
        ]
        try:
            kube.call(self._core.create_namespaced_service, self.namespace, service)
            METRICS.writes.labels("create").inc()
        except Conflict:
            return

    def ensure_activity_secret(self, deployment: Obj) -> None:
        """Write the box's agent credential, for its Deployment's uid and the current key."""
        name = render.box_name_of(deployment)
        if name is None:
            return
        secret = render.render_activity_secret(
            name,
            self.settings,
            activity.credential(self.activity_key, name, deployment["metadata"]["uid"]),
        )
        secret["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": deployment["metadata"]["name"],
                "uid": deployment["metadata"]["uid"],
            }
        ]
        try:
            kube.call(self._core.create_namespaced_secret, self.namespace, secret)
            METRICS.writes.labels("create").inc()
        except Conflict:
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
        updated = self._patch(
            name,
            {
                "metadata": {"annotations": {activity.ANNOTATION_IDLE_STOPPED: minutes}},
                "spec": {"replicas": 0},
            },
        )
        self.record(updated, "IdleStopped", f"Stopped after {minutes} min idle; storage kept")
        log.info("box stopped for idleness", extra={"box": name, "minutes": minutes})
        return self._current(name, updated)

    def _deployment(self, name: str) -> Obj:
        deployment = self.deployments.get(render.object_names(name).deployment)
        if deployment is None:
            raise NotFound(f"devbox '{name}' not found")
        return deployment

    def _patch(self, name: str, patch: Obj | list[Obj]) -> Obj:
        names = render.object_names(name)
        updated = kube.call(
            self._apps.patch_namespaced_deployment, names.deployment, self.namespace, patch
        )
        METRICS.writes.labels("patch").inc()
        self.deployments.wait_for_version(names.deployment, kube.resource_version(updated))
        return updated

    def start_box(self, name: str) -> Devbox:
        """Replicas 1 and a renewed TTL, from the pinned snapshot; storage and Service repaired."""
        deployment = self._deployment(name)
        try:
            spec = render.spec_from_deployment(deployment)
        except SnapshotError as err:
            raise Conflict(f"devbox '{name}' cannot be started: {err}") from None
        if (deployment.get("spec") or {}).get("replicas", 1) == 0:
            # The release's changes go in before the pod exists, so it starts with them.
            self.rebuild_if_changed(deployment)
        expires = self.clock() + timedelta(hours=spec.ttl_hours)
        updated = self._patch(
            name,
            {
                "metadata": {
                    "annotations": {
                        render.ANNOTATION_EXPIRES_AT: render.format_timestamp(expires),
                        render.ANNOTATION_EXPIRED_AT: None,
                        # A new pod: what the last one's agent said no longer holds.
                        activity.ANNOTATION_ACTIVITY: None,
                        activity.ANNOTATION_IDLE_STOPPED: None,
                    }
                },
                "spec": {"replicas": 1},
            },
        )
        self.ensure_storage(spec)
        self.ensure_service(spec, updated)
        self.ensure_activity_secret(updated)
        self.record(
            updated,
            "Started",
            f"Started; stops automatically at {render.format_timestamp(expires)}",
        )
        return self._current(name, updated)

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

    def stop_box(self, name: str, expired_at: datetime | None = None) -> Devbox:
        """Replicas 0; the claim, the snapshot and the TTL annotation stay."""
        self._deployment(name)
        annotations: dict[str, Any] = {}
        if expired_at is not None:
            annotations[render.ANNOTATION_EXPIRED_AT] = render.format_timestamp(expired_at)
        updated = self._patch(
            name, {"metadata": {"annotations": annotations}, "spec": {"replicas": 0}}
        )
        if expired_at is not None:
            self.record(updated, "Expired", "Stopped: its time to live ran out; storage kept")
        else:
            self.record(updated, "Stopped", "Stopped on request; storage kept")
        return self._current(name, updated)

    def delete(self, name: str, purge: bool) -> DeleteResult:
        """Compute and Service go; the home claim stays unless ``purge``."""
        names = render.object_names(name)
        deployment = self.deployments.get(names.deployment)
        claim = self.pvcs.get(names.pvc)
        if deployment is None and not (purge and claim is not None):
            raise NotFound(f"devbox '{name}' not found")
        for function, object_name in (
            (self._apps.delete_namespaced_deployment, names.deployment),
            (self._core.delete_namespaced_service, names.service),
        ):
            self._delete(function, object_name)
        if purge:
            self.purge_claim(name)
        self.deployments.wait_for_absence(names.deployment)
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
        return self._delete(
            self._core.delete_namespaced_persistent_volume_claim, render.object_names(name).pvc
        )

    def extend_box(self, name: str, hours: int) -> Devbox:
        """Push a running box's deadline back, never beyond ``ttl.maxHours`` from now."""
        deployment = self._deployment(name)
        if (deployment.get("spec") or {}).get("replicas", 1) == 0:
            raise Conflict(f"devbox '{name}' is stopped; start it, which renews its time to live")
        try:
            spec = render.spec_from_deployment(deployment)
        except SnapshotError as err:
            raise Conflict(f"devbox '{name}' cannot be extended: {err}") from None
        now = self.clock()
        maximum = self.settings.ttl.max_hours
        if hours > maximum:
            raise Invalid(f"hours must be at most {maximum}, the maximum time to live")
        base = max(spec.expires_at, now)
        room = int((now + timedelta(hours=maximum) - base) / timedelta(hours=1))
        if hours > room:
            # A conflict with the box's current deadline, not a malformed request: the same
            # hours are accepted for a box with more room.
            raise Conflict(
                f"hours must be at most {max(room, 0)}: a box stops at most {maximum} hours "
                f"from now (the maximum time to live), and {name} already runs until "
                f"{render.format_timestamp(base)}"
            )
        expires = base + timedelta(hours=hours)
        stamp = render.format_timestamp(expires)
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


def _created_message(spec: render.BoxSpec, reused: bool) -> str:
    accelerator = (
        f"GPU profile {spec.gpu.name} ({spec.gpu.count}x {spec.gpu.resource_name})"
        if spec.gpu
        else "no GPU"
    )
    home = "; reusing its retained home volume" if reused else ""
    return f"Created with preset {spec.preset}, {accelerator}{home}"
