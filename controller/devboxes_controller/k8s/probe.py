"""Is the apiserver answering, and is its storage healthy? Asked every few seconds.

The watches alone cannot tell: a frozen apiserver keeps their connections open and
silent, and with etcd down it still serves them. ``/readyz`` checks the apiserver and
etcd together, and any authenticated client may read it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kubernetes import client

from .kube import CONNECT_SECONDS

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 2.0
READ_SECONDS = 3.0
# How long one good answer vouches for an apiserver that has since stopped answering: a
# little over two intervals, so one slow probe on a busy machine does not flap readiness.
# An apiserver that answers "not ready" is believed at once.
FRESH_SECONDS = 7.0


class ApiserverProbe:
    def __init__(
        self,
        api: client.ApiClient,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._interval = interval
        self._clock = clock
        self._last_ok: float | None = None
        self._problem = "the apiserver has not answered yet"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="apiserver-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def reachable(self) -> bool:
        return self._last_ok is not None and self._clock() - self._last_ok < FRESH_SECONDS

    def problem(self) -> str | None:
        """Why the apiserver is not reachable, or None while it is."""
        return None if self.reachable() else self._problem

    def check(self) -> None:
        """One probe; records the outcome."""
        method, url, headers, body, _ = self._api.param_serialize(
            "GET", "/readyz", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
        )
        try:
            response = self._api.call_api(
                method, url, headers, body, _request_timeout=(CONNECT_SECONDS, READ_SECONDS)
            )
            response.read()
            status = response.status
        except Exception as err:  # noqa: BLE001 - any transport failure means unreachable
            self._failed(_transport_problem(err), believed=False)
            return
        if status == 200:
            if self._last_ok is None or not self.reachable():
                log.info("apiserver reachable")
            self._last_ok = self._clock()
            self._problem = "the apiserver has stopped answering"
        else:
            self._failed(f"the apiserver is not ready (HTTP {status} from /readyz)", believed=True)

    def _failed(self, problem: str, believed: bool) -> None:
        if problem != self._problem:
            log.warning("apiserver check failed", extra={"problem": problem})
        self._problem = problem
        if believed:
            self._last_ok = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self._interval)


def _transport_problem(err: Exception) -> str:
    """The failure in an operator's words, without the client library's internals."""
    text = str(err).lower()
    if "refused" in text:
        return "the apiserver refuses connections"
    if "timed out" in text or "timeout" in text:
        return "the apiserver does not answer"
    return "the apiserver is unreachable"
