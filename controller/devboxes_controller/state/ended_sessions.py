"""Ended dashboard sessions, shared by every replica through one ConfigMap.

A session cookie is accepted by every replica holding the operator token (see
``web.identity.sessions``), so ending one at sign-out has to reach every replica and outlive their
restarts. A sign-out ends the session and every earlier session of the same identity (the
operator, or one person): the ConfigMap ``devboxes-ended-sessions`` in the box namespace
holds one entry per identity, keyed by a SHA-256 digest of it (never a name), whose value
is ``MARK:UNTIL``: sessions of that identity started at or before ``MARK`` (Unix time in
milliseconds) are over, and after ``UNTIL`` (Unix time in seconds) every such session has
reached its absolute end, so the entry may go. The record therefore grows with the number
of identities that signed out within one session lifetime, never with the number of
sign-outs.

A session is refused on its own replica as soon as it ends, before any write. One thread
per replica writes what its sign-outs ended, all of them in one write at most once every
``WRITE_INTERVAL_SECONDS``, however many people sign out, so that sign-outs cannot load
etcd; a sign-out waits for the write that carries it. A write that fails is tried again
with backoff until it lands or its sessions would have ended anyway. Writes read the
ConfigMap's version and are refused if another replica wrote in between, so a mark only
ever moves later.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from ..k8s import kube
from ..k8s.kinds import CONFIGMAPS
from ..k8s.kube import ApiClient, ApiProblem, Conflict, NotFound, Obj, Unavailable, apis
from .cache import Informer
from .watches import ENDED_SESSIONS, ENDED_SESSIONS_CONFIGMAP

log = logging.getLogger(__name__)

CONFIGMAP = ENDED_SESSIONS_CONFIGMAP
KIND = ENDED_SESSIONS.name
LABELS = {
    "app.kubernetes.io/managed-by": "devboxes-controller",
    "app.kubernetes.io/component": "ended-sessions",
}
WRITE_INTERVAL_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
# Writes refused because another replica wrote first, before this one gives up for now.
ATTEMPTS = 5

Clock = Callable[[], float]
# A merge patch of the ConfigMap's data: None removes an entry.
Patch = dict[str, str | None]
# What to write, given the entries recorded now; an empty patch writes nothing.
Change = Callable[[Mapping[str, str]], Patch]


def digest(identity: str) -> str:
    return hashlib.sha256(f"devboxes ended sessions of {identity}".encode()).hexdigest()


@dataclass(frozen=True)
class Mark:
    """Sessions started at or before ``through`` (ms) are over; all of them would have
    ended anyway by ``until`` (s)."""

    through: int
    until: int

    def text(self) -> str:
        return f"{self.through}:{self.until}"

    def later(self, other: Mark | None) -> Mark:
        if other is None:
            return self
        return Mark(max(self.through, other.through), max(self.until, other.until))

    @staticmethod
    def parse(text: str) -> Mark | None:
        through, _, until = text.partition(":")
        if not (through.isdigit() and until.isdigit()):
            return None
        return Mark(int(through), int(until))


def expired_entries(data: Mapping[str, str], now: float) -> list[str]:
    """Entries whose sessions have all ended on their own by now; unreadable ones go too."""
    expired = []
    for key, text in data.items():
        mark = Mark.parse(text)
        if mark is None or mark.until <= now:
            expired.append(key)
    return expired


def ending_patch(pending: Mapping[str, Mark], recorded: Mapping[str, str], now: float) -> Patch:
    """The patch that records ``pending`` where it moves a mark later, and prunes what
    ``recorded`` holds needlessly."""
    patch: Patch = dict.fromkeys(expired_entries(recorded, now))
    for key, mark in pending.items():
        text = recorded.get(key)
        current = Mark.parse(text) if text is not None else None
        merged = mark.later(current)
        if merged.until > now and merged != current:
            patch[key] = merged.text()
    return patch


class Record(Protocol):
    """Where ended sessions are kept for every replica."""

    def synced(self) -> bool:
        """Whether ``data`` has been loaded once: until then nothing is known to be live."""
        ...

    def data(self) -> Mapping[str, str]:
        """The entries every replica sees now."""
        ...

    def update(self, change: Change) -> None:
        """Apply ``change`` to the entries as they are when it is written; raises
        :class:`ApiProblem` when nothing was written."""
        ...


class EndedSessions:
    """Which sessions have ended: this replica's own, at once, and every replica's, from
    the shared record. Thread-safe: request handlers and the writer thread share it."""

    def __init__(self, record: Record, clock: Clock = time.time) -> None:
        self._record = record
        self._clock = clock
        # Ended here: refused at once and until their end, whatever the record says.
        self._local: dict[str, Mark] = {}
        # Ended here but not yet written to the record, and who waits for that.
        self._pending: dict[str, Mark] = {}
        self._waiting: list[Future[None]] = []
        self._lock = threading.Lock()
        # One write at a time: two would send the same entries.
        self._writing = threading.Lock()

    def synced(self) -> bool:
        return self._record.synced()

    def is_ended(self, identity: str, started_ms: int) -> bool:
        key = digest(identity)
        with self._lock:
            local = self._local.get(key)
        if local is not None and started_ms <= local.through:
            return True
        text = self._record.data().get(key)
        recorded = Mark.parse(text) if text is not None else None
        return recorded is not None and started_ms <= recorded.through

    def end(self, identity: str, started_ms: int, until: int) -> Future[None]:
        """Refuse the identity's sessions started until ``started_ms`` here from now on,
        and queue that for the record; the future is done once a write carried it."""
        key = digest(identity)
        mark = Mark(started_ms, until)
        now = self._clock()
        done: Future[None] = Future()
        with self._lock:
            self._local = {k: m for k, m in self._local.items() if m.until > now}
            self._local[key] = mark.later(self._local.get(key))
            self._pending[key] = mark.later(self._pending.get(key))
            self._waiting.append(done)
        return done

    def unwritten(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self) -> None:
        """Write every queued mark to the record; raises :class:`ApiProblem` on failure,
        leaving them queued. Either way, the sign-outs that waited for it are told."""
        with self._writing:
            now = self._clock()
            with self._lock:
                self._pending = {k: m for k, m in self._pending.items() if m.until > now}
                pending = dict(self._pending)
                waiting, self._waiting = self._waiting, []
            try:
                if pending:
                    self._record.update(lambda recorded: ending_patch(pending, recorded, now))
            except ApiProblem as err:
                for done in waiting:
                    done.set_exception(err)
                raise
            with self._lock:
                for key, mark in pending.items():
                    if self._pending.get(key) == mark:
                        del self._pending[key]
            for done in waiting:
                done.set_result(None)


class ConfigMapRecord:
    """The record as the ConfigMap ``CONFIGMAP``, watched (``watches.ENDED_SESSIONS``),
    and merge-patched over the version read."""

    def __init__(self, namespace: str, api: ApiClient) -> None:
        groups = apis(api)
        self._namespace = namespace
        self._create = CONFIGMAPS.call(groups, "create")
        self._read_one = CONFIGMAPS.call(groups, "read")
        self._patch_one = CONFIGMAPS.call(groups, "patch")
        self.informer = ENDED_SESSIONS.informer(groups, namespace)

    def synced(self) -> bool:
        return self.informer.synced.is_set()

    def data(self) -> Mapping[str, str]:
        configmap = self.informer.get(CONFIGMAP)
        return (configmap or {}).get("data") or {}

    def update(self, change: Change) -> None:
        current = self.informer.get(CONFIGMAP)
        for _ in range(ATTEMPTS):
            patch = change((current or {}).get("data") or {})
            if not patch:
                return
            try:
                if current is None:
                    kube.call(self._create, self._namespace, self._new(patch))
                else:
                    self._patch(patch, current["metadata"]["resourceVersion"])
                return
            except (Conflict, NotFound):
                # Another replica wrote (or deleted it) since it was read.
                current = self._read()
        raise Unavailable("the record of ended sessions kept changing under this write")

    def _read(self) -> Obj | None:
        try:
            return kube.call(self._read_one, CONFIGMAP, self._namespace)
        except NotFound:
            return None

    def _patch(self, patch: Patch, version: str) -> None:
        kube.call(
            self._patch_one,
            CONFIGMAP,
            self._namespace,
            {"metadata": {"resourceVersion": version}, "data": patch},
            _content_type="application/merge-patch+json",
        )

    def _new(self, patch: Patch) -> Obj:
        return {
            "metadata": {"name": CONFIGMAP, "labels": LABELS},
            "data": {key: mark for key, mark in patch.items() if mark is not None},
        }


class SharedEndedSessions(EndedSessions):
    """Ended sessions kept in the box namespace's ConfigMap, with the thread that writes
    them."""

    def __init__(self, namespace: str, api: ApiClient, clock: Clock = time.time) -> None:
        self._configmap = ConfigMapRecord(namespace, api)
        super().__init__(self._configmap, clock)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, name="ended-sessions", daemon=True)

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

    def end(self, identity: str, started_ms: int, until: int) -> Future[None]:
        done = super().end(identity, started_ms, until)
        self._wake.set()
        return done

    def _write(self) -> None:
        delay = WRITE_INTERVAL_SECONDS
        while not self._stop.is_set():
            if not self.unwritten():
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                self.flush()
            except Exception as err:  # noqa: BLE001 - any failure: the marks stay queued
                if delay == WRITE_INTERVAL_SECONDS:
                    log.warning(
                        "ended sessions not yet recorded for the other replicas; retrying",
                        extra={"identities": self.unwritten(), "error": _describe(err)},
                    )
                self._stop.wait(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)
                continue
            if delay > WRITE_INTERVAL_SECONDS:
                log.info("ended sessions recorded for every replica")
            delay = WRITE_INTERVAL_SECONDS
            # Sign-outs arriving meanwhile wait for the next write, which carries them all.
            self._stop.wait(WRITE_INTERVAL_SECONDS)


def _describe(err: Exception) -> str:
    return err.detail if isinstance(err, ApiProblem) else type(err).__name__
