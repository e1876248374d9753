"""Browser sessions of the dashboard, kept in the controller's memory.

The browser holds only a random session id (in an HttpOnly cookie); the operator token
never leaves the login request. Each session carries its own CSRF value, which the page
sends back as a header on every mutation. Sessions end on logout, after an idle period
and after an absolute lifetime; a controller restart ends them all.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "devboxes_session"
CSRF_HEADER = "X-Devboxes-CSRF"
IDLE_SECONDS = 8 * 3600
ABSOLUTE_SECONDS = 24 * 3600
MAX_SESSIONS = 1000
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

Clock = Callable[[], float]


@dataclass
class Session:
    csrf: str
    created: float
    last_seen: float


def _key(session_id: str) -> str:
    # Stored under a digest so the map's keys are useless to anyone reading memory, and
    # lookups never compare the secret itself.
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    """Thread-safe: request handlers run both on the event loop and in the thread pool."""

    def __init__(
        self,
        clock: Clock = time.monotonic,
        idle_seconds: float = IDLE_SECONDS,
        absolute_seconds: float = ABSOLUTE_SECONDS,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self._clock = clock
        self.idle_seconds = idle_seconds
        self.absolute_seconds = absolute_seconds
        self._max = max_sessions
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self) -> tuple[str, Session]:
        """A new session: its id (for the cookie) and its record."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        session = Session(csrf=secrets.token_urlsafe(32), created=now, last_seen=now)
        with self._lock:
            self._prune(now)
            if len(self._sessions) >= self._max:
                oldest = min(self._sessions, key=lambda k: self._sessions[k].last_seen)
                del self._sessions[oldest]
            self._sessions[_key(session_id)] = session
        return session_id, session

    def _expired(self, session: Session, now: float) -> bool:
        return (
            now - session.last_seen > self.idle_seconds
            or now - session.created > self.absolute_seconds
        )

    def _prune(self, now: float) -> None:
        for key in [k for k, s in self._sessions.items() if self._expired(s, now)]:
            del self._sessions[key]

    def lookup(self, session_id: str | None, touch: bool = True) -> Session | None:
        """The live session for this id, or None; ``touch`` restarts its idle period."""
        if not session_id:
            return None
        key = _key(session_id)
        now = self._clock()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if self._expired(session, now):
                del self._sessions[key]
                return None
            if touch:
                session.last_seen = now
            return session

    def end(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._sessions.pop(_key(session_id), None)


def csrf_matches(session: Session, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), session.csrf.encode())
