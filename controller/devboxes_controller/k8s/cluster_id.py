"""Which cluster the controller serves: the UID of its ``kube-system`` Namespace.

Every cluster has that Namespace from its creation on, the apiserver never deletes it,
and its UID is drawn at random when the cluster is made: no two clusters share it, and
every URL that reaches one cluster (a load balancer, a tunnel, another name) reads the
same. The capabilities carry it, so that a client that knows one cluster by two URLs can
tell.

It is read by a thread of its own, never by a request: the capabilities are answered from
memory. A read that fails (403 without the chart's ClusterRole, 404, an apiserver that
does not answer at that moment) logs one line saying why, and the id stays unknown (None)
while the controller goes on; the thread reads again, less often each time, until a read
succeeds, and then never again.
"""

from __future__ import annotations

import logging
import threading

from . import kube
from .kube import ApiProblem

log = logging.getLogger(__name__)

NAMESPACE = "kube-system"
FIRST_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 300.0


class ClusterId:
    """The cluster's id once read: :attr:`value`, None until then."""

    def __init__(
        self,
        api: kube.ApiClient,
        first_retry: float = FIRST_RETRY_SECONDS,
        max_retry: float = MAX_RETRY_SECONDS,
    ) -> None:
        self._core = kube.apis(api).core
        self._first_retry = first_retry
        self._max_retry = max_retry
        self._value: str | None = None
        self._problem: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cluster-id", daemon=True)

    @property
    def value(self) -> str | None:
        return self._value

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def read(self) -> bool:
        """One read of the Namespace; whether the id is known now."""
        try:
            found = kube.call(self._core.read_namespace, NAMESPACE)
        except ApiProblem as err:
            self._failed(err.detail)
            return False
        uid = (found.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            self._failed(f"Namespace {NAMESPACE} has no uid")
            return False
        self._value = uid
        log.info("cluster id read", extra={"cluster_id": uid, "namespace": NAMESPACE})
        return True

    def _failed(self, problem: str) -> None:
        # One line per reason: a read that keeps failing the same way says it once.
        if problem != self._problem:
            log.warning(
                "cannot read the cluster id (the UID of Namespace kube-system): the "
                "capabilities give none until a later read succeeds",
                extra={"problem": problem},
            )
        self._problem = problem

    def _run(self) -> None:
        wait = self._first_retry
        while not self.read() and not self._stop.wait(wait):
            wait = min(wait * 2, self._max_retry)
