"""The dashboard's sessions, CSRF rule, headers and event stream, over real HTTP.

The controller runs as a subprocess against the testbed (the session-wide ``controller``
fixture); a ``requests.Session`` plays the browser.
"""

from __future__ import annotations

import json
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from devboxes_controller.state.ended_sessions import CONFIGMAP, EndedSessions, digest
from devboxes_controller.web.dashboard import safe_next
from devboxes_controller.web.identity.sessions import (
    COOKIE,
    Person,
    SessionsLoading,
    SessionStore,
    csrf_matches,
)
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from support import MemoryRecord, StartController, wait_for

CSRF_META = re.compile(r'<meta name="devboxes-csrf" content="([^"]+)">')


def post_login(
    controller: Controller,
    form: dict[str, str],
    headers: dict[str, str] | None = None,
    browser: requests.Session | None = None,
) -> requests.Response:
    """The sign-in form sent with ``form``; the answer's redirect is not followed."""
    return (browser or requests).post(
        f"{controller.url}/dashboard/login",
        data=form,
        headers=headers,
        allow_redirects=False,
        timeout=10,
    )


def cookie_flags(set_cookie: str) -> set[str]:
    """The attributes of a Set-Cookie header after its name and value, lower case."""
    return {part.strip().lower() for part in set_cookie.split(";")[1:]}


def login(controller: Controller, **headers: str) -> tuple[requests.Session, str]:
    """A browser-like session signed in with the operator token, and its CSRF value."""
    browser = requests.Session()
    response = post_login(
        controller, {"token": controller.token, "next": "/dashboard"}, headers, browser
    )
    assert response.status_code == 303, response.text
    page = browser.get(f"{controller.url}/dashboard", timeout=10)
    assert page.status_code == 200
    match = CSRF_META.search(page.text)
    assert match is not None
    return browser, match.group(1)


def box_name() -> str:
    return f"dash-{uuid.uuid4().hex[:8]}"


def create_as_page(
    browser: requests.Session, controller: Controller, csrf: str, name: str
) -> requests.Response:
    """A create sent as the dashboard page sends it: the session cookie and its CSRF value."""
    return browser.post(
        f"{controller.url}/api/v1/devboxes",
        json={"name": name},
        headers={"X-Devboxes-CSRF": csrf},
        timeout=30,
    )


@pytest.fixture
def signed_in(controller: Controller) -> Iterator[tuple[requests.Session, str]]:
    browser, csrf = login(controller)
    yield browser, csrf
    browser.close()


def test_page_without_session_redirects_to_login(controller: Controller) -> None:
    response = requests.get(f"{controller.url}/dashboard", allow_redirects=False, timeout=10)
    assert response.status_code == 303
    assert response.headers["location"] == "/dashboard/login?next=/dashboard"


def test_root_redirects_to_the_dashboard(controller: Controller) -> None:
    response = requests.get(f"{controller.url}/", allow_redirects=False, timeout=10)
    assert response.status_code == 303
    assert response.headers["location"] == "/dashboard"
    # Followed without a session, it ends on the sign-in form rather than a JSON 404.
    page = requests.get(f"{controller.url}/", timeout=10)
    assert page.status_code == 200
    assert page.url == f"{controller.url}/dashboard/login?next=/dashboard"
    assert page.headers["content-type"].startswith("text/html")


def test_login_sets_a_strict_http_only_cookie(controller: Controller) -> None:
    response = post_login(controller, {"token": controller.token, "next": "/dashboard"})
    assert response.status_code == 303
    assert response.headers["location"] == "/dashboard"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    flags = cookie_flags(cookie)
    assert {"httponly", "samesite=strict", "path=/"} <= flags
    assert "secure" not in flags  # plain http on loopback
    assert controller.token not in cookie


def test_cookie_is_secure_behind_https(controller: Controller) -> None:
    # The controller trusts forwarding headers from loopback, as behind a local proxy.
    response = post_login(
        controller, {"token": controller.token}, headers={"X-Forwarded-Proto": "https"}
    )
    assert response.status_code == 303
    assert "secure" in cookie_flags(response.headers["set-cookie"])


def test_wrong_token_is_refused_without_detail(controller: Controller) -> None:
    bodies = []
    for wrong in ("short-guess", secrets.token_urlsafe(32), controller.token[:-1]):
        response = post_login(controller, {"token": wrong, "next": "/dashboard"})
        assert response.status_code == 401
        assert "set-cookie" not in response.headers
        assert wrong not in response.text
        bodies.append(response.text)
    # A near miss, a short token and a random one get the very same answer.
    assert bodies[0] == bodies[1] == bodies[2]
    assert "not accepted" in bodies[0]


def test_a_session_used_after_a_while_gets_its_cookie_renewed(
    controller: Controller,
) -> None:
    # A session last used two minutes ago, signed as the controller signs them.
    earlier = SessionStore(
        controller.token, EndedSessions(MemoryRecord()), clock=lambda: time.time() - 120
    ).create()
    response = requests.get(
        f"{controller.url}/api/v1/devboxes", cookies={COOKIE: earlier.cookie}, timeout=10
    )
    assert response.status_code == 200
    renewed = response.cookies.get(COOKIE)
    assert renewed is not None
    assert renewed != earlier.cookie
    assert response.headers["x-content-type-options"] == "nosniff"
    flags = cookie_flags(response.headers["set-cookie"])
    assert {"httponly", "samesite=strict", "path=/"} <= flags
    fresh = requests.get(f"{controller.url}/api/v1/devboxes", cookies={COOKIE: renewed}, timeout=10)
    assert fresh.status_code == 200
    assert "set-cookie" not in fresh.headers


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://elsewhere.example"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "null"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_login_from_another_site_is_refused(
    controller: Controller, headers: dict[str, str]
) -> None:
    response = post_login(controller, {"token": controller.token}, headers)
    assert response.status_code == 403
    assert "set-cookie" not in response.headers


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/dashboard", "/dashboard"),
        ("/dashboard/", "/dashboard/"),
        ("https://elsewhere.example/dashboard", "/dashboard"),
        ("//elsewhere.example/dashboard", "/dashboard"),
        ("/dashboard/../api/v1/devboxes", "/dashboard"),
        ("/dashboardx", "/dashboard"),
        ("/dashboard/login", "/dashboard"),
        ("/api/v1/whoami", "/dashboard"),
        ("", "/dashboard"),
    ],
)
def test_redirect_after_login_stays_on_the_dashboard(target: str, expected: str) -> None:
    assert safe_next(target) == expected


def test_login_redirect_ignores_foreign_targets(controller: Controller) -> None:
    response = post_login(
        controller, {"token": controller.token, "next": "https://elsewhere.example/"}
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/dashboard"


def test_page_has_a_strict_csp_and_no_inline_code(
    controller: Controller, signed_in: tuple[requests.Session, str]
) -> None:
    browser, _ = signed_in
    for path in ("/dashboard", "/dashboard/login"):
        response = browser.get(f"{controller.url}{path}", timeout=10)
        assert response.status_code == 200
        csp = {
            directive.strip().split(" ", 1)[0]: directive.strip()
            for directive in response.headers["content-security-policy"].split(";")
        }
        assert csp["default-src"] == "default-src 'self'"
        assert csp["script-src"] == "script-src 'self'"
        assert csp["style-src"] == "style-src 'self'"
        assert csp["frame-ancestors"] == "frame-ancestors 'none'"
        assert "unsafe" not in response.headers["content-security-policy"]
        assert response.headers["cache-control"] == "no-store"
        page = response.text
        assert controller.token not in page
        for script in re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S):
            assert 'src="/dashboard/static/' in script[0]
            assert not script[1].strip()
        assert not re.search(r"<style|\son[a-z]+=|\sstyle=", page)
        assert "http://" not in page
        assert "https://" not in page


def test_assets_are_served_from_an_allowlist(controller: Controller) -> None:
    script = requests.get(f"{controller.url}/dashboard/static/dashboard.js", timeout=10)
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "EventSource" in script.text
    labels = requests.get(f"{controller.url}/dashboard/static/labels.js", timeout=10)
    assert labels.headers["content-type"].startswith("text/javascript")
    assert "autoStopLabel" in labels.text
    style = requests.get(f"{controller.url}/dashboard/static/dashboard.css", timeout=10)
    assert style.headers["content-type"].startswith("text/css")
    for name in ("dashboard.html", "login.html", "..%2Fauth.py"):
        assert (
            requests.get(f"{controller.url}/dashboard/static/{name}", timeout=10).status_code == 404
        )


def test_session_reads_without_csrf(
    controller: Controller, signed_in: tuple[requests.Session, str]
) -> None:
    browser, _ = signed_in
    response = browser.get(f"{controller.url}/api/v1/devboxes", timeout=10)
    assert response.status_code == 200
    assert "items" in response.json()


def test_mutation_needs_the_csrf_header(
    controller: Controller, signed_in: tuple[requests.Session, str]
) -> None:
    browser, csrf = signed_in
    name = box_name()
    url = f"{controller.url}/api/v1/devboxes"
    for headers in ({}, {"X-Devboxes-CSRF": "forged"}, {"X-Devboxes-CSRF": csrf + "x"}):
        response = browser.post(url, json={"name": name}, headers=headers, timeout=30)
        assert response.status_code == 403, response.text
        assert "X-Devboxes-CSRF" in response.json()["detail"]
    assert browser.get(f"{url}/{name}", timeout=10).status_code == 404

    created = browser.post(url, json={"name": name}, headers={"X-Devboxes-CSRF": csrf}, timeout=30)
    try:
        assert created.status_code == 201, created.text
        stop = browser.post(f"{url}/{name}/stop", timeout=30)
        assert stop.status_code == 403
    finally:
        deleted = requests.delete(
            f"{url}/{name}", params={"purge": "true"}, headers=controller.headers(), timeout=60
        )
    assert deleted.status_code == 200


def test_bearer_requests_need_no_csrf(controller: Controller) -> None:
    response = requests.post(
        f"{controller.url}/api/v1/devboxes/{box_name()}/stop",
        headers=controller.headers(),
        timeout=10,
    )
    assert response.status_code == 404  # authorised; the box simply does not exist


def test_forged_session_is_unauthorised(controller: Controller) -> None:
    browser = requests.Session()
    browser.cookies.set(COOKIE, secrets.token_urlsafe(32))
    response = browser.get(f"{controller.url}/api/v1/whoami", timeout=10)
    assert response.status_code == 401
    assert "log in again" in response.json()["detail"]
    events = browser.get(f"{controller.url}/dashboard/events", timeout=10)
    assert events.status_code == 401
    page = browser.get(f"{controller.url}/dashboard", allow_redirects=False, timeout=10)
    assert page.status_code == 303


def test_logout_needs_csrf_and_ends_the_session(controller: Controller) -> None:
    browser, csrf = login(controller)
    refused = browser.post(
        f"{controller.url}/dashboard/logout",
        data={"csrf": "wrong"},
        allow_redirects=False,
        timeout=10,
    )
    assert refused.status_code == 403
    assert browser.get(f"{controller.url}/api/v1/whoami", timeout=10).status_code == 200

    cookie = browser.cookies.get(COOKIE)
    assert cookie is not None
    response = browser.post(
        f"{controller.url}/dashboard/logout",
        data={"csrf": csrf},
        allow_redirects=False,
        timeout=10,
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/dashboard/login"
    # The old cookie, replayed, no longer works.
    replay = requests.Session()
    replay.cookies.set(COOKIE, cookie)
    assert replay.get(f"{controller.url}/api/v1/whoami", timeout=10).status_code == 401


def test_the_page_names_who_is_signed_in_and_marks_an_admin(
    start_controller: StartController, namespace: str
) -> None:
    settings = example_settings(namespace)
    settings["auth"] = {"adminGroups": ["gpu-admins"]}
    controller = start_controller(settings)
    # Sessions as the issuer's sign-in makes them: signed with the controller's token.
    sessions = SessionStore(controller.token, ended())
    for person, shown in [
        (None, "<strong>operator</strong> (admin)"),
        (Person("olivia", ("gpu-admins",)), "<strong>olivia</strong> (admin)"),
        (Person("bob", ("staff",)), "<strong>bob</strong>"),
        (Person('<b>"x"', ()), "<strong>&lt;b&gt;&quot;x&quot;</strong>"),
    ]:
        browser = requests.Session()
        browser.cookies.set(COOKIE, sessions.create(person).cookie)
        page = browser.get(f"{controller.url}/dashboard", allow_redirects=False, timeout=10)
        assert page.status_code == 200
        assert f'<p id="signed-in" class="signed-in">Signed in as {shown}</p>' in page.text
        assert 'action="/dashboard/logout"' in page.text


def _events(response: requests.Response) -> Iterator[tuple[str, Any]]:
    kind = ""
    for line in response.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            yield kind, json.loads(line[len("data: ") :])


def test_events_push_box_changes(
    controller: Controller, signed_in: tuple[requests.Session, str]
) -> None:
    browser, _ = signed_in
    name = box_name()
    api = f"{controller.url}/api/v1/devboxes"
    with browser.get(f"{controller.url}/dashboard/events", stream=True, timeout=60) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = _events(stream)
        kind, snapshot = next(events)
        assert kind == "snapshot"
        assert name not in {box["name"] for box in snapshot["items"]}

        created = requests.post(api, json={"name": name}, headers=controller.headers(), timeout=30)
        assert created.status_code == 201, created.text
        try:
            kind, box = next((k, d) for k, d in events if d.get("name") == name)
            assert kind == "box"
            assert box["preset"] == "small"
            assert box["gpu"] is None
        finally:
            deleted = requests.delete(
                f"{api}/{name}", params={"purge": "true"}, headers=controller.headers(), timeout=60
            )
        assert deleted.status_code == 200
        kind = next(k for k, d in events if k == "removed" and d["name"] == name)
        assert kind == "removed"


def test_events_narrowed_to_an_owner_show_only_that_owners_boxes(
    controller: Controller, signed_in: tuple[requests.Session, str]
) -> None:
    browser, _ = signed_in
    name = box_name()
    api = f"{controller.url}/api/v1/devboxes"
    created = requests.post(api, json={"name": name}, headers=controller.headers(), timeout=30)
    assert created.status_code == 201, created.text
    try:
        assert created.json()["owner"] == "operator"
        for owner, shown in (("operator", True), ("nobody-else", False)):
            with browser.get(
                f"{controller.url}/dashboard/events",
                params={"owner": owner},
                stream=True,
                timeout=60,
            ) as stream:
                assert stream.status_code == 200
                kind, snapshot = next(_events(stream))
            assert kind == "snapshot"
            assert {box["owner"] for box in snapshot["items"]} <= {owner}
            assert (name in {box["name"] for box in snapshot["items"]}) is shown
        refused = browser.get(f"{controller.url}/dashboard/events?owner=", timeout=10)
        assert refused.status_code == 422
    finally:
        requests.delete(
            f"{api}/{name}", params={"purge": "true"}, headers=controller.headers(), timeout=60
        )


def test_a_session_works_on_every_replica_and_survives_a_restart(
    start_controller: StartController,
) -> None:
    """Two replicas behind one Service share only the operator token, not memory."""
    first = start_controller()
    second = start_controller(token=first.token)
    browser, csrf = login(first)
    cookie = browser.cookies.get(COOKIE)
    on_second = requests.Session()
    on_second.cookies.set(COOKIE, cookie)
    assert on_second.get(f"{second.url}/api/v1/devboxes", timeout=10).status_code == 200
    name = box_name()
    created = create_as_page(on_second, second, csrf, name)
    assert created.status_code == 201, created.text
    first.stop()
    restarted = start_controller(token=first.token)
    on_restarted = requests.Session()
    on_restarted.cookies.set(COOKIE, cookie)
    deleted = on_restarted.delete(
        f"{restarted.url}/api/v1/devboxes/{name}",
        params={"purge": "true"},
        headers={"X-Devboxes-CSRF": csrf},
        timeout=30,
    )
    assert deleted.status_code == 200, deleted.text
    # Another token (a rotation) ends the session everywhere.
    rotated = start_controller()
    assert on_restarted.get(f"{rotated.url}/api/v1/devboxes", timeout=10).status_code == 401


def test_logout_on_one_replica_ends_the_session_on_every_replica_and_after_a_restart(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    first = start_controller()
    second = start_controller(token=first.token)
    browser, csrf = login(first)
    cookie = browser.cookies.get(COOKIE)
    assert cookie is not None
    replayed = requests.Session()
    replayed.cookies.set(COOKIE, cookie)
    assert replayed.get(f"{second.url}/api/v1/whoami", timeout=10).status_code == 200

    logout = browser.post(
        f"{first.url}/dashboard/logout", data={"csrf": csrf}, allow_redirects=False, timeout=10
    )
    assert logout.status_code == 303
    # Answered once the cluster holds the record: a digest of whose sessions ended, never
    # the session's id.
    session_id = cookie.split(".")[1]
    record = client.CoreV1Api(kube).read_namespaced_config_map(CONFIGMAP, namespace).data
    assert list(record) == [digest("-")]
    assert session_id not in json.dumps(record)

    def refused_on_second() -> bool:
        """the other replica refuses the ended session"""
        response = replayed.get(f"{second.url}/api/v1/whoami", timeout=10)
        return response.status_code == 401

    assert replayed.get(f"{first.url}/api/v1/whoami", timeout=10).status_code == 401
    wait_for(refused_on_second, timeout=60, interval=0.05)
    created = create_as_page(replayed, second, csrf, box_name())
    assert created.status_code == 401, created.text
    assert client.AppsV1Api(kube).list_namespaced_deployment(namespace).items == []

    second.stop()
    second.start()
    assert replayed.get(f"{second.url}/api/v1/whoami", timeout=10).status_code == 401
    assert (
        replayed.get(f"{second.url}/dashboard", allow_redirects=False, timeout=10).status_code
        == 303
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


SECRET = "s" * 40


def ended(record: MemoryRecord | None = None) -> EndedSessions:
    return EndedSessions(record or MemoryRecord())


def test_sessions_expire_when_idle() -> None:
    clock = Clock()
    store = SessionStore(SECRET, ended(), clock=clock, idle_seconds=300, absolute_seconds=3600)
    first = store.create().cookie
    clock.now += 299
    session = store.lookup(first)  # and that use restarts the idle period
    assert session is not None
    assert session.reissued
    clock.now += 299
    assert store.lookup(first) is None
    renewed = store.lookup(session.cookie)
    assert renewed is not None
    clock.now += 301
    assert store.lookup(renewed.cookie) is None


def test_sessions_expire_after_their_lifetime_even_when_used() -> None:
    clock = Clock()
    store = SessionStore(SECRET, ended(), clock=clock, idle_seconds=300, absolute_seconds=600)
    cookie = store.create().cookie
    for _ in range(2):
        clock.now += 250
        session = store.lookup(cookie)
        assert session is not None
        cookie = session.cookie
    clock.now += 101
    assert store.lookup(cookie) is None


def test_every_replica_with_the_token_accepts_a_session_and_nothing_else_does() -> None:
    clock = Clock()
    store = SessionStore(SECRET, ended(), clock=clock)
    session = store.create()
    other_replica = SessionStore(SECRET, ended(), clock=clock)
    seen = other_replica.lookup(session.cookie)
    assert seen is not None
    assert seen.csrf == session.csrf
    assert csrf_matches(seen, session.csrf)
    assert not csrf_matches(seen, None)
    assert not csrf_matches(seen, session.csrf[:-1])
    # Rotating the operator token ends every session.
    assert SessionStore("t" * 40, ended(), clock=clock).lookup(session.cookie) is None
    payload, _, mac = session.cookie.rpartition(".")
    version, session_id, created, _seen, person = payload.split(".")
    forged = f"{version}.{session_id}.{created}.{int(clock.now) + 10**6}.{person}.{mac}"
    assert store.lookup(forged) is None
    assert store.lookup(session.cookie[:-1]) is None
    assert store.lookup("") is None
    assert store.lookup(None) is None
    assert len(session_id) >= 43
    assert len({store.create().id for _ in range(20)}) == 20


def test_logout_ends_the_session_here_at_once_and_on_every_replica_once_recorded() -> None:
    record = MemoryRecord()
    store = SessionStore(SECRET, ended(record))
    other_replica = SessionStore(SECRET, ended(record))
    session = store.create()
    store.end(session)
    assert store.lookup(session.cookie) is None
    assert other_replica.lookup(session.cookie) is not None
    store.ended.flush()
    assert other_replica.lookup(session.cookie) is None
    assert SessionStore(SECRET, ended(record)).lookup(session.cookie) is None
    # Kept until the session's absolute end, when its cookie is refused anyway.
    until = session.created_ms // 1000 + int(store.absolute_seconds) + 1
    assert list(record.entries.values()) == [f"{session.created_ms}:{until}"]


def test_a_sign_out_ends_earlier_sessions_of_the_identity_and_no_later_or_other_one() -> None:
    clock = Clock()
    record = MemoryRecord()
    store = SessionStore(SECRET, EndedSessions(record, clock), clock=clock)
    earlier = store.create()
    alice = store.create(Person("alice"))
    clock.now += 0.001
    signed_out = store.create()
    clock.now += 0.001
    later = store.create()
    store.end(signed_out)
    store.ended.flush()
    other_replica = SessionStore(SECRET, EndedSessions(record, clock), clock=clock)
    assert other_replica.lookup(signed_out.cookie) is None
    assert other_replica.lookup(earlier.cookie) is None
    assert other_replica.lookup(later.cookie) is not None
    assert other_replica.lookup(alice.cookie) is not None
    # A sign-in in the same second as the sign-out is a new session.
    assert other_replica.lookup(store.create().cookie) is not None


def test_no_session_is_accepted_before_the_ended_ones_are_loaded() -> None:
    record = MemoryRecord(loaded=False)
    store = SessionStore(SECRET, ended(record))
    session = store.create()
    with pytest.raises(SessionsLoading) as refused:
        store.lookup(session.cookie)
    assert refused.value.status == 503
    assert store.lookup(None) is None
    record.loaded = True
    assert store.lookup(session.cookie) is not None
