"""Web previews: the ports image profiles declare, served through the controller.

A box's port is opened from the dashboard at ``/dashboard/devboxes/{name}/ports/{port}/``
(the box's owner or an admin, signed in). What the box serves is its owner's content, so
it never runs on the dashboard's origin, where its scripts could act with the viewer's
session: each box's port has an origin of its own, ``{port}-{name}.<domain>``
(``connections.previewUrl``), that the controller also serves. The dashboard hands the
browser over with a code good for a minute, posted (never in a URL) to the preview's
origin, which answers with a cookie of its own, good for that box's port only and for
no longer than the session. Requests on that origin are then piped to the box pod's
port, HTTP and WebSocket alike.

The preview cookie is taken only from the preview's own pages and from navigations: a
request another site (another box's preview included) makes the browser send is refused,
and so is a WebSocket opened from another origin.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import httpx
import websockets
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState
from websockets.asyncio.client import ClientConnection

from devboxes_sdk.models import PREVIEW_PATH, DevboxState, normalize_name

from ..box import naming, status
from ..config.previews import PreviewOrigins
from ..k8s.kube import NotFound
from ..state.metrics import METRICS
from ..state.store import BoxStore
from .identity.sessions import (
    COOKIE,
    PREVIEW_CODE,
    PREVIEW_COOKIE,
    PREVIEW_PASS,
    PreviewGrant,
    SessionStore,
    person_identity,
    session_identity,
)

log = logging.getLogger(__name__)

OPEN_PATH = "/.devboxes/open"
MAX_FORM_BYTES = 4096
# Dialling a ready pod takes milliseconds; reading its answer may take as long as the
# application does, so only the connection is bounded.
CONNECT_SECONDS = 5.0
# Connection-level headers, which one hop must not pass on (RFC 9110, 7.6.1).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# The pages this module answers itself hold no script, style or image.
PLAIN_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
NOT_SIGNED_IN = (
    "This browser is not signed in to this preview. Open it from the dashboard (the box's "
    "port links), which signs it in for this box and port."
)

router = APIRouter(include_in_schema=False)


def _plain_page(title: str, message: str, status_code: int) -> HTMLResponse:
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)} · Devboxes</title></head>"
        f"<body><h1>{html.escape(title)}</h1><p>{html.escape(message)}</p></body></html>"
    )
    return HTMLResponse(
        body,
        status_code,
        headers={"Content-Security-Policy": PLAIN_CSP, "Cache-Control": "no-store"},
    )


def declared_ports(store: BoxStore, name: str, owner: str | None) -> tuple[DevboxState, list[int]]:
    """The box's state and the TCP ports its image profile declares; NotFound when the
    caller may not see the box."""
    box = store.get(name, owner)
    declared = box.image.ports if box.image is not None else []
    ports = [port.container_port for port in declared if port.protocol == "TCP"]
    return box.state, ports


def _refusal(store: BoxStore, name: str, port: int, owner: str | None) -> HTMLResponse | None:
    """Why the caller cannot see the box's port now, as a page; None when they can."""
    try:
        state, ports = declared_ports(store, name, owner)
    except NotFound:
        return _plain_page("Not found", f"devbox '{name}' not found", 404)
    if port not in ports:
        offered = ", ".join(map(str, ports)) or "none"
        return _plain_page(
            "Not found",
            f"devbox '{name}' declares no port {port} (its image profile declares: {offered})",
            404,
        )
    if state is not DevboxState.READY:
        return _plain_page(
            "Not ready", f"devbox '{name}' is {state.value}; open the preview once it is ready", 409
        )
    return None


@router.get(PREVIEW_PATH)
def open_preview(request: Request, name: str, port: str) -> Response:
    """Hand a signed-in browser over to the preview's own origin."""
    sessions: SessionStore = request.app.state.sessions
    session = sessions.lookup(request.cookies.get(COOKIE))
    if session is None:
        return RedirectResponse(f"/dashboard/login?next={request.url.path}", status_code=303)
    try:
        name = normalize_name(name)
    except ValueError as err:
        return _plain_page("Not found", str(err), 404)
    if not port.isdigit() or not 0 < int(port) < 65536:
        return _plain_page("Not found", f"{port!r} is not a port (1-65535)", 404)
    store: BoxStore = request.app.state.store
    origins = store.settings.connections.previews
    identity = session_identity(session, request.app.state.admin_groups)
    refused = _refusal(store, name, int(port), identity.scope)
    if refused is not None:
        return refused
    if origins is None:
        return _plain_page(
            "No previews here",
            "This controller serves no web previews (connections.previewUrl is not set). "
            f"Reach the port from your machine instead: devbox port-forward {name} {port}",
            404,
        )
    grant = PreviewGrant(name, int(port), session.created_ms, session.person)
    target = origins.origin(name, int(port)) + OPEN_PATH
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>Opening {html.escape(name)}:{port} · Devboxes</title>"
        '<script src="/dashboard/static/open_preview.js" defer></script></head><body>'
        f'<form id="open-preview" method="post" action="{html.escape(target, quote=True)}">'
        f'<input type="hidden" name="code" '
        f'value="{html.escape(sessions.sign_preview(grant, PREVIEW_CODE), quote=True)}">'
        f"<p>Opening port {port} of {html.escape(name)}…</p>"
        '<button type="submit">Open the preview</button></form></body></html>'
    )
    csp = (
        f"default-src 'none'; script-src 'self'; form-action {origins.origin(name, int(port))}; "
        "base-uri 'none'; frame-ancestors 'none'"
    )
    return HTMLResponse(page, headers={"Content-Security-Policy": csp, "Cache-Control": "no-store"})


class PreviewHosts:
    """Outermost: a request whose ``Host`` is a preview's is served here, with nothing of
    the API's (its headers, body limit or routes); every other goes on."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self._state = api.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        store: BoxStore = self._state.store
        origins = store.settings.connections.previews
        target = None
        if origins is not None and scope["type"] in ("http", "websocket"):
            target = origins.box_of(Headers(scope=scope).get("host", ""))
        if target is None or origins is None:
            await self.app(scope, receive, send)
            return
        preview = Preview(self._state, origins, *target)
        if scope["type"] == "websocket":
            accepted = await preview.websocket(WebSocket(scope, receive, send))
            METRICS.preview_requests.labels("websocket", "101" if accepted else "403").inc()
        else:
            response = await preview.http(Request(scope, receive))
            METRICS.preview_requests.labels("http", str(response.status_code)).inc()
            await response(scope, receive, send)


class Preview:
    """One request on one box's port's origin."""

    def __init__(self, state: Any, origins: PreviewOrigins, name: str, port: int) -> None:
        self.state = state
        self.store: BoxStore = state.store
        self.sessions: SessionStore = state.sessions
        self.origins = origins
        self.name = name
        self.port = port
        self.origin = origins.origin(name, port)

    async def http(self, request: Request) -> Response:
        if request.url.path == OPEN_PATH and request.method == "POST":
            return await self._sign_in(request)
        if not _own_request(request.headers):
            return _plain_page("Refused", "Another site may not use this preview's sign-in.", 403)
        problem, address = self._admitted(request.cookies.get(PREVIEW_COOKIE))
        if problem is not None:
            return problem
        return await _forward(self.state.preview_client, request, f"http://{address}:{self.port}")

    async def websocket(self, websocket: WebSocket) -> bool:
        """Pipe the WebSocket to the box's port; False when it was refused."""
        if websocket.headers.get("origin") != self.origin:
            await websocket.close(code=1008, reason="only this preview's own pages may connect")
            return False
        problem, address = self._admitted(websocket.cookies.get(PREVIEW_COOKIE))
        if problem is not None:
            await websocket.close(code=1008, reason=NOT_SIGNED_IN[:120])
            return False
        await _pipe_websocket(websocket, f"ws://{address}:{self.port}")
        return True

    def _admitted(self, cookie: str | None) -> tuple[Response | None, str | None]:
        """The box pod's address, or why this browser may not reach the port now."""
        grant = self.sessions.preview_of(cookie, PREVIEW_PASS, self.name, self.port)
        if grant is None:
            return _plain_page("Sign in from the dashboard", NOT_SIGNED_IN, 401), None
        identity = person_identity(grant.person, self.state.admin_groups)
        refused = _refusal(self.store, self.name, self.port, identity.scope)
        if refused is not None:
            return refused, None
        objects = self.store.objects(naming.object_names(self.name))
        address = status.tunnel_address(objects) if objects is not None else None
        if address is None:
            return _plain_page("Not ready", f"devbox '{self.name}' has no ready pod", 409), None
        return None, address

    async def _sign_in(self, request: Request) -> Response:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return _plain_page("Too large", "This hand-off is not one the dashboard sent.", 413)
        try:
            fields = parse_qs(body.decode(), max_num_fields=4)
        except (UnicodeDecodeError, ValueError):
            fields = {}
        codes = fields.get("code") or []
        grant = self.sessions.preview_of(
            codes[0] if codes else None, PREVIEW_CODE, self.name, self.port
        )
        if grant is None:
            return _plain_page(
                "Link expired",
                "This hand-off has expired or is not for this preview. Open the preview "
                "again from the dashboard.",
                403,
            )
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            PREVIEW_COOKIE,
            self.sessions.sign_preview(grant, PREVIEW_PASS),
            path="/",
            httponly=True,
            # Lax: the browser arrives from the dashboard's hand-off, another site.
            samesite="lax",
            secure=self.origins.secure,
        )
        log.info(
            "preview opened",
            extra={"box": self.name, "port": self.port, "user": _person(grant)},
        )
        return response


def _person(grant: PreviewGrant) -> str:
    return grant.person.user if grant.person is not None else "operator"


def _own_request(headers: Headers) -> bool:
    """Whether the browser sent this for the preview itself: its own pages, a navigation,
    or a client that labels nothing (curl, a script)."""
    site = headers.get("sec-fetch-site")
    return site in (None, "same-origin", "none") or headers.get("sec-fetch-mode") == "navigate"


def _without_preview_cookie(value: str) -> str | None:
    """The Cookie header the box sees: the box's own cookies, never the preview pass."""
    jar: SimpleCookie = SimpleCookie()
    with contextlib.suppress(Exception):
        jar.load(value)
    kept = [f"{key}={morsel.coded_value}" for key, morsel in jar.items() if key != PREVIEW_COOKIE]
    return "; ".join(kept) or None


def _upstream_headers(headers: Headers, scheme: str) -> list[tuple[str, str]]:
    forwarded: list[tuple[str, str]] = []
    for key, value in headers.items():
        if key in HOP_BY_HOP or key == "content-length":
            continue
        if key == "cookie":
            kept = _without_preview_cookie(value)
            if kept is not None:
                forwarded.append((key, kept))
            continue
        forwarded.append((key, value))
    forwarded.append(("x-forwarded-proto", scheme))
    if "host" in headers:
        forwarded.append(("x-forwarded-host", headers["host"]))
    return forwarded


async def _forward(client: httpx.AsyncClient, request: Request, base: str) -> Response:
    url = base + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    upstream = client.build_request(
        request.method,
        url,
        headers=_upstream_headers(request.headers, request.url.scheme),
        content=request.stream() if request.method not in ("GET", "HEAD") else None,
    )
    try:
        answer = await client.send(upstream, stream=True)
    except httpx.HTTPError as err:
        return _plain_page(
            "No answer",
            f"nothing answers on port {upstream.url.port} of the box ({type(err).__name__}); "
            "is its server running?",
            502,
        )
    headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in HOP_BY_HOP]
    return _Streamed(answer, headers)


class _Streamed(Response):
    """The box's answer, passed on as it arrives."""

    def __init__(self, answer: httpx.Response, headers: list[tuple[str, str]]) -> None:
        super().__init__(status_code=answer.status_code)
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        self._answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            async for chunk in self._answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self._answer.aclose()


async def _pipe_websocket(websocket: WebSocket, base: str) -> None:
    url = base + websocket.url.path + (f"?{websocket.url.query}" if websocket.url.query else "")
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
    cookie = _without_preview_cookie(websocket.headers.get("cookie", ""))
    try:
        upstream = await websockets.connect(
            url,
            subprotocols=[p for p in offered if p] or None,  # type: ignore[misc]
            additional_headers={"Cookie": cookie} if cookie else None,
            open_timeout=CONNECT_SECONDS,
            max_size=None,
            compression=None,
        )
    except (OSError, websockets.InvalidHandshake, TimeoutError) as err:
        await websocket.close(code=1011, reason=f"the box's port refused: {type(err).__name__}")
        return
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        await _relay(websocket, upstream)


async def _relay(websocket: WebSocket, upstream: ClientConnection) -> None:
    async def downstream() -> None:
        async for message in upstream:
            if isinstance(message, bytes):
                await websocket.send_bytes(message)
            else:
                await websocket.send_text(message)

    async def upstream_from_browser() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                await upstream.send(message["bytes"])
            elif message.get("text") is not None:
                await upstream.send(message["text"])

    tasks = [asyncio.create_task(downstream()), asyncio.create_task(upstream_from_browser())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(
                asyncio.CancelledError, WebSocketDisconnect, websockets.ConnectionClosed
            ):
                await task
        if websocket.client_state is WebSocketState.CONNECTED:
            # The box ended first; a browser that already left is told nothing.
            with contextlib.suppress(WebSocketDisconnect):
                await websocket.close()
