"""Leader election through a coordination.k8s.io/v1 Lease: one replica reconciles.

Timing follows the usual Kubernetes scheme, judged on local monotonic clocks so that
clock skew between replicas cannot produce two leaders:
- the holder renews every ``retry`` seconds and considers itself leader only until
  ``renew_deadline`` after the start of its last successful renewal;
- a follower takes the Lease once its record has not changed, as this follower saw
  it, for the full lease duration, which is longer than the renew deadline.
Every write is a compare-and-swap on the Lease's resourceVersion. A replica whose
caches are not synced and fresh does not take the Lease, and steps down if it holds it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from . import kube
from .kube import ApiProblem, Conflict, NotFound, Obj
from .timestamps import format_timestamp

log = logging.getLogger(__name__)

LEASE_NAME = "devboxes-controller"
DEFAULT_LEASE_SECONDS = 3


class LeaderElector:
    """Holds or waits for the Lease; :meth:`is_leading` says whether to act now."""

    def __init__(
        self,
        api: kube.ApiClient,
        namespace: str,
        identity: str,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        can_lead: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leases = kube.apis(api).coordination
        self._namespace = namespace
        self.identity = identity
        self._duration = lease_seconds
        self._retry = lease_seconds / 4
        self._renew_deadline = lease_seconds * 2 / 3
        self._can_lead = can_lead
        self._clock = clock
        self._renewed_at: float | None = None
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0
        self._notified = False
        self._listeners: list[Callable[[bool], None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def add_listener(self, listener: Callable[[bool], None]) -> None:
        """Called with True when this replica takes the Lease and False when it loses it."""
        self._listeners.append(listener)

    def is_leading(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self._clock() - renewed < self._renew_deadline

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and hand the Lease back at once so another replica takes over quickly."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self._renewed_at is not None:
            self._release()
        self._notify()

    # -- the election loop -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._can_lead():
                    self._acquire_or_renew()
                elif self._renewed_at is not None:
                    log.warning(
                        "stepping down: the caches are not synced and fresh",
                        extra={"identity": self.identity},
                    )
                    self._release()
            except ApiProblem as err:
                log.warning("lease check failed", extra={"error": err.detail})
            self._notify()
            self._stop.wait(self._retry)

    def _notify(self) -> None:
        leading = self.is_leading()
        if leading == self._notified:
            return
        self._notified = leading
        log.info("leadership changed", extra={"leading": leading, "identity": self.identity})
        for listener in self._listeners:
            listener(leading)

    def _acquire_or_renew(self) -> None:
        attempt = self._clock()
        now = format_timestamp(datetime.now(UTC), microseconds=True)
        spec: Obj = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration,
            "renewTime": now,
        }
        try:
            lease = kube.call(self._leases.read_namespaced_lease, LEASE_NAME, self._namespace)
        except NotFound:
            body = {
                "metadata": {"name": LEASE_NAME, "namespace": self._namespace},
                "spec": {**spec, "acquireTime": now, "leaseTransitions": 0},
            }
            try:
                kube.call(self._leases.create_namespaced_lease, self._namespace, body)
            except Conflict:
                return
            self._renewed_at = attempt
            return
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity")
        record = (holder, current.get("renewTime"), current.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, attempt
        if holder != self.identity:
            self._renewed_at = None
            duration = int(current.get("leaseDurationSeconds") or self._duration)
            if holder and attempt - self._observed_at < duration:
                return
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**current, **spec}
        try:
            kube.call(self._leases.replace_namespaced_lease, LEASE_NAME, self._namespace, lease)
        except Conflict:
            self._renewed_at = None
            return
        self._renewed_at = attempt

    def _release(self) -> None:
        self._renewed_at = None
        self._notify()
        try:
            lease = kube.call(self._leases.read_namespaced_lease, LEASE_NAME, self._namespace)
            if lease["spec"].get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                kube.call(self._leases.replace_namespaced_lease, LEASE_NAME, self._namespace, lease)
        except ApiProblem as err:
            log.warning("lease not released", extra={"error": err.detail})
