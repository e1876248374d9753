"""Whether the apiserver takes this process's writes.

Reads are served from the caches and ``/readyz`` can pass while every write fails: etcd
over its space quota refuses writes and still serves reads. Every write the controller
makes reports here; a replica whose writes have all failed for ``SUSTAINED_SECONDS`` says
so on ``/ready``, so that probes and operators see it. Only writes tell: a replica that
has stopped trying (not ready, it neither leads nor gets requests) says nothing of writes
``FRESH_SECONDS`` after its last failure, so that it is tried, and told, again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# Longer than a write's own bounds and a few retries, so that one slow moment of the
# apiserver does not flap readiness.
SUSTAINED_SECONDS = 20.0
# How long a failed write speaks for the writes of now.
FRESH_SECONDS = 30.0


class WriteHealth:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._failing_since: float | None = None
        self._failed_at = 0.0

    def succeeded(self) -> None:
        with self._lock:
            if self._failing_since is not None:
                log.info("the Kubernetes API takes this controller's writes again")
            self._failing_since = None

    def failed(self, detail: str) -> None:
        with self._lock:
            self._failed_at = self._clock()
            if self._failing_since is None:
                self._failing_since = self._failed_at
                log.warning("a Kubernetes write failed", extra={"error": detail})

    def problem(self) -> str | None:
        """Why writes are failing, once they have failed for a sustained time; else None."""
        with self._lock:
            since, last = self._failing_since, self._failed_at
        now = self._clock()
        if since is None or now - last > FRESH_SECONDS:
            return None
        seconds = now - since
        if seconds < SUSTAINED_SECONDS:
            return None
        return (
            f"every write to the Kubernetes API has failed for {seconds:.0f} s "
            "(the controller's log has the apiserver's answer)"
        )


WRITES = WriteHealth()
