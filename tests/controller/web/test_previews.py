"""Web previews: a box's declared port, opened from the dashboard on an origin of its own.

The controller's real application is served by uvicorn on loopback, its caches filled with
recorded boxes; the ready box is pinned to the "web-preview" image profile (port 8080) and
its pod address is moved to a loopback address, where a small web application stands in
for the box's preview: it answers what it was asked (path, Host, cookies, body) and echoes
WebSocket messages in upper case, so that an answer cannot be the client's own bytes.
Preview hosts are ``{port}-{box}.localhost``, which Chromium resolves to loopback; plain
HTTP clients reach the same server with the host in the ``Host`` header.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import uvicorn
import websockets.sync.client
import yaml
from devboxes_controller.box import naming
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.config.violations import ConfigError
from devboxes_controller.state.ended_sessions import EndedSessions
from devboxes_controller.web.identity.sessions import (
    COOKIE,
    PREVIEW_CODE,
    Person,
    PreviewGrant,
    SessionStore,
)
from kubernetes import client
from served import Served, recorded_store, settings_with_connections
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from support import CHROMIUM, MemoryRecord, launch_chromium, wait_for

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = REPO / "test-artifacts" / "previews"
TOKEN = "preview-test-token-" + "p" * 32
READY_BOX = "cpu"
PORT = 8080
CODE_FIELD = re.compile(r'name="code" value="([^"]+)"')
ACTION = re.compile(r'action="([^"]+)"')


def _page(request: Request) -> HTMLResponse:
    # The page talks back to its own origin over a WebSocket, as dev servers do.
    return HTMLResponse(
        "<!doctype html><title>box page</title><h1 id=greeting>hello from the box</h1>"
        "<p id=echo></p><script>"
        "const socket = new WebSocket(`ws://${location.host}/socket`);"
        "socket.onopen = () => socket.send('ping from the page');"
        "socket.onmessage = (m) => { document.getElementById('echo').textContent = m.data; };"
        "</script>",
        headers={"Set-Cookie": "box_own=1; Path=/"},
    )


async def _seen(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "host": request.headers.get("host"),
            "cookie": request.headers.get("cookie"),
            "body": (await request.body()).decode(),
        }
    )


async def _socket(websocket: WebSocket) -> None:
    await websocket.accept()
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            text = await websocket.receive_text()
            await websocket.send_text(text.upper())


class BoxSite:
    """The box's web server on its own loopback address, port 8080."""

    def __init__(self) -> None:
        self.address = f"127.0.{random.randint(1, 254)}.{random.randint(2, 254)}"
        app = Starlette(
            routes=[
                Route("/", _page),
                Route("/seen/{rest:path}", _seen, methods=["GET", "POST"]),
                WebSocketRoute("/socket", _socket),
            ]
        )
        self.server = uvicorn.Server(
            uvicorn.Config(app, host=self.address, port=PORT, log_level="error")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=30, interval=0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Previews:
    """The served controller: its URL, the preview's origin and a way to sign in."""

    def __init__(self, url: str, origin: str | None, sessions: SessionStore) -> None:
        self.url = url
        self.origin = origin
        self.sessions = sessions
        self.port = int(url.rsplit(":", 1)[1])

    def operator(self) -> requests.Session:
        browser = requests.Session()
        signed_in = browser.post(
            f"{self.url}/dashboard/login",
            data={"token": TOKEN, "next": "/dashboard"},
            allow_redirects=False,
            timeout=10,
        )
        assert signed_in.status_code == 303, signed_in.text
        return browser

    def person(self, user: str) -> requests.Session:
        browser = requests.Session()
        browser.cookies.set(COOKIE, self.sessions.create(Person(user)).cookie)
        return browser

    def hand_off(self, browser: requests.Session, box: str = READY_BOX, port: int = PORT) -> Any:
        return browser.get(
            f"{self.url}/dashboard/devboxes/{box}/ports/{port}/", allow_redirects=False, timeout=10
        )

    def preview(
        self, method: str, path: str, host: str = f"{PORT}-{READY_BOX}.localhost", **kwargs: Any
    ) -> requests.Response:
        """A request on the preview's host, as a browser that resolved it sends it."""
        headers = {"Host": f"{host}:{self.port}", **kwargs.pop("headers", {})}
        return requests.request(
            method,
            f"{self.url}{path}",
            headers=headers,
            timeout=10,
            allow_redirects=False,
            **kwargs,
        )

    def signed_in_pass(self, browser: requests.Session) -> str:
        """Follow the hand-off as a browser does; the preview's cookie it was given."""
        handed = self.hand_off(browser)
        assert handed.status_code == 200, handed.text
        code = CODE_FIELD.search(handed.text)
        assert code is not None, handed.text
        opened = self.preview("POST", "/.devboxes/open", data={"code": code.group(1)})
        assert opened.status_code == 303, opened.text
        assert opened.headers["location"] == "/"
        return str(opened.cookies["devboxes_preview"])


Serve = Callable[..., Previews]


@pytest.fixture
def box_site() -> Iterator[BoxSite]:
    site = BoxSite()
    yield site
    site.close()


@pytest.fixture
def serve(box_site: BoxSite) -> Iterator[Serve]:
    served = Served()

    def start(previews: bool = True) -> Previews:
        port = _free_port()
        connections = {"previewUrl": f"http://*.localhost:{port}"} if previews else {}
        settings = settings_with_connections(connections)
        api = client.ApiClient()
        profile = settings.images.profile("web-preview")
        assert profile is not None
        pinned = {
            naming.ANNOTATION_IMAGE_SNAPSHOT: profile.snapshot_json(),
            naming.ANNOTATION_IMAGE_PROFILE: profile.name,
        }
        boxes = (READY_BOX, "stopped")
        store = recorded_store(
            settings, api, boxes, READY_BOX, box_site.address, dict.fromkeys(boxes, pinned)
        )
        record = MemoryRecord()
        served.start(settings, store, api, TOKEN, ended=EndedSessions(record), port=port)
        sessions = SessionStore(TOKEN, EndedSessions(record))
        origin = f"http://{PORT}-{READY_BOX}.localhost:{port}" if previews else None
        return Previews(f"http://127.0.0.1:{port}", origin, sessions)

    yield start
    served.stop()


def test_the_hand_off_posts_a_short_lived_code_to_the_previews_own_origin(serve: Serve) -> None:
    previews = serve()
    handed = previews.hand_off(previews.operator())
    assert handed.status_code == 200, handed.text
    action = ACTION.search(handed.text)
    assert action is not None
    assert action.group(1) == f"{previews.origin}/.devboxes/open"
    # The code travels in the form, never in a URL, and the page may post only there.
    assert "?" not in action.group(1)
    csp = handed.headers["content-security-policy"]
    assert f"form-action {previews.origin};" in csp
    assert "script-src 'self'" in csp
    assert handed.headers["cache-control"] == "no-store"


def test_through_the_preview_the_box_answers_with_its_own_cookies_only(
    serve: Serve, box_site: BoxSite
) -> None:
    previews = serve()
    preview_pass = previews.signed_in_pass(previews.operator())
    cookies = {"devboxes_preview": preview_pass, "box_own": "1"}
    page = previews.preview("GET", "/", cookies=cookies)
    assert page.status_code == 200, page.text
    assert "hello from the box" in page.text
    # The box's own response headers pass unchanged: no API header is added to them.
    assert page.headers["set-cookie"] == "box_own=1; Path=/"
    assert "content-security-policy" not in page.headers
    seen = previews.preview(
        "POST", "/seen/a/b?x=1", cookies=cookies, data="payload", headers={"X-Mine": "y"}
    ).json()
    assert seen["method"] == "POST"
    assert (seen["path"], seen["query"], seen["body"]) == ("/seen/a/b", "x=1", "payload")
    assert seen["host"] == f"{PORT}-{READY_BOX}.localhost:{previews.port}"
    # The preview's pass never reaches the box; the box's own cookie does.
    assert seen["cookie"] == "box_own=1"


def test_a_websocket_of_the_previews_own_page_is_piped_to_the_box(serve: Serve) -> None:
    previews = serve()
    preview_pass = previews.signed_in_pass(previews.operator())

    def connect(origin: str) -> Any:
        # The preview's host in the URL, the connection made to loopback.
        return websockets.sync.client.connect(
            f"ws://{PORT}-{READY_BOX}.localhost:{previews.port}/socket",
            sock=socket.create_connection(("127.0.0.1", previews.port)),
            additional_headers={"Cookie": f"devboxes_preview={preview_pass}"},
            origin=origin,
            open_timeout=10,
        )

    assert previews.origin is not None
    with connect(previews.origin) as connection:
        connection.send("hello box")
        assert connection.recv(timeout=10) == "HELLO BOX"

    def counted() -> bool:
        """the piped WebSocket is counted once it ended"""
        metrics = requests.get(
            f"{previews.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        ).text
        return 'devboxes_preview_requests_total{kind="websocket",status="101"} 1.0' in metrics

    wait_for(counted, timeout=15)
    # A page of another origin (another box's preview) may not open one with the pass.
    with (
        pytest.raises(websockets.exceptions.InvalidStatus) as refused,
        connect(f"http://{PORT}-other.localhost:{previews.port}"),
    ):
        pass
    assert refused.value.response.status_code == 403


def test_without_a_pass_the_preview_says_where_to_sign_in_and_the_box_is_not_asked(
    serve: Serve,
) -> None:
    previews = serve()
    refused = previews.preview("GET", "/seen/x")
    assert refused.status_code == 401
    assert "Open it from the dashboard" in refused.text
    forged = previews.preview("GET", "/seen/x", cookies={"devboxes_preview": "pp1.cpu.8080.9"})
    assert forged.status_code == 401
    # A pass is good for its box's port only.
    preview_pass = previews.signed_in_pass(previews.operator())
    other_port = previews.preview(
        "GET", "/", host=f"8888-{READY_BOX}.localhost", cookies={"devboxes_preview": preview_pass}
    )
    assert other_port.status_code == 401


def test_a_request_another_site_makes_the_browser_send_is_refused(serve: Serve) -> None:
    previews = serve()
    cookies = {"devboxes_preview": previews.signed_in_pass(previews.operator())}
    for site, mode in (("same-site", "cors"), ("cross-site", "no-cors")):
        refused = previews.preview(
            "POST",
            "/seen/x",
            cookies=cookies,
            headers={"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode},
        )
        assert refused.status_code == 403, (site, refused.text)
    # A link followed from anywhere is a navigation: the preview opens.
    followed = previews.preview(
        "GET",
        "/seen/x",
        cookies=cookies,
        headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"},
    )
    assert followed.status_code == 200


def test_a_code_is_good_once_for_a_minute_for_its_box_and_port_only(serve: Serve) -> None:
    previews = serve()
    session = previews.sessions.create()
    grant = PreviewGrant(READY_BOX, PORT, session.created_ms, None)
    code = previews.sessions.sign_preview(grant, PREVIEW_CODE)
    for host in (f"8888-{READY_BOX}.localhost", f"{PORT}-stopped.localhost"):
        elsewhere = previews.preview("POST", "/.devboxes/open", host=host, data={"code": code})
        assert elsewhere.status_code == 403, host
    stale_sessions = SessionStore(
        TOKEN, EndedSessions(MemoryRecord()), clock=lambda: time.time() - 61
    )
    stale = stale_sessions.sign_preview(grant, PREVIEW_CODE)
    refused = previews.preview("POST", "/.devboxes/open", data={"code": stale})
    assert refused.status_code == 403
    assert "expired" in refused.text
    hostile = previews.preview("POST", "/.devboxes/open", data="code=" + "x" * 5000)
    assert hostile.status_code == 413
    many = previews.preview("POST", "/.devboxes/open", data="&".join(["a=1"] * 20))
    assert many.status_code == 403
    assert previews.preview("POST", "/.devboxes/open", data={"code": code}).status_code == 303


def test_only_the_owner_or_an_admin_is_handed_a_declared_port_of_a_ready_box(serve: Serve) -> None:
    previews = serve()
    anonymous = requests.get(
        f"{previews.url}/dashboard/devboxes/{READY_BOX}/ports/{PORT}/",
        allow_redirects=False,
        timeout=10,
    )
    assert anonymous.status_code == 303
    assert anonymous.headers["location"] == (
        f"/dashboard/login?next=/dashboard/devboxes/{READY_BOX}/ports/{PORT}/"
    )
    # Another person's box is as absent as one that does not exist.
    elsewhere = previews.hand_off(previews.person("alice"))
    absent = previews.hand_off(previews.operator(), box="no-such-box")
    assert elsewhere.status_code == absent.status_code == 404
    assert "devbox &#x27;cpu&#x27; not found" in elsewhere.text
    operator = previews.operator()
    undeclared = previews.hand_off(operator, port=22)
    assert undeclared.status_code == 404
    assert "declares no port 22 (its image profile declares: 8080)" in undeclared.text
    stopped = previews.hand_off(operator, box="stopped")
    assert stopped.status_code == 409
    assert "is stopped" in stopped.text
    for bad in ("0", "70000", "http"):
        assert previews.hand_off(operator, port=bad).status_code == 404  # type: ignore[arg-type]


def test_a_sign_out_ends_the_previews_it_opened(serve: Serve) -> None:
    previews = serve()
    browser = previews.operator()
    cookies = {"devboxes_preview": previews.signed_in_pass(browser)}
    assert previews.preview("GET", "/seen/x", cookies=cookies).status_code == 200
    page = browser.get(f"{previews.url}/dashboard", timeout=10)
    csrf = re.search(r'name="devboxes-csrf" content="([^"]+)"', page.text)
    assert csrf is not None, page.text
    signed_out = browser.post(
        f"{previews.url}/dashboard/logout",
        data={"csrf": csrf.group(1)},
        allow_redirects=False,
        timeout=20,
    )
    assert signed_out.status_code in (303, 503), signed_out.text
    assert previews.preview("GET", "/seen/x", cookies=cookies).status_code == 401


def test_without_a_preview_url_the_dashboard_points_to_port_forward(serve: Serve) -> None:
    previews = serve(previews=False)
    handed = previews.hand_off(previews.operator())
    assert handed.status_code == 404
    assert "connections.previewUrl is not set" in handed.text
    assert f"devbox port-forward {READY_BOX} {PORT}" in handed.text


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("preview.example.com", "is not a preview URL pattern"),
        ("https://preview.example.com", "is not a preview URL pattern"),
        ("https://*.preview.example.com/path", "is not a preview URL pattern"),
        ("ftp://*.preview.example.com", "is not a preview URL pattern"),
        ("https://*.preview.example.com:99999", "no valid port"),
        ("https://user@*.preview.example.com", "is not a preview URL pattern"),
    ],
)
def test_a_preview_url_that_is_no_wildcard_origin_is_refused(value: str, problem: str) -> None:
    data = yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
    with pytest.raises(ConfigError) as refused:
        settings_from_mapping({**data, "connections": {"previewUrl": value}})
    assert "connections.previewUrl" in str(refused.value)
    assert problem in str(refused.value)


def test_preview_hosts_name_one_box_and_port() -> None:
    settings = settings_with_connections({"previewUrl": "https://*.preview.example.com/"})
    origins = settings.connections.previews
    assert origins is not None
    assert origins.origin("web-1", 8080) == "https://8080-web-1.preview.example.com"
    assert origins.box_of("8080-web-1.Preview.Example.com") == ("web-1", 8080)
    assert origins.box_of("8080-1-2.preview.example.com:443") == ("1-2", 8080)
    for host in (
        "preview.example.com",
        "web-8080.preview.example.com",
        "8080-web.other.example.com",
        "99999-web.preview.example.com",
        "0-web.preview.example.com",
        "8080-web.x.preview.example.com",
        "[::1]:8080",
        "",
    ):
        assert origins.box_of(host) is None, host


@pytest.mark.browser
def test_a_preview_opens_from_the_dashboard_in_chromium_on_its_own_origin(serve: Serve) -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed at /usr/bin/chromium")
    from playwright.sync_api import expect, sync_playwright

    previews = serve()
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            context = browser.new_context(viewport={"width": 1200, "height": 800})
            page = context.new_page()
            page.goto(f"{previews.url}/dashboard")
            page.get_by_label("Operator token").fill(TOKEN)
            page.get_by_label("Operator token").press("Enter")
            link = page.get_by_role("link", name="Open http (8080)")
            expect(link).to_be_visible()
            assert link.get_attribute("rel") == "noopener noreferrer"
            with context.expect_page() as opened:
                link.click()
            preview = opened.value
            expect(preview.locator("#greeting")).to_have_text("hello from the box")
            assert preview.url == f"{previews.origin}/"
            # The page's own WebSocket reaches the box through the controller.
            expect(preview.locator("#echo")).to_have_text("PING FROM THE PAGE")
            # The preview's pass is HttpOnly, and the dashboard's session is not sent here:
            # the page's scripts see the box's own cookie only.
            assert preview.evaluate("document.cookie") == "box_own=1"
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            preview.screenshot(path=str(ARTIFACTS / "preview-through-the-controller.png"))
            # A script of the preview cannot read the dashboard: another origin.
            read = preview.evaluate(
                "url => fetch(url, {credentials: 'include'}).then(() => 'read', () => 'blocked')",
                f"{previews.url}/dashboard",
            )
            assert read == "blocked"
        finally:
            browser.close()
