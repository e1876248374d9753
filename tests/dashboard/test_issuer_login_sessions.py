"""The pure parts of the dashboard's sign-in through the OIDC issuer: sessions that carry
the person, the cookie that binds a sign-in to its browser, and the PKCE challenge."""

from __future__ import annotations

import pytest
from devboxes_controller.state.ended_sessions import EndedSessions
from devboxes_controller.web.identity.base import Identity
from devboxes_controller.web.identity.cli_login import pkce_challenge
from devboxes_controller.web.identity.sessions import (
    LOGIN_SECONDS,
    CookieTooLarge,
    Person,
    SessionStore,
    session_identity,
)
from support import MemoryRecord

SECRET = "s" * 40
ADMINS = frozenset({"gpu-admins"})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def store(clock: Clock | None = None, secret: str = SECRET) -> SessionStore:
    return SessionStore(secret, EndedSessions(MemoryRecord()), clock=clock or Clock())


def test_a_persons_session_names_them_on_every_replica() -> None:
    clock = Clock()
    session = store(clock).create(Person("alice", ("ml",)))
    seen = store(clock).lookup(session.cookie)
    assert seen is not None
    assert seen.person == Person("alice", ("ml",))
    assert session_identity(seen, ADMINS) == Identity("alice", "browser-session", ("ml",))
    assert session_identity(seen, ADMINS).scope == "alice"
    # Renewed after a while, the cookie still names the person.
    clock.now += 120
    renewed = store(clock).lookup(session.cookie)
    assert renewed is not None
    assert renewed.reissued
    assert renewed.person == Person("alice", ("ml",))


def test_admin_groups_decide_on_each_request_and_the_operator_stays_admin() -> None:
    olivia = store().create(Person("olivia", ("gpu-admins",)))
    assert session_identity(olivia, ADMINS).admin
    # The operator's adminGroups changed since the sign-in: the session follows.
    assert not session_identity(olivia, frozenset()).admin
    operator = store().lookup(store().create().cookie)
    assert operator is not None
    assert operator.person is None
    assert session_identity(operator, frozenset()) == Identity(
        "operator", "browser-session", admin=True
    )


def test_a_session_whose_person_was_changed_is_refused() -> None:
    session = store().create(Person("alice", ("ml",)))
    operator = store().create()
    version, session_id, created, seen, _person, mac = session.cookie.split(".")
    # Alice's signature over the operator's person part, and the other way round.
    as_operator = f"{version}.{session_id}.{created}.{seen}.-.{mac}"
    person = session.cookie.split(".")[4]
    parts = operator.cookie.split(".")
    as_alice = ".".join([*parts[:4], person, parts[5]])
    assert store().lookup(as_operator) is None
    assert store().lookup(as_alice) is None


def test_a_person_in_too_many_groups_for_a_cookie_is_refused() -> None:
    groups = tuple(f"group-{index:04d}" for index in range(400))
    with pytest.raises(CookieTooLarge):
        store().create(Person("alice", groups))


def test_a_login_cookie_is_bound_to_its_key_and_lives_ten_minutes() -> None:
    clock = Clock()
    start, cookie = store(clock).start_login("/dashboard/")
    assert len(start.state) >= 43
    assert len(start.verifier) >= 43
    assert len(start.nonce) >= 43
    assert store(clock).login_of(cookie) == start
    # Another controller's key, a changed field, and a stale cookie are all refused.
    assert store(clock, secret="t" * 40).login_of(cookie) is None
    parts = cookie.split(".")
    forged_state = ".".join([parts[0], "x" * 43, *parts[2:]])
    assert store(clock).login_of(forged_state) is None
    assert store(clock).login_of(cookie[:-1]) is None
    assert store(clock).login_of(None) is None
    assert store(clock).login_of("l1.a.b") is None
    clock.now += LOGIN_SECONDS + 1
    assert store(clock).login_of(cookie) is None
    # Two sign-ins never share a state or a verifier.
    other, _ = store(clock).start_login("/dashboard")
    assert {other.state, other.verifier, other.nonce}.isdisjoint(
        {start.state, start.verifier, start.nonce}
    )


def test_a_session_cookie_is_no_login_cookie_and_the_other_way_round() -> None:
    session = store().create()
    _, login = store().start_login("/dashboard")
    assert store().login_of(session.cookie) is None
    assert store().lookup(login) is None


def test_the_pkce_challenge_is_rfc_7636s_s256() -> None:
    # The example of RFC 7636, appendix B.
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert pkce_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
