"""Browser sessions of the dashboard: signed cookies that every replica can check.

The browser holds only a session cookie (HttpOnly): an id, its creation and last-use
times, and an HMAC over them with a key derived from the operator token. Any replica
holding the same token verifies it without asking any other, so sessions survive a
request landing on another replica or a controller restart. The operator token itself never
leaves the login request. Each session's CSRF value is an HMAC of its id, sent back by
the page as a header on every mutation.

Sessions end after an idle period (the last-use time slides as the cookie is re-issued
on use), after an absolute lifetime, at logout, and for all sessions at once when the
operator token is rotated. Logout is recorded for every replica (``state.ended_sessions``);
until a replica has loaded that record it accepts no session at all.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..k8s.kube import Unavailable
from ..state.ended_sessions import EndedSessions

COOKIE = "devboxes_session"
CSRF_HEADER = "X-Devboxes-CSRF"
IDLE_SECONDS = 8 * 3600
ABSOLUTE_SECONDS = 24 * 3600
# A used session's cookie is re-issued with a new last-use time at most this often.
REISSUE_SECONDS = 60
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_VERSION = "v1"

Clock = Callable[[], float]


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    created: int
    last_seen: int
    cookie: str
    reissued: bool = False


class SessionsLoading(Unavailable):
    """Until the ended sessions are loaded, no cookie can be told live."""

    def __init__(self) -> None:
        super().__init__("the controller is still loading its caches")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class SessionStore:
    """Issues and checks session cookies; thread-safe (handlers run on several threads)."""

    def __init__(
        self,
        secret: str,
        ended: EndedSessions,
        clock: Clock = time.time,
        idle_seconds: float = IDLE_SECONDS,
        absolute_seconds: float = ABSOLUTE_SECONDS,
    ) -> None:
        self._key = hmac.new(secret.encode(), b"devboxes dashboard sessions", "sha256").digest()
        self._clock = clock
        self.idle_seconds = idle_seconds
        self.absolute_seconds = absolute_seconds
        self.ended = ended

    def _mac(self, text: str) -> str:
        return _b64(hmac.new(self._key, text.encode(), hashlib.sha256).digest())

    def _issue(self, session_id: str, created: int, last_seen: int, reissued: bool) -> Session:
        payload = f"{_VERSION}.{session_id}.{created}.{last_seen}"
        return Session(
            id=session_id,
            csrf=self._mac(f"csrf.{session_id}"),
            created=created,
            last_seen=last_seen,
            cookie=f"{payload}.{self._mac(payload)}",
            reissued=reissued,
        )

    def create(self) -> Session:
        now = int(self._clock())
        return self._issue(secrets.token_urlsafe(32), now, now, reissued=True)

    def lookup(self, cookie: str | None, touch: bool = True) -> Session | None:
        """The live session of this cookie, or None; ``touch`` restarts its idle period.

        Raises :class:`SessionsLoading` while the ended sessions are not yet loaded."""
        if not cookie:
            return None
        if not self.ended.synced():
            raise SessionsLoading()
        payload, _, mac = cookie.rpartition(".")
        parts = payload.split(".")
        if len(parts) != 4 or parts[0] != _VERSION:
            return None
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            return None
        _, session_id, created_text, seen_text = parts
        if not (created_text.isdigit() and seen_text.isdigit()):
            return None
        created, last_seen = int(created_text), int(seen_text)
        now = self._clock()
        if now - last_seen > self.idle_seconds or now - created > self.absolute_seconds:
            return None
        if self.ended.is_ended(session_id):
            return None
        if touch and now - last_seen >= REISSUE_SECONDS:
            return self._issue(session_id, created, int(now), reissued=True)
        return self._issue(session_id, created, last_seen, reissued=False)

    def end(self, session: Session) -> None:
        """Refuse the session on this replica at once; recording it for the others is
        ``ended.flush``'s job."""
        self.ended.end(session.id, session.created + int(self.absolute_seconds))


def csrf_matches(session: Session, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), session.csrf.encode())
