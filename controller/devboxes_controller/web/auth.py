"""Who may call the API: the operator bearer token, or a dashboard session.

Both secrets are compared in constant time. A session may read freely; a mutation made
with a session must also carry the session's CSRF value in ``X-Devboxes-CSRF``.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from fastapi import Request

from ..k8s.kube import ApiProblem
from .sessions import COOKIE, CSRF_HEADER, SAFE_METHODS, SessionStore, csrf_matches

MIN_TOKEN_LENGTH = 32
OPERATOR = "operator"
# Where the request guard leaves the caller's identity in the request's state, so that
# the routes' dependency does not authenticate the same request twice.
IDENTITY_STATE = "devboxes_identity"


class Unauthorized(ApiProblem):
    def __init__(self, detail: str = "authentication required") -> None:
        super().__init__(401, detail, {"WWW-Authenticate": "Bearer"})


class Forbidden(ApiProblem):
    def __init__(self, detail: str) -> None:
        super().__init__(403, detail)


class TokenError(Exception):
    """The operator token is missing or too weak; the controller refuses to start."""


def load_token(token_file: Path | None, environ: dict[str, str] | None = None) -> str:
    environ = dict(os.environ) if environ is None else environ
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as err:
            raise TokenError(f"cannot read the token file {token_file}: {err.strerror}") from None
    else:
        token = environ.get("DEVBOXES_TOKEN", "").strip()
        if not token:
            raise TokenError("no operator token: set DEVBOXES_TOKEN or pass --token-file")
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokenError(f"the operator token must be at least {MIN_TOKEN_LENGTH} characters")
    return token


def token_matches(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def require_operator(request: Request) -> str:
    """FastAPI dependency: the caller's identity, or 401."""
    expected: str = request.app.state.token
    presented = bearer(request)
    if presented is not None:
        if token_matches(presented, expected):
            return OPERATOR
        raise Unauthorized("invalid token")
    sessions: SessionStore | None = getattr(request.app.state, "sessions", None)
    cookie = request.cookies.get(COOKIE)
    if sessions is not None and cookie is not None:
        session = sessions.lookup(cookie)
        if session is None:
            raise Unauthorized("session expired or invalid; log in again")
        if session.reissued:
            # The headers middleware sends the cookie with its new last-use time.
            request.state.session_cookie = session.cookie
        if request.method not in SAFE_METHODS and not csrf_matches(
            session, request.headers.get(CSRF_HEADER)
        ):
            raise Forbidden(f"missing or wrong {CSRF_HEADER} header")
        return OPERATOR
    raise Unauthorized()


async def operator(request: Request) -> str:
    """FastAPI dependency: the identity the request guard established, else checked here.

    Async on purpose: FastAPI runs a plain function dependency on a worker thread, a
    thread handoff per request for what is a dictionary lookup.
    """
    identity = request.scope.get("state", {}).get(IDENTITY_STATE)
    return str(identity) if identity is not None else require_operator(request)
