"""Log in through the controller's OpenID Connect issuer: the authorization code flow with
PKCE and a loopback redirect (RFC 8252), on the routes the Devboxes CLI uses; or, where no
browser runs on this machine (an SSH session, a JupyterHub terminal), the device flow
(RFC 8628), through the controller too.

The browser visits ``<url>/auth/cli/authorize``, which sends it on to the issuer; after
the person logs in there, the issuer sends the browser back to a one-shot HTTP server on
127.0.0.1 with a code. The code and the PKCE verifier, which never left this process, are
redeemed at ``<url>/api/v1/auth/cli/token`` for an access token the API accepts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import urlsplit

import requests

from devboxes_sdk._transport import _USER_AGENT, _describe_connection_error, _error, decode
from devboxes_sdk.errors import ApiError, DevboxesError, Unavailable
from devboxes_sdk.models import API_PREFIX

AUTHORIZE_PATH = "/auth/cli/authorize"
TOKEN_PATH = f"{API_PREFIX}/auth/cli/token"
DEVICE_PATH = f"{API_PREFIX}/auth/cli/device"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
CALLBACK_PATH = "/callback"
# The Devboxes CLI's client name; the controller asks its issuer as its own client.
CLIENT_ID = "devbox-cli"
DEFAULT_LOGIN_TIMEOUT = 300.0
_PAGE = (
    "<!doctype html><meta charset=utf-8><title>devbox login</title>"
    "<p>{message} You can close this window.</p>"
)


class LoginFailed(DevboxesError):
    """The browser login did not end with a code: refused, abandoned or malformed."""


@dataclass(frozen=True)
class LoginResult:
    token: str
    user: str
    groups: tuple[str, ...]


@dataclass
class _Callback:
    state: str
    code: str | None = None
    problem: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _handler(callback: _Callback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path != CALLBACK_PATH:
                self._answer(404, "Nothing here.")
                return
            query = urllib.parse.parse_qs(parts.query)
            state = query.get("state", [""])[0]
            if callback.done.is_set():
                self._answer(409, "This login has already ended.")
                return
            if not hmac.compare_digest(state.encode(), callback.state.encode()):
                # Another page's redirect, or a forged one: not ours to end the login with.
                self._answer(400, "This answer belongs to another login.")
                return
            if "error" in query:
                reason = query["error"][0][:100]
                callback.problem = f"the issuer refused the login ({reason})"
                self._answer(200, "The login was refused.")
            elif query.get("code", [""])[0]:
                callback.code = query["code"][0]
                self._answer(200, "You are logged in to Devboxes.")
            else:
                callback.problem = "the issuer's answer had no code"
                self._answer(400, "The answer had no code.")
            callback.done.set()

        def _answer(self, status: int, message: str) -> None:
            page = _PAGE.format(message=message).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Referrer-Policy", "no-referrer")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: Any) -> None:
            # The request line holds the code: never printed.
            return

    return Handler


def login(
    url: str,
    show: Callable[[str], None],
    open_browser: Callable[[str], object] | None = None,
    timeout: float = DEFAULT_LOGIN_TIMEOUT,
) -> LoginResult:
    """Log in to the controller at ``url`` through its issuer. ``show`` receives the URL
    to open (and is all there is without ``open_browser``)."""
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    callback = _Callback(state=secrets.token_urlsafe(32))
    server = HTTPServer(("127.0.0.1", 0), _handler(callback))
    redirect_uri = f"http://127.0.0.1:{server.server_address[1]}{CALLBACK_PATH}"
    query = urllib.parse.urlencode(
        {
            "response_type": "code",
            "client_id": CLIENT_ID,
            "redirect_uri": redirect_uri,
            "state": callback.state,
            "code_challenge": challenge.rstrip(b"=").decode(),
            "code_challenge_method": "S256",
        }
    )
    serving = threading.Thread(target=server.serve_forever, name="devbox-login", daemon=True)
    serving.start()
    try:
        authorize_url = f"{url}{AUTHORIZE_PATH}?{query}"
        show(authorize_url)
        if open_browser is not None:
            open_browser(authorize_url)
        if not callback.done.wait(timeout):
            raise LoginFailed(f"no login within {timeout:g} seconds; run devbox login again")
    finally:
        server.shutdown()
        server.server_close()
    if callback.code is None:
        raise LoginFailed(callback.problem or "the login ended without a code")
    return _redeem(url, callback.code, verifier, redirect_uri)


def device_login(url: str, show: Callable[[str, str, str | None], None]) -> LoginResult:
    """Log in by the device flow (RFC 8628): ``show`` receives the page to open, anywhere,
    the code to enter there and, when the issuer has one, a page with the code filled in.
    Polls until the person approves, refuses, or the code expires."""
    started = _answer(_post(url, DEVICE_PATH, {"client_id": CLIENT_ID}))
    try:
        device_code, page = str(started["device_code"]), str(started["verification_uri"])
        user_code = str(started["user_code"])
        expires_in, interval = float(started["expires_in"]), float(started.get("interval", 5))
    except (KeyError, TypeError, ValueError):
        raise ApiError(200, "the device login answer lacks a code or a page to open") from None
    # Never faster than once a second, whatever the answer says.
    interval = max(interval, 1.0)
    filled_in = started.get("verification_uri_complete")
    show(page, user_code, filled_in if isinstance(filled_in, str) else None)
    deadline = time.monotonic() + expires_in
    body = {"grant_type": DEVICE_GRANT, "device_code": device_code, "client_id": CLIENT_ID}
    while time.monotonic() + interval < deadline:
        time.sleep(interval)
        response = _post(url, TOKEN_PATH, body)
        if response.status_code == 202:
            if _answer(response).get("status") == "slow_down":
                interval += 5
            continue
        return _result(_answer(response))
    raise LoginFailed(
        f"the code was not approved within {expires_in:g} seconds; run devbox login again"
    )


def _redeem(url: str, code: str, verifier: str, redirect_uri: str) -> LoginResult:
    body = {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "client_id": CLIENT_ID,
        "redirect_uri": redirect_uri,
    }
    return _result(_answer(_post(url, TOKEN_PATH, body)))


def _post(url: str, path: str, body: dict[str, str]) -> requests.Response:
    try:
        response = requests.post(
            url + path,
            json=body,
            headers={"Accept": "application/json", "User-Agent": _USER_AGENT},
            timeout=30,
            allow_redirects=False,
        )
    except requests.RequestException as error:
        reason = _describe_connection_error(error, urlsplit(url).hostname or "")
        raise Unavailable(None, f"cannot reach the Devboxes API at {url}: {reason}") from None
    if response.status_code not in (200, 202):
        raise _error(url, response, path)
    return response


def _answer(response: requests.Response) -> dict[str, Any]:
    answer = decode(response)
    if not isinstance(answer, dict):
        raise ApiError(response.status_code, "the login answer is not a JSON object")
    return answer


def _result(answer: dict[str, Any]) -> LoginResult:
    token, user, groups = (answer.get(k) for k in ("access_token", "user", "groups"))
    if not isinstance(token, str) or not isinstance(user, str) or not isinstance(groups, list):
        raise ApiError(200, "the login answer lacks access_token, user or groups")
    return LoginResult(token=token, user=user, groups=tuple(str(g) for g in groups))
