"""The stop-warning webhook: each warning posted as JSON to the operator's URL, from the
leader, off the reconciler's thread.

A delivery is retried with backoff (one second, then twice as long each time) up to
``stopWarnings.webhook.attempts`` times, and given up once the stop it warns of has
passed: a slow or failing receiver never delays a stop. A receiver's 2xx is marked on
the box, so that a new leader sends a warning only when its predecessor had not seen it
acknowledged; a receiver that keeps the body's ``id`` (also the ``Idempotency-Key``
header) drops the one repeat a leader change at the wrong moment can cause.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from devboxes_sdk._version import __version__

from ..config.stop_warnings import WebhookSettings
from ..state.metrics import METRICS

log = logging.getLogger(__name__)

FIRST_RETRY_SECONDS = 1.0
# Deliveries in flight at once: enough that one slow receiver does not hold the others.
WORKERS = 4


@dataclass
class Delivery:
    """One warning to post; ``stops_at`` bounds its retries."""

    box: str
    key: str
    body: dict[str, Any]
    stops_at: datetime
    attempt: int = 0


class Webhook:
    """Delivers warnings to one URL. ``acknowledged(box, key)`` is called after a 2xx;
    ``may_send()`` is asked before every attempt (the leader sends, no one else)."""

    def __init__(
        self,
        settings: WebhookSettings,
        acknowledged: Callable[[str, str], None],
        may_send: Callable[[], bool],
        clock: Callable[[], datetime],
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._settings = settings
        self._acknowledged = acknowledged
        self._may_send = may_send
        self._clock = clock
        self._client = httpx.Client(
            timeout=settings.timeout_seconds,
            transport=transport,
            headers={"User-Agent": f"devboxes-controller/{__version__}"},
            follow_redirects=False,
        )
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="webhook")
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # (when, order, delivery): deliveries waiting for their next attempt.
        self._due: list[tuple[float, int, Delivery]] = []
        self._order = itertools.count()
        # The boxes' keys queued or in flight, so that each pass of the reconciler may ask
        # again without sending twice; and those given up, with their stops, so that a
        # receiver that keeps failing is not tried again by this replica.
        self._held: set[tuple[str, str]] = set()
        self._given_up: dict[tuple[str, str], datetime] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="webhook", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._wake.notify()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def send(self, delivery: Delivery) -> None:
        """Queue ``delivery`` unless the same warning is queued, in flight or given up."""
        now = self._clock()
        with self._lock:
            for passed in [k for k, stop in self._given_up.items() if stop <= now]:
                del self._given_up[passed]
            warning = (delivery.box, delivery.key)
            if warning in self._held or warning in self._given_up:
                return
            self._held.add(warning)
            self._schedule(delivery, 0.0)

    def _schedule(self, delivery: Delivery, delay: float) -> None:
        heapq.heappush(self._due, (time.monotonic() + delay, next(self._order), delivery))
        self._wake.notify()

    def _run(self) -> None:
        with self._lock:
            while not self._stopped:
                if not self._due:
                    self._wake.wait()
                    continue
                when, _, delivery = self._due[0]
                wait = when - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._due)
                self._pool.submit(self._attempt, delivery)

    def _attempt(self, delivery: Delivery) -> None:
        if not self._may_send() or self._clock() >= delivery.stops_at:
            self._release(delivery)
            return
        delivery.attempt += 1
        problem = self._post(delivery)
        if problem is None:
            METRICS.webhooks.labels(outcome="delivered").inc()
            try:
                # Marked before it is let go, so that no pass in between sends it again.
                self._acknowledged(delivery.box, delivery.key)
            except Exception as err:  # noqa: BLE001 - a lost mark costs one repeat, no more
                log.warning(
                    "stop-warning webhook delivered but not marked",
                    extra={"box": delivery.box, "error": str(err)},
                )
            self._release(delivery)
            return
        if delivery.attempt >= self._settings.attempts:
            METRICS.webhooks.labels(outcome="given_up").inc()
            log.warning(
                "stop-warning webhook given up",
                extra={"box": delivery.box, "attempts": delivery.attempt, "error": problem},
            )
            with self._lock:
                self._given_up[(delivery.box, delivery.key)] = delivery.stops_at
            self._release(delivery)
            return
        METRICS.webhooks.labels(outcome="retried").inc()
        with self._lock:
            if not self._stopped:
                self._schedule(delivery, FIRST_RETRY_SECONDS * 2 ** (delivery.attempt - 1))

    def _post(self, delivery: Delivery) -> str | None:
        """None when the receiver took the warning; else what went wrong, without the URL."""
        try:
            response = self._client.post(
                self._settings.url,
                json=delivery.body,
                headers={"Idempotency-Key": delivery.body["id"]},
            )
        except httpx.HTTPError as err:
            return type(err).__name__
        if response.is_success:
            return None
        return f"HTTP {response.status_code}"

    def _release(self, delivery: Delivery) -> None:
        with self._lock:
            self._held.discard((delivery.box, delivery.key))
