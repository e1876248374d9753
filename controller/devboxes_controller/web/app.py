"""The ASGI application: the API router and the dashboard as peers, and what wraps them.

Around the routes: a guard that refuses unauthenticated callers and oversized bodies
before any body is read, security headers and request metrics on every response, and
one error shape (``{"detail": ...}``) for every failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from devboxes_sdk.models import field_errors, normalize_name

from ..control.bookings import Desk
from ..control.lifecycle import Lifecycle
from ..control.ssh_keys import Keys
from ..k8s.cluster_id import ClusterId
from ..k8s.kube import ApiProblem, Invalid, NotFound
from ..placement import doctor
from ..state.bodies import Body, CapabilitiesBody, respond
from ..state.ended_sessions import EndedSessions
from ..state.metrics import METRICS
from ..state.store import BoxStore
from .api import (
    TITLE,
    VERSION,
    Admin,
    Caller,
    capabilities,
    contract,
    describe_settings,
    get_devbox,
    list_devboxes,
    router,
)
from .dashboard import mount_dashboard, set_session_cookie
from .identity.base import Identity, Verifier
from .identity.chooser import IDENTITY_STATE, authenticate
from .identity.cli_login import LOGIN_PATHS as CLI_LOGIN_PATHS
from .identity.cli_login import router as cli_login_router
from .ingest import MAX_REPORT_BYTES, RateLimiter, is_activity_route
from .ingest import router as ingest_router
from .paging import ListTokens
from .previews import CONNECT_SECONDS, PreviewHosts
from .previews import router as previews_router
from .probes import health_answer, ready_answer
from .readiness import Readiness
from .reads import ReadPool, Shared
from .tunnel import Tunnels
from .tunnel import router as tunnel_router
from .writes import WritePool

log = logging.getLogger(__name__)

API_CSP = b"default-src 'none'; frame-ancestors 'none'"
# The largest request this API takes is a create of a few hundred bytes.
MAX_BODY_BYTES = 8192


def _needs_identity(path: str) -> bool:
    # The activity route authenticates each box's agent itself, and refuses the operator.
    # The CLI's login redeems a code with its PKCE verifier, before it has a credential.
    if is_activity_route(path) or path in CLI_LOGIN_PATHS:
        return False
    return path.startswith("/api/") or path in ("/metrics", "/openapi.json")


def _body_limit(path: str, default: int) -> int:
    return MAX_REPORT_BYTES if is_activity_route(path) else default


class RequestGuard:
    """Refuses before reading a byte of the body: callers without credentials on protected
    routes (401), and bodies over the limit (413). The body of an accepted request is
    read here, within the limit, and handed on."""

    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if _needs_identity(scope["path"]):
            try:
                identity = await authenticate(request)
            except ApiProblem as refused:
                await _problem_response(refused)(scope, receive, send)
                return
            scope.setdefault("state", {})[IDENTITY_STATE] = identity
        limit = _body_limit(scope["path"], self.max_body)
        declared = request.headers.get("content-length", "0")
        if not declared.isdigit() or int(declared) > limit:
            await self._too_large(scope, receive, send, limit)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limit:
                await self._too_large(scope, receive, send, limit)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        problem = ApiProblem(413, f"request body too large: the limit is {limit} bytes")
        await _problem_response(problem)(scope, receive, send)


def _problem_response(err: ApiProblem) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """Every method some route serves at this path: the router's own 405 names only the
    methods of the first route that matched the path."""
    return [
        method
        for method in HTTP_METHODS
        if any(
            route.matches({**scope, "method": method})[0] == Match.FULL
            for route in app.router.routes
        )
    ]


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiProblem)
    async def problem(request: Request, err: ApiProblem) -> JSONResponse:
        return _problem_response(err)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        return _problem_response(Invalid(field_errors(err.errors())))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        headers = dict(err.headers or {})
        if err.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(app, request.scope))
        return JSONResponse({"detail": err.detail}, status_code=err.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("unexpected error", extra={"path": request.url.path})
        return JSONResponse({"detail": "internal error; see the controller log"}, status_code=500)


# Every response carries these; API responses are never cached by intermediaries.
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
API_HEADERS = (*SECURITY_HEADERS, (b"cache-control", b"no-store"))
CSP = b"content-security-policy"


class HeadersAndMetrics:
    """Security headers, a renewed session cookie and request metrics on every response.

    A plain ASGI wrapper around ``send``: Starlette's ``BaseHTTPMiddleware`` runs each
    request in a task group with memory streams, which cost more than the read routes.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The labelled children, found once: labels() locks and hashes on every call.
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._latencies: dict[tuple[str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        extra = API_HEADERS if scope["path"].startswith("/api/") else SECURITY_HEADERS
        replaced = {name for name, _ in extra}
        status: int | None = None

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [h for h in message.get("headers", ()) if h[0].lower() not in replaced]
                if not any(name.lower() == CSP for name, _ in headers):
                    headers.append((CSP, API_CSP))
                headers.extend(extra)
                renewed = scope.get("state", {}).get("session_cookie")
                if renewed is not None:
                    headers.extend(_session_cookie_headers(scope, renewed))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except BaseException:
            status = status or 500
            raise
        finally:
            if status is None:
                # Only a client that left mid-request gets no answer: not a server error.
                METRICS.disconnects.labels(scope["method"], _route(scope)).inc()
            else:
                self._observe(scope, status, time.perf_counter() - started)

    def _observe(self, scope: Scope, status: int, seconds: float) -> None:
        method = scope["method"]
        route = _route(scope)
        key = (method, route, status)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = METRICS.requests.labels(method, route, str(status))
        counter.inc()
        latency = self._latencies.get(key[:2])
        if latency is None:
            latency = self._latencies[key[:2]] = METRICS.latency.labels(method, route)
        latency.observe(seconds)


def _route(scope: Scope) -> str:
    return str(getattr(scope.get("route"), "path", "unmatched"))


def _session_cookie_headers(scope: Scope, value: str) -> list[tuple[bytes, bytes]]:
    carrier = Response()
    set_session_cookie(Request(scope), carrier, value)
    return [h for h in carrier.raw_headers if h[0] == b"set-cookie"]


def _get_path(endpoint: Callable[..., Any]) -> str:
    """The path of the router's GET route that ``endpoint`` serves."""
    return next(
        route.path
        for route in router.routes
        if isinstance(route, APIRoute)
        and route.endpoint is endpoint
        and "GET" in (route.methods or ())
    )


# The reads answered before routing, at the paths the router gives them.
CAPABILITIES_PATH = _get_path(capabilities)
LIST_PATH = _get_path(list_devboxes)
BOX_PATH = _get_path(get_devbox)


class ReadFastPath:
    """The reads clients poll, answered before routing.

    A GET of one box, of the list or of the capabilities, without a query string, is
    answered here from the bodies kept current by the watches (see ``bodies``): FastAPI's
    routing, dependency solving and response objects cost several times what the answer
    itself does. Anything else, and every failure (a bad name, an unknown box), goes on to
    the routes, which answer these paths the same way and document them.
    """

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self._state = api.state
        # The routes these paths belong to, so that metrics name them as the router would.
        self._routes = {
            route.path: route
            for route in router.routes
            if isinstance(route, APIRoute)
            and "GET" in (route.methods or ())
            and route.path in (CAPABILITIES_PATH, LIST_PATH, BOX_PATH)
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        identity = scope.get("state", {}).get(IDENTITY_STATE) if scope["type"] == "http" else None
        if (
            isinstance(identity, Identity)
            and scope["method"] == "GET"
            and not scope["query_string"]
        ):
            found = self._answer(scope["path"], identity.scope)
            if found is not None:
                route, answer = found
                scope["route"] = self._routes[route]
                await respond(Request(scope), answer)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _answer(self, path: str, owner: str | None) -> tuple[str, Body] | None:
        """The answer of a read without a query, for a caller who sees ``owner``'s boxes
        (every box when None)."""
        if path == CAPABILITIES_PATH:
            capabilities: CapabilitiesBody = self._state.capabilities
            return CAPABILITIES_PATH, capabilities.current()
        store: BoxStore = self._state.store
        if path == LIST_PATH:
            return LIST_PATH, store.list_body(owner)
        name = path.removeprefix(LIST_PATH + "/")
        if name == path or "/" in name:
            return None
        try:
            return BOX_PATH, store.get_body(normalize_name(name), owner)
        except (ValueError, NotFound):
            return None


def _install_middleware(app: FastAPI) -> None:
    # Innermost first: the fast path runs after authentication, and the guard's refusals
    # are counted and carry the security headers too. A preview's host is served before
    # any of them: it is the box's site, not the API.
    app.add_middleware(ReadFastPath, api=app)
    app.add_middleware(RequestGuard)
    app.add_middleware(HeadersAndMetrics)
    app.add_middleware(PreviewHosts, api=app)


def create_app(
    store: BoxStore,
    lifecycle: Lifecycle,
    token: str,
    readiness: Readiness,
    ended: EndedSessions,
    background: Callable[[], AsyncIterator[None]] | None = None,
    verifiers: Sequence[Verifier] = (),
    cluster: ClusterId | None = None,
) -> FastAPI:
    """The ASGI app. ``background`` starts and stops the watches and the reconciler;
    ``cluster`` holds the cluster's id once read (without it the capabilities give none)."""
    writes = WritePool(readiness.write_problem)
    reads = ReadPool(readiness.write_problem)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store.bind_loop(asyncio.get_running_loop())
        try:
            if background is None:
                yield
            else:
                async with asynccontextmanager(background)():
                    yield
        finally:
            writes.shutdown()
            reads.shutdown()
            await app.state.preview_client.aclose()

    app = FastAPI(
        title=TITLE,
        version=VERSION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.store = store
    app.state.lifecycle = lifecycle
    app.state.keys = Keys(
        lifecycle.api,
        store.settings.namespace,
        store.clock,
        store.settings.ssh.authorized_keys_secret,
    )
    app.state.bookings = Desk(lifecycle)
    app.state.token = token
    app.state.verifiers = tuple(verifiers)
    app.state.admin_groups = frozenset(store.settings.auth.admin_groups)
    app.state.list_tokens = ListTokens(token)
    app.state.writes = writes
    app.state.reads = reads
    app.state.doctor = Shared(reads, partial(doctor.examine, lifecycle.settings, lifecycle.api))
    app.state.capabilities = CapabilitiesBody(
        store.settings, (lambda: cluster.value) if cluster is not None else (lambda: None)
    )
    app.include_router(router)
    app.include_router(ingest_router)
    app.include_router(cli_login_router)
    app.state.tunnels = Tunnels(store.settings.connections)
    app.include_router(tunnel_router)
    app.include_router(previews_router)
    # Previews go to pods on the cluster network: never through an HTTP proxy of the
    # controller's environment.
    app.state.preview_client = httpx.AsyncClient(
        timeout=httpx.Timeout(None, connect=CONNECT_SECONDS), trust_env=False
    )
    app.state.activity_limiter = RateLimiter()
    mount_dashboard(app, store, ended)
    _install_handlers(app)
    _install_middleware(app)

    @app.get("/health", include_in_schema=False)
    async def health() -> JSONResponse:
        return health_answer()

    @app.get("/ready", include_in_schema=False)
    async def ready() -> JSONResponse:
        return ready_answer(readiness.problem())

    @app.get("/metrics", include_in_schema=False)
    async def metrics(_: Admin) -> Response:
        for state, count in store.counts().items():
            METRICS.boxes.labels(state).set(count)
        return Response(generate_latest(METRICS.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(_: Caller) -> JSONResponse:
        if app.openapi_schema is None:
            app.openapi_schema = describe_settings(contract(), store.settings)
        return JSONResponse(app.openapi_schema)

    return app
