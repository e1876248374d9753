"""Requests with a token of the OpenID provider, through `devboxes-controller serve` as an
operator starts it: the settings' issuer is trusted, and every refusal is a 401 or a 503
with the reason, never a 500."""

from __future__ import annotations

import base64
import json
import socket
from http.server import HTTPServer
from pathlib import Path
from typing import Any

import httpx
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from support import JsonHandler, StartController, serving, wait_for


def _oidc(settings: dict[str, Any], issuer_url: str) -> dict[str, Any]:
    settings["auth"] = {
        "adminGroups": ["gpu-admins"],
        "oidc": {"issuer": issuer_url, "audience": CLI_CLIENT_ID},
    }
    return settings


def _whoami(process: Controller, token: str) -> httpx.Response:
    return httpx.get(
        f"{process.url}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def _refused(answer: httpx.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    detail: str = answer.json()["detail"]
    return detail


def _changed(segment: str, **fields: Any) -> str:
    decoded = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    return (
        base64.urlsafe_b64encode(json.dumps({**decoded, **fields}).encode()).rstrip(b"=").decode()
    )


def _with_payload(token: str, **claims: Any) -> str:
    """The token with some claims changed and its signature kept: signed by nobody."""
    header, payload, signature = token.split(".")
    return f"{header}.{_changed(payload, **claims)}.{signature}"


def _with_header(token: str, **fields: Any) -> str:
    header, payload, signature = token.split(".")
    return f"{_changed(header, **fields)}.{payload}.{signature}"


def test_the_issuers_people_are_who_their_tokens_name(
    start_controller: StartController, issuer: Issuer, namespace: str
) -> None:
    process = start_controller(_oidc(example_settings(namespace), issuer.url))
    alice = _whoami(process, issuer.token_for("alice"))
    assert alice.status_code == 200, alice.text
    assert alice.json() == {"user": "alice", "mode": "oidc", "groups": ["ml"], "admin": False}
    olivia = _whoami(process, issuer.token_for("olivia"))
    assert olivia.json() == {
        "user": "olivia",
        "mode": "oidc",
        "groups": ["gpu-admins"],
        "admin": True,
    }
    # The operator token still works beside them.
    assert httpx.get(f"{process.url}/api/v1/whoami", headers=process.headers(), timeout=30).json()[
        "admin"
    ]


def test_refused_tokens_are_401s_that_say_why(
    start_controller: StartController, issuer: Issuer, namespace: str, tmp_path: Path
) -> None:
    # A provider whose tokens expired before they were issued: an old token, as it were.
    with Issuer(tmp_path / "stale", lifetime="-5m") as stale:
        process = start_controller(_oidc(example_settings(namespace), stale.url))
        expired = stale.token_for("alice")
        header, payload, _ = expired.split(".")
        *_, other_signature = stale.token_for("bob").split(".")
        cases = {
            expired: "the token has expired; log in again",
            f"{header}.{payload}.{other_signature}": (
                "the token's signature does not match the issuer's key"
            ),
            issuer.token_for("alice"): (
                f"the token was issued by {issuer.url!r}, not by the trusted issuer {stale.url!r}"
            ),
            _with_payload(expired, iss=["a", "list"]): (
                f"the token was issued by ['a', 'list'], not by the trusted issuer {stale.url!r}"
            ),
            _with_header(expired, alg="ES256"): (
                "the token is not valid: Token algorithm 'ES256' does not match the key's "
                "algorithm 'RS256'"
            ),
            "not-a-token-anyone-issued": "invalid token",
        }
        for token, reason in cases.items():
            answer = _whoami(process, token)
            assert _refused(answer, 401) == reason
            assert answer.headers["www-authenticate"] == "Bearer"
            for part in token.split("."):
                assert part not in answer.text


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class _Discovery(JsonHandler):
    """An issuer whose discovery document answers, but whose key set cannot be fetched."""

    def do_GET(self) -> None:
        if self.path != "/.well-known/openid-configuration":
            self.send_error(404)
            return
        assert isinstance(self.server, HTTPServer)
        issuer = f"http://127.0.0.1:{self.server.server_port}"
        self.send_json(
            200, {"issuer": issuer, "jwks_uri": f"http://127.0.0.1:{_closed_port()}/keys"}
        )


def test_an_issuer_whose_keys_cannot_be_fetched_is_a_503(
    start_controller: StartController, issuer: Issuer, namespace: str
) -> None:
    with serving(HTTPServer(("127.0.0.1", 0), _Discovery)) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        process = start_controller(_oidc(example_settings(namespace), url))
        token = _with_payload(issuer.token_for("alice"), iss=url)
        answer = _whoami(process, token)
        assert _refused(answer, 503).startswith(f"the OIDC issuer {url} cannot be reached")
        assert answer.headers["retry-after"] == "5"


def test_an_issuer_that_is_down_is_a_503_until_it_is_back(
    start_controller: StartController, namespace: str, tmp_path: Path
) -> None:
    with Issuer(tmp_path / "issuer") as provider:
        process = start_controller(_oidc(example_settings(namespace), provider.url))
        token = provider.token_for("bob")
        provider.stop()
        answer = _whoami(process, token)
        assert _refused(answer, 503) == (
            f"the OIDC issuer {provider.url} cannot be reached (ConnectError); try again later"
        )
        provider.start()
        # Back on the same URL with a new key: its new tokens are accepted once the
        # controller asks it again, after a backoff of 1 s from the failure.
        token = provider.token_for("bob")
        answers: list[httpx.Response] = []

        def back() -> bool:
            """the controller accepts the new token"""
            answers.append(_whoami(process, token))
            return answers[-1].status_code != 503

        wait_for(back, timeout=60, interval=0.5)
        assert (answers[-1].status_code, answers[-1].json()["user"]) == (200, "bob")
