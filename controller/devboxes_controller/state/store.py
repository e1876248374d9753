"""The watch-backed store of one namespace's boxes: cached objects, derived status,
each box's place in line for a device, the kept response bodies, and waiters.

Every read of the API is answered from here, from memory. Watch threads feed it; a box's
status is derived again whenever one of its objects changes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes import client

from devboxes_sdk.models import Devbox, DevboxState

from ..box import ownership, render, status
from ..config.settings import Settings, SnapshotError
from ..k8s import kube
from ..k8s.kube import NotFound, Obj
from ..placement import capacity, queue
from . import slim
from .availability import Availability
from .bodies import Body, body
from .cache import Informer
from .index import CPU, BoxIndex, Key
from .metrics import METRICS

Clock = Callable[[], datetime]
SETTLED = frozenset({DevboxState.READY, DevboxState.DEGRADED})


def utcnow() -> datetime:
    return datetime.now(UTC)


def _line_entry(
    name: str, objects: status.BoxObjects, box: Devbox, gate: bool
) -> tuple[capacity.Queued | None, queue.Holder | None]:
    """The box's entry in the line for its device, and what it holds of it; ``gate``:
    whether boxes of extended resources are rendered with the queue's gate."""
    gpu = box.gpu
    pod = status.current_pod(objects.pods)
    if gpu is None or pod is None or (objects.deployment.get("spec") or {}).get("replicas") == 0:
        return None, None
    owner = ownership.owner_of(pod)
    gated = render.gated(pod)
    # A DRA box's resource_name is its device class, which no node counts: it is never
    # in the line of an extended resource.
    resource = gpu.resource_name if gpu.kind == "extended-resource" else None
    holding = None
    if (
        resource is not None
        and not gated
        and (pod.get("status") or {}).get("phase") not in capacity.TERMINATED_PHASES
    ):
        node = (pod.get("spec") or {}).get("nodeName")
        holding = queue.Holder(pod["metadata"].get("uid", ""), node, owner, resource, gpu.count)
    since = status.waiting_since(objects)
    if since is None:
        return None, holding
    # A DRA profile has no gate: its boxes form a line of their own, ordered the same way.
    line = resource if resource is not None else f"dra:{gpu.profile}"
    waiter = queue.Waiter(name, pod["metadata"]["name"], owner, line, gpu.count, since, gated)
    # Without the gate the scheduler picks: the place is an estimate and nothing is taken.
    exact = gate and resource is not None
    taken = (
        exact and not gated and f"Insufficient {resource}" in (status.scheduling_detail(pod) or "")
    )
    queued = capacity.Queued(gpu.profile, gpu.display_name, waiter, exact, taken)
    return queued, holding


class BoxStore:
    """Cached objects and derived status of every box in one namespace."""

    def __init__(self, settings: Settings, api: client.ApiClient, clock: Clock = utcnow) -> None:
        self.settings = settings
        self.clock = clock
        core = client.CoreV1Api(api)
        apps = client.AppsV1Api(api)
        self._status: dict[str, Devbox] = {}
        self._status_body: dict[str, Body] = {}
        # List bodies by (owner, state, profile) filter, made when first asked for and
        # dropped when one of their boxes changes.
        self._list_bodies: dict[Key, Body] = {}
        self._index = BoxIndex()
        self._status_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: dict[str, asyncio.Event] = {}
        self._queued: dict[str, capacity.Queued] = {}
        self._holding: dict[str, queue.Holder] = {}
        # The last walk of the line (control.queue): who is about to be placed, and what
        # boxes that fit nowhere lack beside a free device.
        self._walk = queue.NO_WALK
        self._listeners: list[Callable[[str], None]] = []
        self._answer_listeners: list[Callable[[str], None]] = []
        selector = render.MANAGED_SELECTOR
        ns = settings.namespace
        box_of = render.box_name_of
        self._deployments = Informer(
            "deployments",
            apps.list_namespaced_deployment,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.deployment,
        )
        self._replicasets = Informer(
            "replicasets",
            apps.list_namespaced_replica_set,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.replicaset,
            keep=slim.failing_replicaset,
        )
        self._pods = Informer(
            "pods",
            core.list_namespaced_pod,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.pod,
        )
        self._services = Informer(
            "services",
            core.list_namespaced_service,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.service,
        )
        self._pvcs = Informer(
            "persistentvolumeclaims",
            core.list_namespaced_persistent_volume_claim,
            ns,
            box_of,
            self._changed_box,
            selector,
            strip=slim.persistent_volume_claim,
        )
        self._events = Informer(
            "events",
            core.list_namespaced_event,
            ns,
            render.box_of_event,
            self._changed_box,
            strip=slim.event,
        )
        self._claim_templates: Informer | None = None
        self._resource_claims: Informer | None = None
        self._slices: Informer | None = None
        dra: tuple[Informer, ...] = ()
        if settings.gpu.uses_dra:
            resource = client.ResourceV1Api(api)
            self._claim_templates = Informer(
                "resourceclaimtemplates",
                resource.list_namespaced_resource_claim_template,
                ns,
                box_of,
                self._changed_box,
                selector,
                strip=slim.claim_template,
            )
            # Made by Kubernetes from a box's template, with the template's box labels.
            self._resource_claims = Informer(
                "resourceclaims",
                resource.list_namespaced_resource_claim,
                ns,
                box_of,
                self._changed_box,
                selector,
                strip=slim.resource_claim,
            )
            dra = (self._claim_templates, self._resource_claims)
        self._informers = (
            self._deployments,
            self._replicasets,
            self._pods,
            self._services,
            self._pvcs,
            self._events,
            *dra,
        )
        # Not among ``informers``: readiness never depends on the cluster-wide watches.
        self.availability = Availability(settings, api, self.waiting_counts)
        self.availability.add_listener(self._availability_changed)
        # The published devices: one watch, the availability's.
        if settings.gpu.uses_dra:
            self._slices = self.availability.slices
            self.availability.add_device_listener(self._devices_changed)

    def start(self) -> None:
        for informer in self._informers:
            informer.start()
        self.availability.start()

    def stop(self) -> None:
        for informer in self._informers:
            informer.stop()
        self.availability.stop()

    def deployment(self, name: str) -> Obj | None:
        return self._deployments.get(render.object_names(name).deployment)

    def deployments(self) -> list[Obj]:
        return self._deployments.all()

    def claim(self, name: str) -> Obj | None:
        """The box's home claim, which may outlive the box."""
        return self._pvcs.get(render.object_names(name).pvc)

    def claims(self) -> list[Obj]:
        return self._pvcs.all()

    def service(self, name: str) -> Obj | None:
        return self._services.get(render.object_names(name).service)

    @property
    def watches_claims(self) -> bool:
        """Whether the DRA kinds are cached: only while some profile is of DRA devices."""
        return self._claim_templates is not None

    def claim_template(self, name: str) -> Obj | None:
        """A DRA box's ResourceClaimTemplate, when cached."""
        if self._claim_templates is None:
            return None
        return self._claim_templates.get(render.object_names(name).claim_template)

    def has_seen(self, deployment: Obj) -> bool:
        """Wait briefly until the cache holds this version of a written Deployment, so the
        response to a write and the next read agree."""
        return self._deployments.wait_for_version(
            deployment["metadata"]["name"], kube.resource_version(deployment)
        )

    def has_forgotten(self, name: str) -> bool:
        """Wait briefly until the cache no longer holds the box's Deployment."""
        return self._deployments.wait_for_absence(render.object_names(name).deployment)

    def has_forgotten_service(self, name: str) -> bool:
        """Wait briefly until the cache no longer holds the box's SSH Service, or sees it go."""
        return self._services.wait_for_absence(render.object_names(name).service)

    def has_forgotten_claim(self, name: str) -> bool:
        """Wait briefly until the cache no longer holds the box's home claim, or sees it go."""
        return self._pvcs.wait_for_absence(render.object_names(name).pvc)

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self._informers)

    def stale_kinds(self) -> list[str]:
        """Kinds whose watch is not established right now."""
        return [i.kind for i in self._informers if not i.healthy.is_set()]

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Waiters live on this loop; watch threads wake them through it."""
        self._loop = loop

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Called from watch threads with the box name whenever a box's status is recomputed."""
        self._listeners.append(listener)

    def add_answer_listener(self, listener: Callable[[str], None]) -> None:
        """Called from watch threads with the box name whenever what the API answers for
        the box changes: its body, or its absence."""
        self._answer_listeners.append(listener)

    def objects(self, name: str) -> status.BoxObjects | None:
        names = render.object_names(name)
        deployment = self._deployments.get(names.deployment)
        if deployment is None:
            return None
        claims = self._resource_claims.for_box(name) if self._resource_claims else []
        return status.BoxObjects(
            deployment=deployment,
            pods=self._pods.for_box(name),
            replicasets=self._replicasets.for_box(name),
            events=self._events.for_box(name),
            service=self._services.get(names.service),
            pvc=self._pvcs.get(names.pvc),
            claims=claims,
            devices=self._allocated_devices(claims),
        )

    def _allocated_devices(self, claims: list[Obj]) -> dict[status.DeviceKey, Obj]:
        wanted = {status.device_key(r) for c in claims for r in status.allocation_results(c)}
        if not wanted or self._slices is None:
            return {}
        found: dict[status.DeviceKey, Obj] = {}
        for resource_slice in self._slices.all():
            spec = resource_slice.get("spec") or {}
            driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
            for device in spec.get("devices") or []:
                key = (str(driver), str(pool), str(device.get("name")))
                if key in wanted:
                    found[key] = device
        return found

    def _devices_changed(self) -> None:
        """A slice that arrives after a claim's allocation names its device then."""
        if self._resource_claims is None:
            return
        for name in sorted(self._resource_claims.boxes()):
            self._changed_box(name)

    def _changed_box(self, name: str) -> None:
        with self._status_lock:
            # Read under the lock: watch threads of two kinds may announce the same box at
            # once, and the one that stores last must also have read last, or its older
            # view (a Deployment without its new pod) would stand until the next event.
            objects = self.objects(name)
            was = self._queued.pop(name, None)
            was_holding = self._holding.pop(name, None)
            changed: set[str] = set()
            if objects is None:
                if self._status.pop(name, None) is not None:
                    changed.add(name)
                self._status_body.pop(name, None)
                self._drop_lists(self._index.remove(name))
            else:
                box = status.derive(objects, self.settings, self.clock())
                gate = self.settings.counts_devices
                queued, holding = _line_entry(name, objects, box, gate)
                if queued is not None:
                    self._queued[name] = queued
                if holding is not None:
                    self._holding[name] = holding
                if self._store(box):
                    changed.add(name)
            now, now_holding = self._queued.get(name), self._holding.get(name)
            lines = {q.waiter.resource for q in (was, now) if q is not None}
            if was_holding != now_holding:
                lines |= {h.resource for h in (was_holding, now_holding) if h is not None}
            summarized = self._summarize(lines)
        if was != now:
            self.availability.kick()
        METRICS.boxes_changed()
        self._announce({name} | summarized, changed | summarized)

    def _store(self, box: Devbox) -> bool:
        """Whether the box reads otherwise than before. Called with the status lock held."""
        answer = body(box.model_dump_json().encode())
        before = self._status_body.get(box.name)
        self._status[box.name] = box
        self._status_body[box.name] = answer
        profile = box.gpu.profile if box.gpu else CPU
        moved = self._index.put(box.name, box.owner, box.state.value, profile)
        # Watches resend objects whose box reads the same: those leave every list as it was.
        changed = before is None or before.etag != answer.etag
        self._drop_lists(moved | set(self._index.keys_of(box.name)) if changed else moved)
        return changed

    def _drop_lists(self, keys: set[Key]) -> None:
        """Called with the status lock held."""
        for key in keys:
            self._list_bodies.pop(key, None)

    def _announce(self, names: set[str], changed: set[str]) -> None:
        """Tell the listeners of ``names``, recomputed, and the answer listeners of those
        among them whose answer ``changed``."""
        for name in sorted(names):
            for listener in self._listeners:
                listener(name)
            if name in changed:
                for listener in self._answer_listeners:
                    listener(name)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._wake, name)

    def waiting_counts(self) -> dict[str, int]:
        """Boxes waiting for a device, by profile."""
        counts: dict[str, int] = {}
        for queued in list(self._queued.values()):
            counts[queued.profile] = counts.get(queued.profile, 0) + 1
        return counts

    def _summarize(self, lines: set[str]) -> set[str]:
        """Give each waiting box of these lines its place and its profile's free count;
        returns the boxes whose summary changed. Called with the status lock held."""
        touched: set[str] = set()
        if not lines:
            return touched
        waiters = [q.waiter for q in self._queued.values() if q.waiter.resource in lines]
        # The last walk may predate a box's new pod: only a box still let through is placing.
        placing = {w.box for w in waiters if not w.gated and w.box in self._walk.placing}
        places = queue.places(waiters, queue.held(self._holding.values()), placing)
        summaries: dict[str, str] = {}
        for name, place in places.items():
            queued = self._queued[name]
            entry = self.availability.profile(queued.profile)
            others = self._others_holding(queued) if queued.exact else []
            lacking = self._walk.short.get(name, ()) if queued.exact else ()
            summaries[name] = capacity.waiting_summary(queued, entry, place, others, lacking)
        for name in placing:
            display_name = self._queued[name].display_name
            summaries[name] = capacity.PLACING.format(display_name=display_name)
        for name, summary in summaries.items():
            box = self._status.get(name)
            if box is not None and box.summary != summary:
                self._store(box.model_copy(update={"summary": summary}))
                touched.add(name)
        return touched

    def _others_holding(self, queued: capacity.Queued) -> list[str]:
        """The pods that are not boxes holding devices the box could use, by name."""
        pods = self.availability.holding(queued.waiter.resource)
        # Most clusters have none: then the box's pinned profile is not even read.
        if not pods:
            return []
        deployment = self._deployments.get(render.object_names(queued.waiter.box).deployment)
        try:
            profile = render.spec_from_deployment(deployment).gpu if deployment else None
        except SnapshotError:
            return []
        return self.availability.on_nodes_of(profile, pods) if profile else []

    def line(self) -> tuple[list[queue.Waiter], list[queue.Holder]]:
        """The boxes waiting for a device and the boxes holding one, as the caches show."""
        with self._status_lock:
            return [q.waiter for q in self._queued.values()], list(self._holding.values())

    def walked(self, walk: queue.Walk) -> None:
        """Take the line's last walk into the summaries of the boxes it tells otherwise."""
        with self._status_lock:
            before, self._walk = self._walk, walk
            moved = before.placing ^ walk.placing
            moved |= {
                n
                for n in before.short.keys() | walk.short.keys()
                if before.short.get(n) != walk.short.get(n)
            }
            touched = self._summarize(
                {self._queued[n].waiter.resource for n in moved if n in self._queued}
            )
        self._announce(touched, touched)

    def _availability_changed(self) -> None:
        with self._status_lock:
            touched = self._summarize({q.waiter.resource for q in self._queued.values()})
        self._announce(touched, touched)

    def _wake(self, name: str) -> None:
        event = self._changed.pop(name, None)
        if event is not None:
            event.set()

    def get(self, name: str, owner: str | None = None) -> Devbox:
        """The box, when it is ``owner``'s (any box's when None): another person's box is
        as absent as one that does not exist."""
        box = self._status.get(name)
        if box is None or (owner is not None and box.owner != owner):
            raise NotFound(f"devbox '{name}' not found")
        return box

    def get_body(self, name: str, owner: str | None = None) -> Body:
        """The get response body, kept current by the watches."""
        answer, box = self._status_body.get(name), self._status.get(name)
        # Both are read without the lock: a box removed between the two reads is absent.
        if answer is None or box is None or (owner is not None and box.owner != owner):
            raise NotFound(f"devbox '{name}' not found")
        return answer

    def _newest_first(self, boxes: list[Devbox]) -> Body:
        """Called with the status lock held."""
        order = sorted(boxes, key=lambda b: (b.created_at, b.name), reverse=True)
        parts = [self._status_body[b.name].data for b in order]
        return body(b'{"items":[' + b",".join(parts) + b"]}", compress=True)

    def list_body(self, owner: str | None = None) -> Body:
        """The list response body, assembled from the per-box bodies once per change; only
        ``owner``'s boxes when given."""
        with self._status_lock:
            return self._listed(owner)

    def listing(self, owner: str | None = None) -> tuple[Body, set[str]]:
        """The list body of ``owner``'s boxes (every box's when None) and the names in it,
        read together."""
        with self._status_lock:
            return self._listed(owner), set(self._index.names((owner, None, None)))

    def _listed(self, owner: str | None) -> Body:
        """Called with the status lock held."""
        return self._filtered((owner, None, None))

    def _filtered(self, key: Key) -> Body:
        """Called with the status lock held."""
        answer = self._list_bodies.get(key)
        if answer is None:
            names = self._index.names(key)
            answer = self._newest_first([self._status[name] for name in names])
            # A filter no box matches is not kept: anyone may ask for countless such.
            if names:
                self._list_bodies[key] = answer
        return answer

    def filtered_body(self, state: str | None, profile: str | None, owner: str | None) -> Body:
        """The list response body of the boxes of this owner, in this state and of this
        profile (``None``: any)."""
        with self._status_lock:
            return self._filtered((owner, state, profile))

    def page(
        self,
        key: tuple[str | None, str | None, str | None],
        after: str,
        limit: int | None,
    ) -> tuple[list[bytes], str | None]:
        """The bodies of up to ``limit`` boxes of the ``(owner, state, profile)`` filter
        named after ``after``, in name order, and the name to continue after when more
        boxes follow."""
        with self._status_lock:
            page = self._index.page(key, after, limit)
            parts = [self._status_body[name].data for name in page.names]
        return parts, page.names[-1] if page.more else None

    def profiles(self) -> set[str]:
        """The profiles some box has now."""
        with self._status_lock:
            return self._index.profiles()

    def counts(self) -> dict[str, int]:
        totals = {state.value: 0 for state in DevboxState}
        for box in list(self._status.values()):
            totals[box.state.value] += 1
        return totals

    async def wait_settled(self, name: str, timeout: float, owner: str | None = None) -> Devbox:
        """Until the box is ready or degraded, or the timeout passes; no polling, no thread."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            box = self.get(name, owner)
            remaining = deadline - loop.time()
            if box.state in SETTLED or remaining <= 0:
                return box
            event = self._changed.setdefault(name, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return self.get(name, owner)
