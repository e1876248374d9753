"""Browser sessions of the dashboard: signed cookies that every replica can check.

The browser holds only a session cookie (HttpOnly): an id, its creation and last-use
times, who signed in (the operator, or a person the OpenID Connect issuer named, with their
groups), and an HMAC over them with a key derived from the operator token. Any replica
holding the same token verifies it without asking any other, so sessions survive a
request landing on another replica or a controller restart. The operator token itself never
leaves the login request. Each session's CSRF value is an HMAC of its id, sent back by
the page as a header on every mutation.

A sign-in through the issuer is bound to the browser that started it by a short-lived
signed cookie holding its state, PKCE verifier, nonce and where to go afterwards
(``LoginStart``).

Sessions end after an idle period (the last-use time slides as the cookie is re-issued
on use), after an absolute lifetime, at sign-out, and for all sessions at once when the
operator token is rotated. A sign-out ends that session and every earlier one of the same
identity, on every replica (``state.ended_sessions``); until a replica has loaded that
record it accepts no session at all. A session's start is kept to the millisecond, so that
a sign-in right after a sign-out is not taken for an earlier session.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from ...box.ownership import OPERATOR
from ...k8s.kube import Unavailable
from ...state.ended_sessions import EndedSessions
from .base import Identity

COOKIE = "devboxes_session"
CSRF_HEADER = "X-Devboxes-CSRF"
IDLE_SECONDS = 8 * 3600
ABSOLUTE_SECONDS = 24 * 3600
# A used session's cookie is re-issued with a new last-use time at most this often.
REISSUE_SECONDS = 60
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_ENDED = "session expired or invalid; log in again"
# The person's part of an operator session's cookie.
_OPERATOR = "-"
_VERSION = "v3"
# Browsers keep cookies of up to 4096 bytes; a person in too many groups for that cannot
# sign in to the dashboard (a token still works).
MAX_COOKIE_BYTES = 3800
LOGIN_COOKIE = "devboxes_login"
# A preview's origin keeps its own cookie; the dashboard hands it a code to make one.
PREVIEW_COOKIE = "devboxes_preview"
PREVIEW_CODE = "pc1"
PREVIEW_PASS = "pp1"  # noqa: S105 - a kind tag, not a secret
# Long enough for a browser to follow the dashboard's hand-off, too short to be of use later.
PREVIEW_CODE_SECONDS = 60
# Long enough to type a password at the issuer, short enough that a stolen cookie is stale.
LOGIN_SECONDS = 600
_LOGIN_VERSION = "l1"

Clock = Callable[[], float]


@dataclass(frozen=True)
class Person:
    """Who signed in through the issuer; whether they are an admin is decided on each
    request from the groups, so a change of ``auth.adminGroups`` applies to live sessions."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    # Unix time in milliseconds.
    created_ms: int
    # Unix time in seconds.
    last_seen: int
    cookie: str
    # None: the operator signed in with the operator token.
    person: Person | None = None
    reissued: bool = False


@dataclass(frozen=True)
class PreviewGrant:
    """A session's leave to see one port of one box, on that preview's own origin."""

    box: str
    port: int
    # The session's start, in Unix milliseconds: a sign-out ends its grants with it.
    created_ms: int
    person: Person | None


@dataclass(frozen=True)
class LoginStart:
    """A sign-in through the issuer under way in one browser."""

    state: str
    verifier: str
    nonce: str
    next: str
    created: int


class CookieTooLarge(ValueError):
    """The person's groups do not fit in a cookie."""


class SessionsLoading(Unavailable):
    """Until the ended sessions are loaded, no cookie can be told live."""

    def __init__(self) -> None:
        super().__init__("the controller is still loading its caches")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def _encode_person(person: Person | None) -> str:
    if person is None:
        return _OPERATOR
    return _b64(json.dumps({"user": person.user, "groups": list(person.groups)}).encode())


def _decode_person(text: str) -> Person | None:
    """The person of a cookie's text, None for the operator; ValueError when it is neither
    (json.loads' errors are ValueErrors too)."""
    if text == _OPERATOR:
        return None
    raw = _unb64(text)
    fields = json.loads(raw) if raw is not None else None
    if not isinstance(fields, dict):
        raise ValueError("not a person")
    user, groups = fields.get("user"), fields.get("groups")
    if not isinstance(user, str) or not user or not isinstance(groups, list):
        raise ValueError("not a person")
    if not all(isinstance(group, str) for group in groups):
        raise ValueError("not a person")
    return Person(user, tuple(groups))


def _identity(person: Person | None) -> str:
    """Whose sessions a sign-out ends: the operator's, or one person's."""
    return _OPERATOR if person is None else f"person {person.user}"


def session_identity(session: Session, admin_groups: frozenset[str]) -> Identity:
    """Whom a session acts for: the operator (an admin), or the person who signed in,
    an admin when in one of ``admin_groups``."""
    return person_identity(session.person, admin_groups)


def person_identity(person: Person | None, admin_groups: frozenset[str]) -> Identity:
    if person is None:
        return Identity(user=OPERATOR, mode="browser-session", admin=True)
    groups = person.groups
    return Identity(
        user=person.user,
        mode="browser-session",
        groups=groups,
        admin=not admin_groups.isdisjoint(groups),
    )


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

    def _issue(
        self,
        session_id: str,
        created_ms: int,
        last_seen: int,
        person: Person | None,
        reissued: bool,
    ) -> Session:
        payload = f"{_VERSION}.{session_id}.{created_ms}.{last_seen}.{_encode_person(person)}"
        return Session(
            id=session_id,
            csrf=self._mac(f"csrf.{session_id}"),
            created_ms=created_ms,
            last_seen=last_seen,
            cookie=f"{payload}.{self._mac(payload)}",
            person=person,
            reissued=reissued,
        )

    def create(self, person: Person | None = None) -> Session:
        """A new session of ``person``, or of the operator; raises :class:`CookieTooLarge`
        when the person's groups make the cookie too large for a browser."""
        now = self._clock()
        session = self._issue(
            secrets.token_urlsafe(32), int(now * 1000), int(now), person, reissued=True
        )
        if len(session.cookie) > MAX_COOKIE_BYTES:
            raise CookieTooLarge(f"{len(person.groups) if person else 0} groups")
        return session

    def lookup(self, cookie: str | None, touch: bool = True) -> Session | None:
        """The live session of this cookie, or None; ``touch`` restarts its idle period.

        Raises :class:`SessionsLoading` while the ended sessions are not yet loaded."""
        if not cookie:
            return None
        if not self.ended.synced():
            raise SessionsLoading()
        payload, _, mac = cookie.rpartition(".")
        parts = payload.split(".")
        if len(parts) != 5 or parts[0] != _VERSION:
            return None
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            return None
        _, session_id, created_text, seen_text, person_text = parts
        if not (created_text.isdigit() and seen_text.isdigit()):
            return None
        try:
            person = _decode_person(person_text)
        except ValueError:
            # Signed by this key yet unreadable: a cookie of another version's format.
            return None
        created_ms, last_seen = int(created_text), int(seen_text)
        now = self._clock()
        if now - last_seen > self.idle_seconds or now - created_ms / 1000 > self.absolute_seconds:
            return None
        if self.ended.is_ended(_identity(person), created_ms):
            return None
        if touch and now - last_seen >= REISSUE_SECONDS:
            return self._issue(session_id, created_ms, int(now), person, reissued=True)
        return self._issue(session_id, created_ms, last_seen, person, reissued=False)

    def end(self, session: Session) -> Future[None]:
        """End the session and every earlier one of its identity on this replica at once;
        the future is done once every replica has been told (``ended``)."""
        until = session.created_ms // 1000 + int(self.absolute_seconds) + 1
        return self.ended.end(_identity(session.person), session.created_ms, until)

    def sign_preview(self, grant: PreviewGrant, kind: str) -> str:
        """The grant, signed: the short-lived code the dashboard hands to the preview's
        origin (``PREVIEW_CODE``), or the cookie that origin keeps (``PREVIEW_PASS``),
        which ends with the session it came from."""
        now = self._clock()
        ends = grant.created_ms // 1000 + int(self.absolute_seconds)
        lifetime = PREVIEW_CODE_SECONDS if kind == PREVIEW_CODE else self.idle_seconds
        expires = min(int(now + lifetime), ends)
        fields = [kind, grant.box, str(grant.port), str(expires), str(grant.created_ms)]
        payload = ".".join([*fields, _encode_person(grant.person)])
        return f"{payload}.{self._mac('preview.' + payload)}"

    def preview_of(self, text: str | None, kind: str, box: str, port: int) -> PreviewGrant | None:
        """The grant ``text`` holds for this box's port, unless it is missing, forged,
        of another kind, box or port, expired, or its session was signed out."""
        if not text:
            return None
        if not self.ended.synced():
            raise SessionsLoading()
        payload, _, mac = text.rpartition(".")
        parts = payload.split(".")
        if len(parts) != 6 or parts[0] != kind:
            return None
        if not hmac.compare_digest(mac.encode(), self._mac("preview." + payload).encode()):
            return None
        _, granted_box, granted_port, expires, created_ms, person_text = parts
        if (granted_box, granted_port) != (box, str(port)):
            return None
        if not (expires.isdigit() and created_ms.isdigit()) or int(expires) < self._clock():
            return None
        try:
            person = _decode_person(person_text)
        except ValueError:
            return None
        if self.ended.is_ended(_identity(person), int(created_ms)):
            return None
        return PreviewGrant(box, port, int(created_ms), person)

    def start_login(self, next_path: str) -> tuple[LoginStart, str]:
        """A new sign-in through the issuer and the signed cookie that binds it to the
        browser."""
        start = LoginStart(
            state=secrets.token_urlsafe(32),
            verifier=secrets.token_urlsafe(48),
            nonce=secrets.token_urlsafe(32),
            next=next_path,
            created=int(self._clock()),
        )
        fields = [
            start.state,
            start.verifier,
            start.nonce,
            _b64(start.next.encode()),
            str(start.created),
        ]
        payload = ".".join([_LOGIN_VERSION, *fields])
        return start, f"{payload}.{self._mac('login.' + payload)}"

    def login_of(self, cookie: str | None) -> LoginStart | None:
        """The sign-in this browser started, unless its cookie is missing, forged or stale."""
        if not cookie:
            return None
        payload, _, mac = cookie.rpartition(".")
        parts = payload.split(".")
        if len(parts) != 6 or parts[0] != _LOGIN_VERSION:
            return None
        if not hmac.compare_digest(mac.encode(), self._mac("login." + payload).encode()):
            return None
        _, state, verifier, nonce, next_text, created_text = parts
        next_path = _unb64(next_text)
        if not created_text.isdigit() or next_path is None:
            return None
        created = int(created_text)
        if not 0 <= self._clock() - created <= LOGIN_SECONDS:
            return None
        try:
            return LoginStart(state, verifier, nonce, next_path.decode(), created)
        except UnicodeDecodeError:
            return None


def csrf_matches(session: Session, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), session.csrf.encode())
