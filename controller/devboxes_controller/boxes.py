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
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from devboxes_sdk.models import DeleteResult, Devbox, DevboxCreate, DevboxState

from . import kube, render, slim, status
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


class Boxes:
    """All boxes of one namespace: cached state, derived status, lifecycle verbs."""

    def __init__(self, settings: Settings, api: client.ApiClient, clock: Clock = utcnow) -> None:
        self.settings = settings
        self.namespace = settings.namespace
        self.clock = clock
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._status: dict[str, Devbox] = {}
        self._status_body: dict[str, Body] = {}
        self._list_body: Body | None = None
        self._status_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: dict[str, asyncio.Event] = {}
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

    # -- caches and status -------------------------------------------------------------------
    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
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
            self._list_body = None
            if objects is None:
                self._status.pop(name, None)
                self._status_body.pop(name, None)
            else:
                box = status.derive(objects, self.settings)
                self._status[name] = box
                self._status_body[name] = body(box.model_dump_json().encode())
        METRICS.boxes_changed()
        for listener in self._listeners:
            listener(name)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, name)

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
        self.deployments.wait_for_version(names.deployment, kube.resource_version(deployment))
        self.record(deployment, "Created", _created_message(spec))
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
        size = wanted["spec"]["resources"]["requests"]["storage"]
        current = existing["spec"]["resources"]["requests"]["storage"]
        if quantity_value(size) > quantity_value(current):
            kube.call(
                self._core.patch_namespaced_persistent_volume_claim,
                names.pvc,
                self.namespace,
                {"spec": {"resources": {"requests": {"storage": size}}}},
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

    def _deployment(self, name: str) -> Obj:
        deployment = self.deployments.get(render.object_names(name).deployment)
        if deployment is None:
            raise NotFound(f"devbox '{name}' not found")
        return deployment

    def _patch(self, name: str, patch: Obj) -> Obj:
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
        expires = self.clock() + timedelta(hours=spec.ttl_hours)
        updated = self._patch(
            name,
            {
                "metadata": {
                    "annotations": {
                        render.ANNOTATION_EXPIRES_AT: render.format_timestamp(expires),
                        render.ANNOTATION_EXPIRED_AT: None,
                    }
                },
                "spec": {"replicas": 1},
            },
        )
        self.ensure_storage(spec)
        self.ensure_service(spec, updated)
        self.record(
            updated,
            "Started",
            f"Started; stops automatically at {render.format_timestamp(expires)}",
        )
        return self._current(name, updated)

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
        background = client.V1DeleteOptions(propagation_policy="Background")
        for function, object_name in (
            (self._apps.delete_namespaced_deployment, names.deployment),
            (self._core.delete_namespaced_service, names.service),
            *([(self._core.delete_namespaced_persistent_volume_claim, names.pvc)] if purge else []),
        ):
            try:
                kube.call(function, object_name, self.namespace, body=background)
                METRICS.writes.labels("delete").inc()
            except NotFound:
                continue
        self.deployments.wait_for_absence(names.deployment)
        message = (
            f"devbox '{name}' deleted with its home volume"
            if purge
            else f"devbox '{name}' deleted; home volume {names.pvc} kept"
        )
        log.info("box deleted", extra={"box": name, "purged": purge})
        return DeleteResult(name=name, purged=purge, message=message)


def _created_message(spec: render.BoxSpec) -> str:
    accelerator = (
        f"GPU profile {spec.gpu.name} ({spec.gpu.count}x {spec.gpu.resource_name})"
        if spec.gpu
        else "no GPU"
    )
    return f"Created with preset {spec.preset}, {accelerator}"
