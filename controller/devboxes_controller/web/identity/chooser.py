"""Which identity provider speaks for a request: the operator token, a dashboard session
(the operator's, or a person's who signed in through the OIDC issuer), or a person whose
token an identity provider (JupyterHub, an OIDC issuer) vouches for.

A session may read freely; a mutation made with a session must also carry the session's
CSRF value in ``X-Devboxes-CSRF``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import Request
from starlette.datastructures import State
from starlette.requests import HTTPConnection

from ...box.ownership import OPERATOR
from .base import Forbidden, Identity, Unauthorized, Verifier, bearer, with_admin_groups
from .operator_token import OPERATOR_IDENTITY, token_matches
from .sessions import (
    COOKIE,
    CSRF_HEADER,
    SAFE_METHODS,
    SESSION_ENDED,
    SessionStore,
    csrf_matches,
    session_identity,
)

# Where the request guard leaves the caller's identity in the request's state, so that
# the routes' dependency does not authenticate the same request twice.
IDENTITY_STATE = "devboxes_identity"


async def authenticate(request: Request) -> Identity:
    """Who the request speaks for, or 401 (403 for a session's mutation without its CSRF
    value, 503 when the identity provider that would vouch for a token cannot be asked).

    The operator token is checked first; any other bearer token is offered to each
    configured identity provider in turn.
    """
    state = request.app.state
    presented = bearer(request)
    if presented is not None:
        return await _token_identity(state, presented)
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


async def _token_identity(state: State, presented: str) -> Identity:
    """Who a bearer token speaks for: the operator, else the first identity provider that
    vouches for it; 401 when none does."""
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


async def authenticate_token(connection: HTTPConnection) -> Identity:
    """Who a connection that carries a bearer token speaks for. A browser session is not
    enough: a WebSocket carries no CSRF value, and any site's page could open one to the
    controller with the session's cookie."""
    presented = bearer(connection)
    if presented is None:
        raise Unauthorized("a bearer token is required (Authorization: Bearer ...)")
    return await _token_identity(connection.app.state, presented)


async def caller(request: Request) -> Identity:
    """FastAPI dependency: the identity the request guard established, else checked here."""
    identity = request.scope.get("state", {}).get(IDENTITY_STATE)
    return identity if isinstance(identity, Identity) else await authenticate(request)


async def admin(request: Request) -> Identity:
    """FastAPI dependency: an admin, else 403."""
    identity = await caller(request)
    if not identity.admin:
        raise Forbidden("only admins may do this")
    return identity
