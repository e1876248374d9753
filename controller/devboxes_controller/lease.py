"""Leader election through a coordination.k8s.io/v1 Lease: one replica reconciles."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from kubernetes import client

from . import kube, render
from .kube import ApiProblem, Conflict, NotFound, Obj

log = logging.getLogger(__name__)

LEASE_NAME = "devboxes-controller"


def _micro(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Holds or waits for the Lease; ``leading`` is set while this replica holds it."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        identity: str,
        lease_seconds: int = 15,
    ) -> None:
        self._leases = client.CoordinationV1Api(api)
        self._namespace = namespace
        self.identity = identity
        self._duration = lease_seconds
        self._listeners: list[Callable[[bool], None]] = []
        self.leading = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def add_listener(self, listener: Callable[[bool], None]) -> None:
        """Called with True when this replica takes the Lease and False when it loses it."""
        self._listeners.append(listener)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and hand the Lease back at once so another replica takes over quickly."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self.leading.is_set():
            self._set_leading(False)
            try:
                lease = kube.call(self._leases.read_namespaced_lease, LEASE_NAME, self._namespace)
                if lease["spec"].get("holderIdentity") == self.identity:
                    lease["spec"]["holderIdentity"] = None
                    kube.call(
                        self._leases.replace_namespaced_lease, LEASE_NAME, self._namespace, lease
                    )
            except ApiProblem as err:
                log.warning("lease not released", extra={"error": err.detail})

    def _set_leading(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        if leading:
            self.leading.set()
        else:
            self.leading.clear()
        log.info("leadership changed", extra={"leading": leading, "identity": self.identity})
        for listener in self._listeners:
            listener(leading)

    def _run(self) -> None:
        retry = max(1.0, self._duration / 3)
        while not self._stop.is_set():
            try:
                self._set_leading(self._try_acquire())
            except ApiProblem as err:
                log.warning("lease check failed", extra={"error": err.detail})
                self._set_leading(False)
            self._stop.wait(retry)

    def _try_acquire(self) -> bool:
        now = datetime.now(UTC)
        spec: Obj = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration,
            "renewTime": _micro(now),
        }
        try:
            lease = kube.call(self._leases.read_namespaced_lease, LEASE_NAME, self._namespace)
        except NotFound:
            body = {
                "metadata": {"name": LEASE_NAME, "namespace": self._namespace},
                "spec": {**spec, "acquireTime": _micro(now), "leaseTransitions": 0},
            }
            try:
                kube.call(self._leases.create_namespaced_lease, self._namespace, body)
            except Conflict:
                return False
            return True
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity")
        renew_time = current.get("renewTime")
        renewed = render.parse_timestamp(renew_time) if renew_time else None
        duration = int(current.get("leaseDurationSeconds") or self._duration)
        expired = renewed is None or renewed + timedelta(seconds=duration) < now
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec["acquireTime"] = _micro(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**current, **spec}
        try:
            kube.call(self._leases.replace_namespaced_lease, LEASE_NAME, self._namespace, lease)
        except Conflict:
            return False
        return True
