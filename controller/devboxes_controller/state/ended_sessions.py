"""Ended dashboard sessions, shared by every replica through one ConfigMap.

A session cookie is accepted by every replica holding the operator token (see
``web.sessions``), so ending one at logout has to reach every replica and outlive their
restarts. The ConfigMap ``devboxes-ended-sessions`` in the box namespace holds one entry
per ended session: the key is a SHA-256 digest of the session id (never the id), the
value the Unix time of the session's absolute end, after which its cookie is refused
anyway and the entry may go. Every replica reads the ConfigMap through a watch.

Each write is a merge patch that adds entries and drops the expired ones, so replicas
logging out at the same moment never conflict. A session is refused on its own replica
as soon as it ends, before any write; an entry whose write failed (the apiserver is
down) is kept and written again until it lands or its session would have expired anyway.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from kubernetes import client

from ..k8s import kube
from ..k8s.kube import ApiProblem, Conflict, NotFound, Obj
from .cache import Informer

log = logging.getLogger(__name__)

CONFIGMAP = "devboxes-ended-sessions"
KIND = "configmaps"
LABELS = {
    "app.kubernetes.io/managed-by": "devboxes-controller",
    "app.kubernetes.io/component": "ended-sessions",
}
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0

Clock = Callable[[], float]
# A merge patch of the ConfigMap's data: None removes an entry.
Patch = dict[str, str | None]


def digest(session_id: str) -> str:
    return hashlib.sha256(f"devboxes ended session {session_id}".encode()).hexdigest()


def expired_entries(data: Mapping[str, str], now: float) -> list[str]:
    """Entries whose session has ended on its own by now; unreadable ones go too."""
    return [key for key, until in data.items() if not until.isdigit() or int(until) <= now]


def ending_patch(pending: Mapping[str, int], recorded: Mapping[str, str], now: float) -> Patch:
    """The patch that records ``pending`` and prunes what ``recorded`` holds needlessly."""
    patch: Patch = dict.fromkeys(expired_entries(recorded, now))
    patch.update({key: str(until) for key, until in pending.items() if until > now})
    return patch


class Record(Protocol):
    """Where ended sessions are kept for every replica."""

    def synced(self) -> bool:
        """Whether ``data`` has been loaded once: until then nothing is known to be live."""
        ...

    def data(self) -> Mapping[str, str]:
        """The entries every replica sees now."""
        ...

    def write(self, patch: Patch) -> None:
        """Apply ``patch``; raises :class:`ApiProblem` when it was not applied."""
        ...


class EndedSessions:
    """Which sessions have ended: this replica's own, at once, and every replica's, from
    the shared record. Thread-safe: request handlers and the retry thread share it."""

    def __init__(self, record: Record, clock: Clock = time.time) -> None:
        self._record = record
        self._clock = clock
        # Ended here: refused at once and until their end, whatever the record says.
        self._local: dict[str, int] = {}
        # Ended here but not yet written to the record.
        self._pending: dict[str, int] = {}
        self._lock = threading.Lock()
        # One write at a time: a retry and a logout would otherwise send the same entries.
        self._writing = threading.Lock()

    def synced(self) -> bool:
        return self._record.synced()

    def is_ended(self, session_id: str) -> bool:
        key = digest(session_id)
        with self._lock:
            if key in self._local:
                return True
        return key in self._record.data()

    def end(self, session_id: str, until: int) -> None:
        """Refuse the session here from now on, and queue it for the record."""
        key = digest(session_id)
        now = self._clock()
        with self._lock:
            self._local = {k: v for k, v in self._local.items() if v > now}
            self._local[key] = until
            self._pending[key] = until

    def unwritten(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self) -> None:
        """Write every queued entry to the record; raises :class:`ApiProblem` on failure,
        leaving them queued."""
        with self._writing:
            now = self._clock()
            with self._lock:
                self._pending = {k: v for k, v in self._pending.items() if v > now}
                pending = dict(self._pending)
            if not pending:
                return
            self._record.write(ending_patch(pending, self._record.data(), now))
            with self._lock:
                for key in pending:
                    self._pending.pop(key, None)


class ConfigMapRecord:
    """The record as the ConfigMap ``CONFIGMAP``, watched and merge-patched."""

    def __init__(self, namespace: str, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)
        self._namespace = namespace
        self.informer = Informer(
            KIND,
            self._core.list_namespaced_config_map,
            namespace,
            field_selector=f"metadata.name={CONFIGMAP}",
        )

    def synced(self) -> bool:
        return self.informer.synced.is_set()

    def data(self) -> Mapping[str, str]:
        configmap = self.informer.get(CONFIGMAP)
        return (configmap or {}).get("data") or {}

    def write(self, patch: Patch) -> None:
        try:
            self._patch(patch)
        except NotFound:
            try:
                kube.call(
                    self._core.create_namespaced_config_map, self._namespace, self._new(patch)
                )
            except Conflict:
                # Another replica created it meanwhile.
                self._patch(patch)

    def _patch(self, patch: Patch) -> None:
        kube.call(
            self._core.patch_namespaced_config_map,
            CONFIGMAP,
            self._namespace,
            {"data": patch},
            _content_type="application/merge-patch+json",
        )

    def _new(self, patch: Patch) -> Obj:
        return {
            "metadata": {"name": CONFIGMAP, "labels": LABELS},
            "data": {key: until for key, until in patch.items() if until is not None},
        }


class SharedEndedSessions(EndedSessions):
    """Ended sessions kept in the box namespace's ConfigMap, with a thread that writes
    again what a logout could not."""

    def __init__(self, namespace: str, api: client.ApiClient, clock: Clock = time.time) -> None:
        self._configmap = ConfigMapRecord(namespace, api)
        super().__init__(self._configmap, clock)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._retry, name="ended-sessions", daemon=True)

    @property
    def informer(self) -> Informer:
        return self._configmap.informer

    def start(self) -> None:
        self.informer.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.informer.stop()

    def retry_soon(self) -> None:
        """A logout's write failed: the retry thread takes it from here."""
        self._wake.set()

    def _retry(self) -> None:
        delay = FIRST_RETRY_SECONDS
        while not self._stop.is_set():
            if not self.unwritten():
                self._wake.wait()
                self._wake.clear()
                delay = FIRST_RETRY_SECONDS
                continue
            self._stop.wait(delay)
            if self._stop.is_set():
                return
            try:
                self.flush()
            except Exception as err:  # noqa: BLE001 - any failure: the entries stay queued
                if delay == FIRST_RETRY_SECONDS:
                    log.warning(
                        "ended sessions not yet recorded for the other replicas; retrying",
                        extra={"sessions": self.unwritten(), "error": _describe(err)},
                    )
                delay = min(delay * 2, MAX_RETRY_SECONDS)
                continue
            log.info("ended sessions recorded for every replica")


def _describe(err: Exception) -> str:
    return err.detail if isinstance(err, ApiProblem) else type(err).__name__
