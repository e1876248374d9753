"""Who may call the API: the operator bearer token, a dashboard session (the operator's, or
a person's who signed in through the OIDC issuer), or a person whose token an identity
provider (JupyterHub, an OIDC issuer) vouches for.

The operator's secrets are compared in constant time. A session may read freely; a mutation
made with a session must also carry the session's CSRF value in ``X-Devboxes-CSRF``.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from fastapi import Request

from ..box.ownership import OPERATOR
from ..k8s.kube import ApiProblem
from .people import Identity, Verifier
from .sessions import (
    COOKIE,
    CSRF_HEADER,
    SAFE_METHODS,
    SessionStore,
    csrf_matches,
    session_identity,
)

MIN_TOKEN_LENGTH = 32
SESSION_ENDED = "session expired or invalid; log in again"
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


OPERATOR_IDENTITY = Identity(user=OPERATOR, mode="operator", admin=True)


def with_admin_groups(identity: Identity, admin_groups: frozenset[str]) -> Identity:
    """A person in one of the operator's admin groups is an admin."""
    if admin_groups.isdisjoint(identity.groups):
        return identity
    return replace(identity, admin=True)


async def authenticate(request: Request) -> Identity:
    """Who the request speaks for, or 401 (403 for a session's mutation without its CSRF
    value, 503 when the identity provider that would vouch for a token cannot be asked).

    The operator token is checked first; any other bearer token is offered to each
    configured identity provider in turn.
    """
    state = request.app.state
    presented = bearer(request)
    if presented is not None:
        if token_matches(presented, state.token):
            return OPERATOR_IDENTITY
        verifiers: Sequence[Verifier] = getattr(state, "verifiers", ())
        for verifier in verifiers:
            identity = await verifier.identify(presented)
            if identity is None:
                continue
            if identity.user == OPERATOR:
                raise Unauthorized(f"the name '{OPERATOR}' is reserved for the operator token")
            return with_admin_groups(identity, getattr(state, "admin_groups", frozenset()))
        raise Unauthorized("invalid token")
    sessions: SessionStore | None = getattr(state, "sessions", None)
    cookie = request.cookies.get(COOKIE)
    if sessions is not None and cookie is not None:
        session = sessions.lookup(cookie)
        if session is None:
            raise Unauthorized(SESSION_ENDED)
        if session.reissued:
            # The headers middleware sends the cookie with its new last-use time.
            request.state.session_cookie = session.cookie
        if request.method not in SAFE_METHODS and not csrf_matches(
            session, request.headers.get(CSRF_HEADER)
        ):
            raise Forbidden(f"missing or wrong {CSRF_HEADER} header")
        return session_identity(session, getattr(state, "admin_groups", frozenset()))
    raise Unauthorized()


async def caller(request: Request) -> Identity:
    """FastAPI dependency: the identity the request guard established, else checked here."""
    identity = request.scope.get("state", {}).get(IDENTITY_STATE)
    return identity if isinstance(identity, Identity) else await authenticate(request)


def owner_scope(identity: Identity, owner: str | None) -> str | None:
    """Whose boxes a listing asked for ``owner``'s shows: an admin may name anyone, others
    only themselves; without ``owner``, what the caller sees."""
    if owner is None:
        return identity.scope
    if not identity.admin and owner != identity.user:
        raise Forbidden("only admins may list another person's boxes")
    return owner


async def admin(request: Request) -> Identity:
    """FastAPI dependency: an admin, else 403."""
    identity = await caller(request)
    if not identity.admin:
        raise Forbidden("only admins may do this")
    return identity
