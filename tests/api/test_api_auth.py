"""Who may call the API, and what every response carries regardless of who asked."""

from __future__ import annotations

import re
import secrets
from typing import Any

import pytest
import requests
from devboxes_testbed.controller import Controller
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from devboxes_sdk.models import ErrorBody
from devboxes_sdk.tunnel import tunnel_url

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


@pytest.fixture(scope="module")
def openapi(controller: Controller) -> dict[str, Any]:
    response = requests.get(
        f"{controller.url}/openapi.json", headers=controller.headers(), timeout=10
    )
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


def operations(openapi: dict[str, Any]) -> list[tuple[str, str]]:
    """Every documented operation as (METHOD, concrete path), path parameters filled in."""
    found = []
    for template, item in openapi["paths"].items():
        for method in item:
            found.append((method.upper(), re.sub(r"\{[^}]+\}", "atlas", template)))
    return found


def refusals(controller: Controller) -> list[tuple[str, dict[str, str]]]:
    wrong = secrets.token_urlsafe(32)
    return [
        ("no Authorization header", {}),
        ("a wrong token", {"Authorization": f"Bearer {wrong}"}),
        (
            "the token with one character changed",
            {
                "Authorization": f"Bearer {controller.token[:-1]}"
                f"{'A' if controller.token[-1] != 'A' else 'B'}"
            },
        ),
        ("the right token under another scheme", {"Authorization": f"Basic {controller.token}"}),
        ("an empty bearer", {"Authorization": "Bearer "}),
    ]


def assert_refused(response: requests.Response, why: str) -> None:
    assert response.status_code == 401, f"{why}: {response.status_code} {response.text}"
    assert response.headers.get("WWW-Authenticate") == "Bearer", why
    assert isinstance(ErrorBody.model_validate_json(response.content).detail, str)


def test_every_documented_route_refuses_without_the_token(
    controller: Controller, openapi: dict[str, Any]
) -> None:
    found = operations(openapi)
    assert len(found) >= 8, "the OpenAPI document lists fewer operations than the contract"
    assert all(path.startswith("/api/v1/") for _, path in found)
    for method, path in found:
        for why, headers in refusals(controller):
            response = requests.request(
                method,
                f"{controller.url}{path}",
                headers=headers,
                json={"name": "atlas"},
                timeout=10,
            )
            assert_refused(response, f"{method} {path} with {why}")
            assert response.headers.get("Cache-Control") == "no-store"


def test_the_tunnel_refuses_without_the_token(controller: Controller) -> None:
    """The WebSocket route outside the OpenAPI document: refused before the upgrade, with
    the same 401 as every route, and a dashboard session's cookie is not enough."""
    url = tunnel_url(controller.url, "atlas")
    cookie = {"Cookie": "devboxes_session=anything"}
    for why, headers in [*refusals(controller), ("a session cookie", cookie)]:
        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers=headers, proxy=None, open_timeout=10).close()
        response = refused.value.response
        assert response.status_code == 401, f"{why}: {response.status_code}"
        assert response.headers.get("WWW-Authenticate") == "Bearer", why
        assert isinstance(ErrorBody.model_validate_json(response.body or b"").detail, str)


def test_refusal_comes_before_validation(controller: Controller) -> None:
    # Without a token, nothing about the request is judged: not its query, not its body.
    base = controller.url
    assert_refused(
        requests.get(
            f"{base}/api/v1/devboxes/Bad_Name",
            params={"wait": "ready", "timeout": "999"},
            timeout=10,
        ),
        "invalid query",
    )
    assert_refused(
        requests.post(f"{base}/api/v1/devboxes", json={"foo": 1}, timeout=10), "invalid body"
    )
    assert_refused(
        requests.post(
            f"{base}/api/v1/devboxes",
            data=b"{not json",
            headers={"Content-Type": "application/json"},
            timeout=10,
        ),
        "malformed JSON",
    )


@pytest.mark.parametrize("path", ["/metrics", "/openapi.json"])
def test_metrics_and_openapi_need_the_token(controller: Controller, path: str) -> None:
    for why, headers in refusals(controller):
        assert_refused(
            requests.get(f"{controller.url}{path}", headers=headers, timeout=10),
            f"{path} with {why}",
        )
    allowed = requests.get(f"{controller.url}{path}", headers=controller.headers(), timeout=10)
    assert allowed.status_code == 200


def test_metrics_expose_the_request_counters(controller: Controller) -> None:
    requests.get(f"{controller.url}/api/v1/whoami", headers=controller.headers(), timeout=10)
    text = requests.get(f"{controller.url}/metrics", headers=controller.headers(), timeout=10).text
    assert re.search(
        r'devboxes_http_requests_total\{method="GET",route="/api/v1/whoami",'
        r'status="200"\} [1-9]',
        text,
    ), text
    assert "devboxes_boxes{" in text


@pytest.mark.parametrize("path", ["/health", "/ready"])
def test_health_and_ready_are_open(controller: Controller, path: str) -> None:
    response = requests.get(f"{controller.url}{path}", timeout=10)
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("path", "authenticated"),
    [
        ("/api/v1/whoami", True),
        ("/api/v1/whoami", False),
        ("/api/v1/devboxes/ghost", True),
        ("/api/v1/nowhere", True),
        ("/health", False),
        ("/ready", False),
        ("/metrics", True),
        ("/openapi.json", True),
        ("/nowhere", False),
    ],
)
def test_security_headers_on_every_response(
    controller: Controller, path: str, authenticated: bool
) -> None:
    headers = controller.headers() if authenticated else {}
    response = requests.get(f"{controller.url}{path}", headers=headers, timeout=10)
    for header, value in SECURITY_HEADERS.items():
        assert response.headers.get(header) == value, (path, header)
    csp = response.headers.get("Content-Security-Policy", "")
    assert "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    if path.startswith("/api/"):
        assert response.headers.get("Cache-Control") == "no-store", path


def test_the_token_never_appears_in_responses_or_the_log(controller: Controller) -> None:
    base, token = controller.url, controller.token
    authorized = controller.headers()
    bodies = [
        requests.get(f"{base}/openapi.json", headers=authorized, timeout=10),
        requests.get(f"{base}/metrics", headers=authorized, timeout=10),
        requests.get(f"{base}/api/v1/whoami", headers=authorized, timeout=10),
        requests.get(f"{base}/api/v1/capabilities", headers=authorized, timeout=10),
        requests.get(f"{base}/api/v1/devboxes", headers=authorized, timeout=10),
        requests.get(f"{base}/api/v1/devboxes/{token[:40]}", headers=authorized, timeout=10),
        requests.post(
            f"{base}/api/v1/devboxes",
            headers=authorized,
            json={"name": "x", "ttl_hours": token},
            timeout=10,
        ),
        requests.get(
            f"{base}/api/v1/whoami", headers={"Authorization": f"Basic {token}"}, timeout=10
        ),
        requests.get(
            f"{base}/api/v1/whoami", headers={"Authorization": f"Bearer {token}x"}, timeout=10
        ),
        requests.get(f"{base}/api/v1/whoami", params={"token": token}, timeout=10),
    ]
    for response in bodies:
        assert token not in response.text, f"{response.request.method} {response.url}"
        assert token not in str(response.headers)
    # Not even a request that carried the token in its URL may put it in the log.
    log = controller.log.read_text(errors="replace")
    assert log, "the controller log is empty: nothing was checked"
    assert token not in log
