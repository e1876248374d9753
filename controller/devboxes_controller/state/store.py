"""The watch-backed store of one namespace's boxes: each box's status derived from its
cached objects, the kept response bodies, and waiters.

Every read of the API is answered from here, from memory. The watches (``watches``) are
handed in, built once for the process; a box's status is derived again whenever one of
its objects changes, and its entry in the line for a device (``line``) with it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from devboxes_sdk.models import Devbox, DevboxState

from ..box import naming, status
from ..box.naming import ObjectNames
from ..box.spec import spec_from_deployment
from ..config.catalog import SnapshotError
from ..config.gpu import GpuProfileConfig
from ..config.settings import Settings
from ..k8s import kube
from ..k8s.kube import NotFound, Obj
from ..placement import order
from .answers import Answers
from .availability import Availability
from .bodies import Body
from .bookings import Bookings
from .cache import Informer
from .line import DeviceLine, entry
from .metrics import METRICS
from .usage import History
from .watches import (
    BOOKINGS,
    CLAIM_TEMPLATES,
    DEPLOYMENTS,
    EVENTS,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    REPLICASETS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICES,
    USAGE,
    Watches,
)

Clock = Callable[[], datetime]
SETTLED = frozenset({DevboxState.READY, DevboxState.DEGRADED})


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Caches:
    """The caches a box's status is read from; the DRA kinds only while some profile is
    of DRA devices."""

    deployments: Informer
    replicasets: Informer
    pods: Informer
    services: Informer
    pvcs: Informer
    events: Informer
    claim_templates: Informer | None
    resource_claims: Informer | None
    slices: Informer | None

    @classmethod
    def of(cls, watches: Watches) -> Caches:
        claims = watches.get(RESOURCE_CLAIMS)
        return cls(
            watches[DEPLOYMENTS],
            watches[REPLICASETS],
            watches[PODS],
            watches[SERVICES],
            watches[PERSISTENT_VOLUME_CLAIMS],
            watches[EVENTS],
            watches.get(CLAIM_TEMPLATES),
            claims,
            # A DRA box's device is read from the published slices.
            watches.get(RESOURCE_SLICES) if claims is not None else None,
        )


class BoxStore:
    """Derived status of every box in one namespace, from the shared ``watches``.

    Without ``availability`` and ``line``, it makes its own over the same watches (a test
    that fills the caches by hand needs no others).
    """

    def __init__(
        self,
        settings: Settings,
        watches: Watches,
        availability: Availability | None = None,
        line: DeviceLine | None = None,
        clock: Clock = utcnow,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.device_line = line or DeviceLine()
        self.availability = availability or Availability(settings, watches, self.device_line)
        self._caches = Caches.of(watches)
        self.bookings = Bookings(watches[BOOKINGS])
        self.usage = History(watches[USAGE])
        self._answers = Answers()
        self._status_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: dict[str, asyncio.Event] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._answer_listeners: list[Callable[[str], None]] = []
        self._ready = watches.ready()
        watches.on_box_change(self._changed_box)
        if self._caches.slices is not None:
            self._caches.slices.subscribe(on_update=self._devices_changed)
        self.availability.add_listener(self._availability_changed)

    def deployment(self, names: ObjectNames) -> Obj | None:
        return self._caches.deployments.get(names.deployment)

    def deployments(self) -> list[Obj]:
        return self._caches.deployments.all()

    def pods(self, names: ObjectNames) -> list[Obj]:
        return self._caches.pods.for_box(names.box)

    def claim(self, names: ObjectNames) -> Obj | None:
        """The box's home claim, which may outlive the box."""
        return self._caches.pvcs.get(names.pvc)

    def claims(self) -> list[Obj]:
        return self._caches.pvcs.all()

    def service(self, names: ObjectNames) -> Obj | None:
        return self._caches.services.get(names.service)

    @property
    def watches_claims(self) -> bool:
        """Whether the DRA kinds are cached: only while some profile is of DRA devices."""
        return self._caches.claim_templates is not None

    def claim_template(self, names: ObjectNames) -> Obj | None:
        """A DRA box's ResourceClaimTemplate, when cached."""
        if self._caches.claim_templates is None:
            return None
        return self._caches.claim_templates.get(names.claim_template)

    def has_seen(self, deployment: Obj) -> bool:
        """Wait briefly until the cache holds this version of a written Deployment, so the
        response to a write and the next read agree."""
        return self._caches.deployments.wait_for_version(
            deployment["metadata"]["name"], kube.resource_version(deployment)
        )

    def has_forgotten(self, names: ObjectNames) -> bool:
        """Wait briefly until the cache no longer holds the box's Deployment."""
        return self._caches.deployments.wait_for_absence(names.deployment)

    def has_forgotten_service(self, names: ObjectNames) -> bool:
        """Wait briefly until the cache no longer holds the box's SSH Service, or sees it go."""
        return self._caches.services.wait_for_absence(names.service)

    def has_forgotten_claim(self, names: ObjectNames) -> bool:
        """Wait briefly until the cache no longer holds the box's home claim, or sees it go."""
        return self._caches.pvcs.wait_for_absence(names.pvc)

    def synced(self) -> bool:
        """Whether every watch ``/ready`` waits for has listed its objects."""
        return all(i.synced.is_set() for i in self._ready)

    def stale_kinds(self) -> list[str]:
        """Kinds whose watch is not established right now."""
        return [i.kind for i in self._ready if not i.healthy.is_set()]

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

    def objects(self, names: ObjectNames) -> status.BoxObjects | None:
        caches, name = self._caches, names.box
        deployment = caches.deployments.get(names.deployment)
        if deployment is None:
            return None
        claims = caches.resource_claims.for_box(name) if caches.resource_claims else []
        return status.BoxObjects(
            deployment=deployment,
            pods=caches.pods.for_box(name),
            replicasets=caches.replicasets.for_box(name),
            events=caches.events.for_box(name),
            service=caches.services.get(names.service),
            pvc=caches.pvcs.get(names.pvc),
            claims=claims,
            devices=self._allocated_devices(claims),
        )

    def _allocated_devices(self, claims: list[Obj]) -> dict[status.DeviceKey, Obj]:
        wanted = {status.device_key(r) for c in claims for r in status.allocation_results(c)}
        if not wanted or self._caches.slices is None:
            return {}
        found: dict[status.DeviceKey, Obj] = {}
        for resource_slice in self._caches.slices.all():
            spec = resource_slice.get("spec") or {}
            driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
            for device in spec.get("devices") or []:
                key = (str(driver), str(pool), str(device.get("name")))
                if key in wanted:
                    found[key] = device
        return found

    def _devices_changed(self) -> None:
        """A slice that arrives after a claim's allocation names its device then."""
        if self._caches.resource_claims is None:
            return
        for name in sorted(self._caches.resource_claims.boxes()):
            self._changed_box(name)

    def _changed_box(self, name: str) -> None:
        with self._status_lock:
            # Read under the lock: watch threads of two kinds may announce the same box at
            # once, and the one that stores last must also have read last, or its older
            # view (a Deployment without its new pod) would stand until the next event.
            objects = self.objects(naming.object_names(name))
            changed: set[str] = set()
            if objects is None:
                if self._answers.remove(name):
                    changed.add(name)
                lines = self.device_line.put(name, None, None)
            else:
                box = status.derive(objects, self.settings, self.clock())
                queued, holding = entry(name, objects, box, self.settings.counts_devices)
                lines = self.device_line.put(name, queued, holding)
                if self._answers.put(box):
                    changed.add(name)
            summarized = self._summarize(lines)
        METRICS.boxes_changed()
        self._announce({name} | summarized, changed | summarized)

    def _summarize(self, lines: set[str]) -> set[str]:
        """Give each waiting box of these lines its place and its profile's free count;
        returns the boxes whose summary changed. Called with the status lock held."""
        summaries = self.device_line.summaries(lines, self.availability, self._pinned_gpu)
        return self._answers.summarize(summaries)

    def _pinned_gpu(self, name: str) -> GpuProfileConfig | None:
        """The GPU profile pinned on the box's Deployment; None when unreadable."""
        deployment = self.deployment(naming.object_names(name))
        try:
            return spec_from_deployment(deployment).gpu if deployment else None
        except SnapshotError:
            return None

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

    def line(self) -> tuple[list[order.Waiter], list[order.Holder]]:
        """The boxes waiting for a device and the boxes holding one, as the caches show."""
        with self._status_lock:
            return self.device_line.waiters_and_holders()

    def walked(self, walk: order.Walk) -> None:
        """Take the line's last walk into the summaries of the boxes it tells otherwise."""
        with self._status_lock:
            touched = self._summarize(self.device_line.walked(walk))
        self._announce(touched, touched)

    def _availability_changed(self) -> None:
        with self._status_lock:
            touched = self._summarize(self.device_line.lines())
        self._announce(touched, touched)

    def _wake(self, name: str) -> None:
        event = self._changed.pop(name, None)
        if event is not None:
            event.set()

    def get(self, name: str, owner: str | None = None) -> Devbox:
        """The box, when it is ``owner``'s (any box's when None): another person's box is
        as absent as one that does not exist."""
        box = self._answers.box(name)
        if box is None or (owner is not None and box.owner != owner):
            raise NotFound(f"devbox '{name}' not found")
        return box

    def get_body(self, name: str, owner: str | None = None) -> Body:
        """The get response body, kept current by the watches."""
        answer, box = self._answers.body(name), self._answers.box(name)
        # Both are read without the lock: a box removed between the two reads is absent.
        if answer is None or box is None or (owner is not None and box.owner != owner):
            raise NotFound(f"devbox '{name}' not found")
        return answer

    def list_body(self, owner: str | None = None) -> Body:
        """The list response body, assembled from the per-box bodies once per change; only
        ``owner``'s boxes when given."""
        with self._status_lock:
            return self._answers.filtered((owner, None, None))

    def names(self, owner: str | None = None) -> list[str]:
        """The names of ``owner``'s boxes (every box's when None), in name order."""
        with self._status_lock:
            return self._answers.names((owner, None, None))

    def filtered_body(self, state: str | None, profile: str | None, owner: str | None) -> Body:
        """The list response body of the boxes of this owner, in this state and of this
        profile (``None``: any)."""
        with self._status_lock:
            return self._answers.filtered((owner, state, profile))

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
            return self._answers.page(key, after, limit)

    def profiles(self) -> set[str]:
        """The profiles some box has now."""
        with self._status_lock:
            return self._answers.profiles()

    def running_boxes_of(self, profile: str) -> list[Obj]:
        """The Deployments of the boxes of ``profile`` that are not stopped, by the index,
        not a scan."""
        with self._status_lock:
            names = [
                name
                for state in DevboxState
                if state is not DevboxState.STOPPED
                for name in self._answers.names((None, state.value, profile))
            ]
        found = (self.deployment(naming.object_names(name)) for name in sorted(names))
        return [d for d in found if d is not None]

    def counts(self) -> dict[str, int]:
        return self._answers.counts()

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
