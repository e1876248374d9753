"""The `devbox` command and the SDK pointed at the wrong place: a URL with a path, a
server that is not the Devboxes API (a web page, as a Jupyter server answers), TLS with a
certificate for another name or from an unknown CA, and a box with no time left to add.

Each server is a real one started here on loopback. The controller is its real
application with caches that hold one recorded box: the answers tested here (unknown
paths, a refused extend) are decided before any call to Kubernetes, so no cluster runs.
"""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import certifi
import pytest
import uvicorn
import yaml
from devboxes_controller.box import naming
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.control.lifecycle import Lifecycle
from devboxes_controller.k8s.probe import ApiserverProbe
from devboxes_controller.k8s.timestamps import format_timestamp
from devboxes_controller.state import slim
from devboxes_controller.state.ended_sessions import SharedEndedSessions
from devboxes_controller.state.store import BoxStore
from devboxes_controller.state.watches import DEPLOYMENTS, Watches
from devboxes_controller.web.app import create_app
from devboxes_controller.web.readiness import Readiness
from devboxes_testbed import pki
from kubernetes import client
from support import recorded, serving, wait_for
from test_cli_live import devbox

from devboxes_sdk import Client, ConfigurationError, NotADevboxesServer, NotFound, Unavailable

REPO = Path(__file__).resolve().parents[2]
TOKEN = "edge-test-token-" + "y" * 32
NOW = datetime(2030, 5, 17, 6, 0, tzinfo=UTC)
BOX = "unplaceable"
MAX_HOURS = 168


def assert_clean(result: Any, *lines: str) -> None:
    """Exit 1, nothing on stdout, exactly ``lines`` on stderr, and never the token."""
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert result.stderr.splitlines() == list(lines)
    assert TOKEN not in result.stderr


# -- servers ------------------------------------------------------------------------


class _PageServer(http.server.ThreadingHTTPServer):
    saw_token = False


class _PageHandler(http.server.BaseHTTPRequestHandler):
    """Answers every request with http.server's HTML error page and 404, as a Jupyter
    server answers /api/v1/... ; remembers whether a token was sent."""

    server: _PageServer

    def _answer(self) -> None:
        self.server.saw_token |= TOKEN in self.headers.get("Authorization", "")
        self.send_error(404)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the client's side."""


@contextmanager
def page_server(
    tls: ssl.SSLContext | None = None, host: str = "127.0.0.1"
) -> Iterator[_PageServer]:
    server = _PageServer((host, 0), _PageHandler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    with serving(server):
        yield server


class _Ready(Readiness):
    """Writes are accepted: the store is never started, its caches hold what the test
    put there."""

    def write_problem(self) -> str | None:
        return None

    def problem(self) -> str | None:
        return None


def _recorded_box(expires_at: datetime) -> dict[str, Any]:
    (deployment,) = recorded("deployments", BOX)
    deployment["spec"]["replicas"] = 1
    deployment["metadata"]["annotations"][naming.ANNOTATION_EXPIRES_AT] = format_timestamp(
        expires_at
    )
    return deployment


@pytest.fixture
def controller_url() -> Iterator[Callable[[datetime], str]]:
    """Serves the controller's application; call with the recorded box's deadline."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def serve(expires_at: datetime) -> str:
        settings = settings_from_mapping(
            yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
        )
        assert settings.ttl.max_hours == MAX_HOURS
        api = client.ApiClient()
        watches = Watches(settings, api)
        store = BoxStore(settings, watches, clock=lambda: NOW)
        watches[DEPLOYMENTS]._put(slim.deployment(_recorded_box(expires_at)))
        lifecycle = Lifecycle(store, api, activity_key=b"k" * 32)
        # Never started: the API's routes take the token, not a dashboard session.
        ended = SharedEndedSessions(settings.namespace, api)
        app = create_app(store, lifecycle, TOKEN, _Ready(ApiserverProbe(api), store, ended), ended)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        wait_for(lambda: server.started, timeout=60, interval=0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield serve
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def certificates(tmp_path: Path) -> pki.Pki:
    """A CA and a serving certificate it signed for localhost and 127.0.0.1."""
    return pki.create(tmp_path)


@contextmanager
def tls_page_server(certificates: pki.Pki, host: str = "127.0.0.1") -> Iterator[int]:
    """The page server behind TLS with the serving certificate; yields its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates.serving_cert, certificates.serving_key)
    with page_server(context, host) as server:
        yield server.server_address[1]


def env(url: str, **extra: str) -> dict[str, str]:
    return {"DEVBOX_URL": url, "DEVBOX_TOKEN": TOKEN, **extra}


# -- the URL ------------------------------------------------------------------------


def test_a_url_with_the_api_path_names_the_base_url_before_any_request() -> None:
    with page_server() as server:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        result = devbox(env(f"{base}/api/v1/"), "list")
        flag = devbox(env(base), "--url", f"{base}/devboxes/api/v1/devboxes", "whoami")
        assert not server.saw_token
    assert_clean(
        result,
        f"the Devboxes URL {base}/api/v1 includes the API path /api/v1; use the controller's "
        f"base URL {base} (requests add /api/v1 themselves) (from DEVBOX_URL)",
    )
    assert_clean(
        flag,
        f"the Devboxes URL {base}/devboxes/api/v1/devboxes includes the API path /api/v1; "
        f"use the controller's base URL {base}/devboxes (requests add /api/v1 themselves) "
        "(from --url)",
    )
    with pytest.raises(ConfigurationError, match=f"use the controller's base URL {base} "):
        Client(f"{base}/api/v1", TOKEN)


def test_a_url_with_a_path_the_controller_does_not_serve_names_its_base_url(
    controller_url: Callable[[datetime], str],
) -> None:
    base = controller_url(NOW)
    result = devbox(env(f"{base}/devboxes"), "list")
    assert_clean(
        result,
        f"Devboxes API returned 404: no route /api/v1/devboxes under {base}/devboxes; "
        f"the URL must be the controller's base URL, e.g. {base}",
    )
    with Client(f"{base}/devboxes", TOKEN) as sdk, pytest.raises(NotFound, match="no route"):
        sdk.whoami()
    # At the base URL the same server is the API.
    assert devbox(env(base), "whoami").returncode == 0


# -- a server that is not the API ---------------------------------------------------


def test_a_web_page_is_not_dumped_but_named_as_another_server() -> None:
    with page_server() as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = devbox(env(url), "list")
        with Client(url, TOKEN) as sdk, pytest.raises(NotADevboxesServer) as raised:
            sdk.create("atlas")
    assert_clean(
        result,
        f"the server at {url} is not a Devboxes controller: it answered /api/v1/devboxes "
        "with 404 and an HTML page instead of JSON; the URL must be the controller's base URL",
        "Set it with --url, DEVBOX_URL or 'devbox login --url URL': the address where the "
        "Devboxes dashboard opens.",
    )
    assert (raised.value.status, raised.value.url) == (404, url)
    assert "<html" not in str(raised.value)


# -- TLS ----------------------------------------------------------------------------


def test_a_certificate_for_another_name_names_the_host(certificates: pki.Pki) -> None:
    # 127.0.0.2 is loopback too, but not a name the certificate was issued for.
    with tls_page_server(certificates, "127.0.0.2") as port:
        url = f"https://127.0.0.2:{port}"
        result = devbox(env(url, REQUESTS_CA_BUNDLE=str(certificates.ca_cert)), "list")
    assert_clean(
        result,
        f"cannot reach the Devboxes API at {url}: its TLS certificate is not valid for "
        "127.0.0.2 (hostname mismatch); use the host name the certificate was issued for",
    )


def test_a_certificate_from_an_unknown_ca_says_how_to_trust_it(certificates: pki.Pki) -> None:
    with tls_page_server(certificates) as port:
        url = f"https://localhost:{port}"
        result = devbox(env(url, REQUESTS_CA_BUNDLE=certifi.where()), "list")
        with Client(url, TOKEN) as sdk, pytest.raises(Unavailable, match="local issuer"):
            sdk.list()
    assert_clean(
        result,
        f"cannot reach the Devboxes API at {url}: its TLS certificate is not signed by a CA "
        "this machine trusts (unable to get local issuer certificate); if it is your "
        "organisation's own CA, set REQUESTS_CA_BUNDLE to a PEM file that holds it",
    )


def test_the_ca_bundle_setting_is_the_fix_it_names(certificates: pki.Pki) -> None:
    with tls_page_server(certificates) as port:
        url = f"https://localhost:{port}"
        trusted = devbox(env(url, REQUESTS_CA_BUNDLE=str(certificates.ca_cert)), "list")
        missing = devbox(env(url, REQUESTS_CA_BUNDLE="/nonexistent/ca.pem"), "list")
    # The handshake succeeds; what answers is the page server, and that is said.
    assert trusted.returncode == 1
    assert trusted.stderr.startswith(f"the server at {url} is not a Devboxes controller")
    assert_clean(
        missing,
        f"cannot send a request to {url}: Could not find a suitable TLS CA certificate "
        "bundle, invalid path: /nonexistent/ca.pem",
    )


def test_https_to_a_plain_http_port_says_so() -> None:
    with page_server() as server:
        url = f"https://localhost:{server.server_address[1]}"
        result = devbox(env(url), "list")
    assert_clean(
        result,
        f"cannot reach the Devboxes API at {url}: localhost does not speak TLS on this port; "
        "is the URL http:// rather than https://?",
    )


# -- nothing left to extend ---------------------------------------------------------


def test_extending_a_box_at_its_latest_time_says_when_it_can_be(
    controller_url: Callable[[datetime], str],
) -> None:
    latest = NOW + timedelta(hours=MAX_HOURS)
    url = controller_url(latest)
    result = devbox(env(url), "extend", BOX, "--hours", "1")
    assert_clean(
        result,
        f"{BOX} already stops at the latest time allowed, 2030-05-24T06:00:00Z: a box stops "
        f"at most {MAX_HOURS} hours from now (the maximum time to live); it can be extended "
        "by 1 hour from 2030-05-17T07:00:00Z",
    )


def test_extending_by_more_than_the_room_left_names_the_most(
    controller_url: Callable[[datetime], str],
) -> None:
    url = controller_url(NOW + timedelta(hours=MAX_HOURS - 3))
    result = devbox(env(url), "extend", BOX, "--hours", "5")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines()[0] == (
        "devbox extend: error: --hours must be at most 3: a box stops at most 168 hours from "
        f"now (the maximum time to live), and {BOX} already runs until 2030-05-24T03:00:00Z"
    )
