"""The server extension's routes: authentication, XSRF, input checks and token hygiene.

The controller here is a loopback HTTP server that records what the extension sends,
so each test can prove that a refused request never reached it. The behaviour of the
routes against the real controller is covered in ``test_jupyter_handlers_controller``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from devboxes_jupyter import progress
from devboxes_jupyter.handlers import API_ROOT
from devboxes_jupyter.models import WatchView
from support import JsonHandler
from tornado.httpclient import HTTPResponse

from devboxes_sdk.models import Devbox

pytest_plugins = ["pytest_jupyter.jupyter_server"]

SECRET = "s3cret-controller-token-0123456789abcdefXYZ"
BOX = {
    "name": "atlas",
    "state": "starting",
    "preset": "small",
    "created_at": "2025-03-01T12:00:00Z",
    "expires_at": "2025-03-02T12:00:00Z",
    "message": "Scheduling blocked: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    "gpu": {
        "profile": "nvidia-l4",
        "display_name": "NVIDIA L4",
        "resource_name": "nvidia.com/gpu",
        "count": 1,
    },
}
# Every route the browser may call, and the controller call each one makes (None: the
# extension answers from its own view). Checked by what each route answers, so the
# handler classes behind the routes stay free to change.
ROUTES: dict[tuple[str, str], tuple[str, str] | None] = {
    ("GET", "/capabilities"): ("GET", "/api/v1/capabilities"),
    ("GET", "/whoami"): ("GET", "/api/v1/whoami"),
    ("GET", "/gpu/availability"): ("GET", "/api/v1/gpu/availability"),
    ("GET", "/watch"): None,
    ("GET", "/devboxes"): ("GET", "/api/v1/devboxes"),
    ("POST", "/devboxes"): ("POST", "/api/v1/devboxes"),
    ("GET", "/devboxes/atlas"): ("GET", "/api/v1/devboxes/atlas"),
    ("DELETE", "/devboxes/atlas"): ("DELETE", "/api/v1/devboxes/atlas"),
    ("POST", "/devboxes/atlas/start"): ("POST", "/api/v1/devboxes/atlas/start"),
    ("POST", "/devboxes/atlas/stop"): ("POST", "/api/v1/devboxes/atlas/stop"),
}
PATHS = sorted({path for _, path in ROUTES})
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
CAPABILITIES = {"gpu": {"enabled": False, "default_profile": None, "profiles": []}}
WHOAMI = {"user": "ada", "mode": "hub", "groups": ["ml"], "admin": False}
DELETED = {"name": "atlas", "purged": False, "message": "devbox atlas deleted; volume kept"}
AVAILABILITY = {
    "observed_at": "2025-03-01T12:00:00Z",
    "profiles": [{"name": "nvidia-l4", "available": 1, "capacity": 2, "waiting": 0}],
}


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str | None


@dataclass
class RecordingController:
    url: str
    requests: list[Seen] = field(default_factory=list)
    answers: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)


@pytest.fixture
def controller() -> Iterator[RecordingController]:
    recorder = RecordingController(url="")

    class Handler(JsonHandler):
        def _answer(self) -> None:
            parts = urlsplit(self.path)
            recorder.requests.append(
                Seen(
                    self.command,
                    parts.path,
                    parse_qs(parts.query),
                    self.headers.get("Authorization"),
                )
            )
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            status, body = recorder.answers.get(
                (self.command, parts.path), (404, {"detail": "no such devbox"})
            )
            self.send_json(status, body)

        do_GET = do_POST = do_DELETE = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    # A short poll interval: shutdown() waits for the serving loop to look.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield recorder
    server.shutdown()
    server.server_close()


@pytest.fixture
def extension_config() -> dict[str, Any]:
    return {"token": SECRET, "request_timeout": 5.0}


@pytest.fixture
def jp_server_config(
    controller: RecordingController, extension_config: dict[str, Any]
) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"devboxes_jupyter": True}},
        # No devbox kernelspecs: their catalog refresh would be one more controller call
        # in the recordings these tests compare.
        "DevboxesJupyterApp": {
            "controller_url": controller.url,
            "devbox_kernels": False,
            **extension_config,
        },
    }


Fetch = Callable[..., Awaitable[HTTPResponse]]


def _json(response: HTTPResponse) -> Any:
    return json.loads(response.body)


def _answer(method: str, path: str) -> tuple[int, Any]:
    """What the stand-in controller answers to one call of the Devboxes API."""
    if path.endswith("/capabilities"):
        return 200, CAPABILITIES
    if path.endswith("/whoami"):
        return 200, WHOAMI
    if path.endswith("/gpu/availability"):
        return 200, AVAILABILITY
    if path == "/api/v1/devboxes":
        return (201, BOX) if method == "POST" else (200, {"items": [BOX]})
    return (200, DELETED) if method == "DELETE" else (200, BOX)


def _request_body(method: str, path: str) -> bytes | None:
    if method in ("PUT", "PATCH") or (method == "POST" and path == "/devboxes"):
        return json.dumps({"name": "atlas"}).encode()
    return b"" if method == "POST" else None


@pytest.mark.parametrize(("method", "path"), list(ROUTES))
async def test_each_route_answers_with_its_controller_call(
    jp_fetch: Fetch, controller: RecordingController, method: str, path: str
) -> None:
    forwarded = ROUTES[(method, path)]
    if forwarded is not None:
        controller.answers[forwarded] = _answer(*forwarded)
    response = await jp_fetch(
        "devboxes",
        "api",
        *path.strip("/").split("/"),
        method=method,
        body=_request_body(method, path),
        params={"timeout": "0"} if path == "/watch" else None,
    )
    if forwarded is None:
        assert response.code == 200
        assert {"version", "items", "kernels"} <= set(_json(response))
        return
    assert (controller.requests[0].method, controller.requests[0].path) == forwarded
    status, body = _answer(*forwarded)
    assert response.code == status
    answered = _json(response)
    if body is CAPABILITIES:
        # A controller without image profiles, the tunnel or cluster identity: the SDK
        # reads that as none on offer, boxes reached at their own address, and no cluster.
        assert answered == {
            **CAPABILITIES,
            "images": {"enabled": False, "profiles": []},
            "ssh_access": ["service"],
            "cluster": None,
        }
    elif body is WHOAMI:
        assert answered == WHOAMI
    elif body is AVAILABILITY:
        assert [(p["name"], p["available"]) for p in answered["profiles"]] == [("nvidia-l4", 1)]
    else:
        assert (answered["items"][0] if "items" in body else answered)["name"] == "atlas"


async def test_the_watch_view_is_the_view_model_with_wire_model_boxes(
    jp_fetch: Fetch, controller: RecordingController
) -> None:
    # A field this extension does not know is dropped, as on every other route.
    controller.answers[("GET", "/api/v1/devboxes")] = (200, {"items": [dict(BOX, newer=1)]})
    response = await jp_fetch("devboxes", "api", "watch", params={"after": "0", "timeout": "10"})
    view = WatchView.model_validate(_json(response))
    assert view.error is None
    assert view.availability is None
    assert view.items == [Devbox.model_validate(BOX)]
    assert "newer" not in _json(response)["items"][0]


@pytest.mark.parametrize(
    ("method", "path"),
    [(method, path) for path in PATHS for method in METHODS if (method, path) not in ROUTES],
)
async def test_other_methods_are_refused_before_the_controller(
    jp_fetch: Fetch, controller: RecordingController, method: str, path: str
) -> None:
    response = await jp_fetch(
        "devboxes",
        "api",
        *path.strip("/").split("/"),
        method=method,
        body=_request_body(method, path),
        raise_error=False,
    )
    assert response.code == 405
    assert _json(response) == {"detail": "Method Not Allowed"}
    assert controller.requests == []


@pytest.mark.parametrize("path", ["/devboxes/atlas/restart", "/devboxes/atlas/start/now"])
async def test_unknown_box_actions_are_not_found(
    jp_fetch: Fetch, controller: RecordingController, path: str
) -> None:
    response = await jp_fetch(
        "devboxes", "api", *path.strip("/").split("/"), method="POST", body=b"", raise_error=False
    )
    assert response.code == 404
    assert controller.requests == []


@pytest.mark.parametrize(("method", "path"), list(ROUTES))
async def test_every_route_refuses_unauthenticated_requests(
    http_server_client: Any,
    jp_base_url: str,
    controller: RecordingController,
    path: str,
    method: str,
) -> None:
    response = await http_server_client.fetch(
        jp_base_url.rstrip("/") + API_ROOT + path,
        method=method,
        body=b"{}" if method == "POST" else None,
        raise_error=False,
        follow_redirects=False,
    )
    assert response.code in (401, 403)
    assert SECRET not in response.body.decode()
    assert controller.requests == []


async def _login(http_server_client: Any, jp_base_url: str, token: str) -> dict[str, str]:
    """Log in like a browser does and return its cookies (session and _xsrf)."""
    cookies: dict[str, str] = {}

    def keep(response: HTTPResponse) -> None:
        for header in response.headers.get_list("Set-Cookie"):
            name, _, rest = header.partition("=")
            cookies[name.strip()] = rest.split(";", 1)[0]

    base = jp_base_url.rstrip("/")
    keep(await http_server_client.fetch(f"{base}/login", raise_error=False))
    assert "_xsrf" in cookies
    keep(
        await http_server_client.fetch(
            f"{base}/login",
            method="POST",
            body=f"password={token}&_xsrf={cookies['_xsrf']}",
            headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())},
            follow_redirects=False,
            raise_error=False,
        )
    )
    assert any(name.startswith("username-") for name in cookies), cookies
    return cookies


@pytest.mark.parametrize(("method", "path"), [(m, p) for m, p in ROUTES if m != "GET"])
async def test_mutations_need_the_xsrf_token_with_cookie_auth(
    http_server_client: Any,
    jp_base_url: str,
    jp_serverapp: Any,
    controller: RecordingController,
    path: str,
    method: str,
) -> None:
    cookies = await _login(http_server_client, jp_base_url, jp_serverapp.identity_provider.token)
    cookie_header = "; ".join(f"{k}={v}" for k, v in cookies.items())
    url = jp_base_url.rstrip("/") + API_ROOT + path
    body = json.dumps({"name": "atlas"}).encode() if method == "POST" else None

    refused = await http_server_client.fetch(
        url, method=method, body=body, headers={"Cookie": cookie_header}, raise_error=False
    )
    assert refused.code == 403
    assert controller.requests == []

    accepted = await http_server_client.fetch(
        url,
        method=method,
        body=body,
        headers={"Cookie": cookie_header, "X-XSRFToken": cookies["_xsrf"]},
        raise_error=False,
    )
    # The stand-in controller knows no box, so reaching it means a 404 from it.
    assert accepted.code == 404, accepted.body
    assert _json(accepted) == {"detail": "no such devbox"}
    assert len(controller.requests) == 1


async def test_reads_need_no_xsrf_token_with_cookie_auth(
    http_server_client: Any, jp_base_url: str, jp_serverapp: Any, controller: RecordingController
) -> None:
    controller.answers[("GET", "/api/v1/devboxes")] = (200, {"items": [BOX]})
    cookies = await _login(http_server_client, jp_base_url, jp_serverapp.identity_provider.token)
    response = await http_server_client.fetch(
        jp_base_url.rstrip("/") + f"{API_ROOT}/devboxes",
        headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())},
    )
    assert _json(response)["items"][0]["name"] == "atlas"


async def test_token_goes_to_the_controller_and_never_back(
    jp_fetch: Fetch, controller: RecordingController
) -> None:
    controller.answers[("GET", "/api/v1/devboxes")] = (200, {"items": [BOX]})
    controller.answers[("GET", "/api/v1/devboxes/atlas")] = (200, BOX)
    controller.answers[("GET", "/api/v1/capabilities")] = (
        200,
        {"gpu": {"enabled": False, "default_profile": None, "profiles": []}},
    )
    responses = [
        await jp_fetch("devboxes", "api", "devboxes"),
        await jp_fetch("devboxes", "api", "devboxes", "atlas"),
        await jp_fetch("devboxes", "api", "capabilities"),
        await jp_fetch("devboxes", "api", "devboxes", "ghost", method="DELETE", raise_error=False),
    ]
    for response in responses:
        assert SECRET not in response.body.decode()
        assert all(SECRET not in value for _, value in response.headers.get_all())
    assert [seen.authorization for seen in controller.requests] == [f"Bearer {SECRET}"] * 4


async def test_server_side_wait_is_passed_through(
    jp_fetch: Fetch, controller: RecordingController
) -> None:
    controller.answers[("GET", "/api/v1/devboxes/atlas")] = (200, BOX)
    response = await jp_fetch(
        "devboxes", "api", "devboxes", "atlas", params={"wait": "ready", "timeout": "7"}
    )
    assert _json(response)["message"] == BOX["message"]
    assert controller.requests[-1].query == {"wait": ["ready"], "timeout": ["7"]}


async def test_controller_errors_keep_status_and_detail(
    jp_fetch: Fetch, controller: RecordingController
) -> None:
    detail = [
        {
            "type": "value_error",
            "loc": ["body", "gpu", "profile"],
            "msg": "unknown GPU profile 'h100'; available: nvidia-l4",
        }
    ]
    controller.answers[("POST", "/api/v1/devboxes")] = (422, {"detail": detail})
    response = await jp_fetch(
        "devboxes",
        "api",
        "devboxes",
        method="POST",
        body=json.dumps({"name": "atlas", "gpu": {"profile": "h100"}}),
        raise_error=False,
    )
    assert response.code == 422
    assert _json(response) == {"detail": detail}


@pytest.mark.parametrize(
    ("parts", "kwargs", "loc"),
    [
        (
            ("devboxes",),
            {"method": "POST", "body": json.dumps({"name": "Not_Valid"})},
            ["body", "name"],
        ),
        (
            ("devboxes",),
            {"method": "POST", "body": json.dumps({"name": "ok", "privileged": True})},
            ["body", "privileged"],
        ),
        (("devboxes", "atlas"), {"params": {"wait": "forever"}}, ["query", "wait"]),
        (("devboxes", "-x-", "start"), {"method": "POST", "body": b""}, ["path", "name"]),
        (
            ("devboxes", "atlas"),
            {"method": "DELETE", "params": {"purge": "maybe"}},
            ["query", "purge"],
        ),
    ],
)
async def test_bad_input_is_refused_before_the_controller(
    jp_fetch: Fetch,
    controller: RecordingController,
    parts: tuple[str, ...],
    kwargs: dict[str, Any],
    loc: list[str],
) -> None:
    response = await jp_fetch("devboxes", "api", *parts, raise_error=False, **kwargs)
    assert response.code == 422
    assert [item["loc"] for item in _json(response)["detail"]] == [loc]
    assert controller.requests == []


# The watch takes no cluster: it carries every cluster a server serves.
@pytest.mark.parametrize(("method", "path"), [route for route in ROUTES if route[1] != "/watch"])
async def test_a_server_of_one_controller_takes_no_cluster(
    jp_fetch: Fetch, controller: RecordingController, method: str, path: str
) -> None:
    response = await jp_fetch(
        "devboxes",
        "api",
        *path.strip("/").split("/"),
        method=method,
        body=_request_body(method, path),
        params={"cluster": "lab-a"},
        raise_error=False,
    )
    assert response.code == 422
    [error] = _json(response)["detail"]
    assert error == {
        "type": "value_error",
        "loc": ["query", "cluster"],
        "msg": "this Jupyter server serves one controller: leave out cluster",
    }
    assert controller.requests == []


async def test_the_watch_of_one_controller_names_no_clusters(
    jp_fetch: Fetch, controller: RecordingController
) -> None:
    view = _json(await jp_fetch("devboxes", "api", "watch", params={"timeout": "0"}))
    assert view["clusters"] is None
    assert view["notes"] == []


class TestTokenFile:
    @pytest.fixture
    def token_file(self, tmp_path: Path) -> Path:
        path = tmp_path / "controller-token"
        path.write_text(SECRET + "\n")
        return path

    @pytest.fixture
    def extension_config(self, token_file: Path) -> dict[str, Any]:
        return {"token_file": str(token_file), "request_timeout": 5.0}

    async def test_a_rotated_token_is_used_without_restart(
        self, jp_fetch: Fetch, controller: RecordingController, token_file: Path
    ) -> None:
        controller.answers[("GET", "/api/v1/devboxes")] = (200, {"items": []})
        await jp_fetch("devboxes", "api", "devboxes")
        rotated = "rotated-token-abcdefghijklmnopqrstuvwxyz012345"
        token_file.write_text(rotated)
        await jp_fetch("devboxes", "api", "devboxes")
        assert [seen.authorization for seen in controller.requests] == [
            f"Bearer {SECRET}",
            f"Bearer {rotated}",
        ]

    async def test_an_unreadable_token_file_is_a_clear_503(
        self, jp_fetch: Fetch, controller: RecordingController, token_file: Path
    ) -> None:
        token_file.unlink()
        response = await jp_fetch("devboxes", "api", "devboxes", raise_error=False)
        assert response.code == 503
        assert "cannot read the token file" in _json(response)["detail"]
        assert controller.requests == []


HUB_TOKEN = "0123456789abcdef0123456789abcdef"


class TestHubToken:
    @pytest.fixture
    def extension_config(self, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", HUB_TOKEN)
        return {"hub_token": True, "request_timeout": 5.0}

    async def test_the_controller_is_sent_the_persons_hub_token(
        self, jp_fetch: Fetch, controller: RecordingController
    ) -> None:
        controller.answers[("GET", "/api/v1/devboxes")] = (200, {"items": []})
        response = await jp_fetch("devboxes", "api", "devboxes")
        assert [seen.authorization for seen in controller.requests] == [f"Bearer {HUB_TOKEN}"]
        assert HUB_TOKEN not in response.body.decode()


@pytest.mark.parametrize(
    ("environ", "config", "problem"),
    [
        (
            {},
            {},
            "hub_token is set but JUPYTERHUB_API_TOKEN is not: this server was not started by "
            "a JupyterHub",
        ),
        (
            {"JUPYTERHUB_API_TOKEN": HUB_TOKEN},
            {"token": SECRET},
            "hub_token presents this person's hub token: leave token and token_file empty",
        ),
    ],
)
def test_a_hub_token_that_cannot_be_had_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], config: dict[str, str], problem: str
) -> None:
    from devboxes_jupyter.app import DevboxesJupyterApp

    from devboxes_sdk.errors import ConfigurationError

    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    app = DevboxesJupyterApp(hub_token=True, **config)
    with pytest.raises(ConfigurationError) as caught:
        app.initialize_settings()
    assert str(caught.value) == problem


class TestNotConfigured:
    @pytest.fixture
    def jp_server_config(self) -> dict[str, Any]:
        return {"ServerApp": {"jpserver_extensions": {"devboxes_jupyter": True}}}

    async def test_missing_controller_url_is_a_clear_503(
        self, jp_fetch: Fetch, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.delenv("DEVBOX_URL", raising=False)
        monkeypatch.delenv("DEVBOX_TOKEN", raising=False)
        monkeypatch.setenv("DEVBOX_CONFIG", str(tmp_path / "absent.toml"))
        response = await jp_fetch("devboxes", "api", "capabilities", raise_error=False)
        assert response.code == 503
        assert _json(response)["detail"].startswith(
            "Devboxes is not configured on this Jupyter server: no Devboxes URL configured"
        )


class TestUnreachable:
    @pytest.fixture
    def jp_server_config(self) -> dict[str, Any]:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return {
            "ServerApp": {"jpserver_extensions": {"devboxes_jupyter": True}},
            "DevboxesJupyterApp": {
                "controller_url": f"http://127.0.0.1:{port}",
                "token": SECRET,
                "request_timeout": 2.0,
            },
        }

    async def test_an_unreachable_controller_is_503(self, jp_fetch: Fetch) -> None:
        response = await jp_fetch(
            "devboxes",
            "api",
            "devboxes",
            method="POST",
            body=json.dumps({"name": "atlas"}),
            raise_error=False,
        )
        assert response.code == 503
        assert "cannot reach the Devboxes API" in _json(response)["detail"]
        assert SECRET not in response.body.decode()


async def test_a_failed_kernel_start_is_dismissed_for_every_page_and_a_live_one_is_not(
    jp_fetch: Fetch, controller: RecordingController
) -> None:
    progress.REGISTRY.update("k-failed", "nb-ada-cpu", "", progress.FAILED, "no SSH key")
    progress.REGISTRY.update("k-live", "nb-ada-l4", "nvidia-l4", "waiting", "box nb-ada-l4")
    try:

        async def dismiss(kernel_id: str) -> HTTPResponse:
            return await jp_fetch(
                "devboxes", "api", "kernels", kernel_id, method="DELETE", raise_error=False
            )

        assert (await dismiss("k-live")).code == 404
        answer = await dismiss("k-failed")
        assert answer.code == 200
        assert _json(answer) == {"kernel_id": "k-failed", "dismissed": True}
        view = _json(await jp_fetch("devboxes", "api", "watch", params={"timeout": "0"}))
        assert [k["kernel_id"] for k in view["kernels"]] == ["k-live"]
        assert (await dismiss("k-failed")).code == 404
        # The record is the extension's own: the controller never hears of it.
        assert not [seen for seen in controller.requests if "kernel" in seen.path]
    finally:
        progress.REGISTRY.forget("k-failed")
        progress.REGISTRY.forget("k-live")


async def test_every_failed_kernel_start_is_dismissed_at_once_and_live_ones_stay(
    jp_fetch: Fetch, controller: RecordingController
) -> None:
    failed = ["k-clear-1", "k-clear-2"]
    for kernel_id in failed:
        progress.REGISTRY.update(kernel_id, f"nb-{kernel_id}", "", progress.FAILED, "no SSH key")
    progress.REGISTRY.update("k-clear-live", "nb-ada-l4", "nvidia-l4", "waiting", "box nb-ada-l4")
    try:
        answer = await jp_fetch("devboxes", "api", "kernels", method="DELETE")
        assert sorted(_json(answer)["dismissed"]) == failed
        view = _json(await jp_fetch("devboxes", "api", "watch", params={"timeout": "0"}))
        assert [k["kernel_id"] for k in view["kernels"]] == ["k-clear-live"]
        again = await jp_fetch("devboxes", "api", "kernels", method="DELETE")
        assert _json(again) == {"dismissed": []}
        assert not [seen for seen in controller.requests if "kernel" in seen.path]
    finally:
        for kernel_id in [*failed, "k-clear-live"]:
            progress.REGISTRY.forget(kernel_id)
