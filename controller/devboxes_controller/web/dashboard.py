"""The web dashboard: login, the page and its assets, and a live stream of box updates.

Two ways in: the operator token, which makes an operator's (admin's) session, and, when
``auth.oidc.cliClientId`` is set, "Sign in with <issuer>": the authorization code flow with
PKCE as the same public client `devbox login` uses, whose callback makes a session of the
person the issuer names, seeing only their own boxes unless in an admin group.

The page talks to ``/api/v1`` like any other client, authenticated by the session cookie
and the session's CSRF value. Box updates are pushed from the watch cache over
Server-Sent Events: the stream sends every box once, then each box again whenever the
watches recompute its status; likewise the GPU availability (event ``availability``).

A stream holds no queue of its own: changes are coalesced into the set of boxes to send,
and the stream waits while the connection's send buffer is full. A reader that leaves one
event untaken for ``SLOW_READER_SECONDS`` is told to reconnect (event ``reconnect``) and
its stream ends; its browser opens a new one, which starts with a fresh snapshot.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse, StreamingResponse

from devboxes_sdk.models import MAX_USER_LENGTH

from ..box.ownership import OPERATOR
from ..config.auth import OidcSettings
from ..k8s.kube import ApiProblem
from ..state.ended_sessions import EndedSessions
from ..state.store import BoxStore
from .identity.base import Identity, IdentityUnavailable, Unauthorized, bearer, owner_scope
from .identity.chooser import authenticate, caller
from .identity.cli_login import CODE, issuer_authorize_url, login_settings, pkce_challenge, redeem
from .identity.operator_token import token_matches
from .identity.sessions import (
    COOKIE,
    LOGIN_COOKIE,
    LOGIN_SECONDS,
    SESSION_ENDED,
    CookieTooLarge,
    LoginStart,
    Person,
    SessionsLoading,
    SessionStore,
    csrf_matches,
    session_identity,
)

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {
    "labels.js": "text/javascript",
    "dashboard.js": "text/javascript",
    "open_preview.js": "text/javascript",
    "usage.js": "text/javascript",
    "usage_view.js": "text/javascript",
    "dashboard.css": "text/css",
}
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; "
    "frame-ancestors 'none'"
)
HOME = "/dashboard"
USAGE = "/dashboard/usage"
LOGIN = "/dashboard/login"
ISSUER_LOGIN = "/dashboard/login/oidc"
# Registered at the issuer as a redirect URI of the public client, under the address the
# browser uses for the dashboard.
ISSUER_CALLBACK = "/dashboard/login/oidc/callback"
MAX_FORM_BYTES = 4096
KEEPALIVE_SECONDS = 20.0
# Longer than a browser on a slow link takes for one chunk; a stream stuck this long
# behind one chunk is a reader that no longer reads.
SLOW_READER_SECONDS = 10.0
# A snapshot is sent in slices of this many boxes (about 50 KiB): the server waits for each
# to drain, so a stream holds at most about one slice in its send buffer.
SLICE = 100
RECONNECT_HINT = (
    b"retry: 3000\nevent: reconnect\n"
    b'data: {"reason": "this stream was read too slowly; reconnect for a fresh snapshot"}\n\n'
)
SAFE_NEXT = re.compile(r"/dashboard(/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/?")
LOGIN_REFUSED = "That token was not accepted."
# Two write intervals of the ended-sessions record and one write's own bound.
SIGN_OUT_WAIT_SECONDS = 7.0
SIGNED_OUT_HERE_ONLY = (
    "Signed out of this replica. The Kubernetes API did not take the record for the other "
    "replicas, which may accept this session until it does; the controller keeps trying."
)


class Subscriber:
    """One open event stream: names of boxes changed since it last sent, and whether the
    availability changed, coalesced."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: set[str] = set()
        self.availability = False
        self.changed = asyncio.Event()

    def notify(self, name: str) -> None:
        self.pending.add(name)
        self.changed.set()

    def notify_availability(self) -> None:
        self.availability = True
        self.changed.set()

    def take(self) -> tuple[list[str], bool]:
        names = sorted(self.pending)
        availability = self.availability
        self.pending.clear()
        self.availability = False
        self.changed.clear()
        return names, availability


class Broadcaster:
    """Fans box changes out from the watch threads to every open stream's event loop."""

    def __init__(self) -> None:
        self._subscribers: set[Subscriber] = set()

    def subscribe(self) -> Subscriber:
        subscriber = Subscriber(asyncio.get_running_loop())
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def changed(self, name: str) -> None:
        """Called from watch threads."""
        for subscriber in list(self._subscribers):
            self._call(subscriber, subscriber.notify, name)

    def availability_changed(self) -> None:
        """Called from the availability thread."""
        for subscriber in list(self._subscribers):
            self._call(subscriber, subscriber.notify_availability)

    def _call(self, subscriber: Subscriber, function: Callable[..., None], *args: str) -> None:
        try:
            subscriber.loop.call_soon_threadsafe(function, *args)
        except RuntimeError:
            # The loop is closed: the server is shutting down and the stream is gone.
            self._subscribers.discard(subscriber)


def _template(name: str, values: dict[str, str]) -> str:
    text = (STATIC / name).read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", html.escape(value, quote=True))
    return text


def _page(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        body,
        status_code=status,
        headers={"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-store"},
    )


def safe_next(target: str | None) -> str:
    """Where to go after login: a dashboard path, never another site or another app."""
    if target and SAFE_NEXT.fullmatch(target) and not target.startswith(LOGIN):
        return target
    return HOME


def _sessions(request: Request) -> SessionStore:
    sessions: SessionStore = request.app.state.sessions
    return sessions


def _same_origin(request: Request) -> bool:
    """Refuse form posts that another site makes the browser send.

    Browsers label every request with ``Sec-Fetch-Site``; with the no-referrer policy
    their ``Origin`` on a form post is "null", so it is only the fallback for older ones.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    return parts.scheme == request.url.scheme and parts.netloc == request.url.netloc


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    try:
        fields = parse_qs(body.decode(), keep_blank_values=True, max_num_fields=10)
    except (UnicodeDecodeError, ValueError):
        return {}
    return {key: values[0] for key, values in fields.items()}


def _issuer_name(request: Request) -> str | None:
    """How the login page names the issuer (its host), or None when it offers no sign-in
    through one."""
    oidc: OidcSettings | None = request.app.state.store.settings.auth.oidc
    if oidc is None or oidc.cli_client_id is None:
        return None
    return urlsplit(oidc.issuer).netloc


def _login_page(request: Request, target: str, error: str = "", status: int = 200) -> HTMLResponse:
    issuer = _issuer_name(request)
    values = {
        "next": target,
        "next_query": quote(target, safe="/"),
        "error": error,
        "issuer": issuer or "",
        "issuer_hidden": "" if issuer else "hidden",
    }
    return _page(_template("login.html", values), status)


router = APIRouter(include_in_schema=False)


def set_session_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        COOKIE,
        value,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


@router.get("/")
def root() -> Response:
    # Someone who opens the bare controller address wants the page, not a JSON 404.
    return RedirectResponse(HOME, status_code=303)


@router.get("/dashboard")
def dashboard(request: Request) -> Response:
    session = _sessions(request).lookup(request.cookies.get(COOKIE))
    if session is None:
        return RedirectResponse(f"{LOGIN}?next={HOME}", status_code=303)
    store: BoxStore = request.app.state.store
    identity = session_identity(session, request.app.state.admin_groups)
    page = _page(
        _template(
            "dashboard.html",
            {
                "csrf": session.csrf,
                "ttl_max": str(store.settings.ttl.max_hours),
                "user": identity.user,
                "role": " (admin)" if identity.admin else "",
                "cluster": store.settings.cluster.name or "",
                "peers": json.dumps(
                    [peer.model_dump(mode="json") for peer in store.settings.cluster.peers]
                ),
            },
        )
    )
    if session.reissued:
        set_session_cookie(request, page, session.cookie)
    return page


@router.get(USAGE)
def usage(request: Request) -> Response:
    """The usage page: it reads ``/api/v1/usage`` with the session; only an admin's page
    offers everyone's usage, which the API refuses anyone else."""
    session = _sessions(request).lookup(request.cookies.get(COOKIE))
    if session is None:
        return RedirectResponse(f"{LOGIN}?next={USAGE}", status_code=303)
    identity = session_identity(session, request.app.state.admin_groups)
    page = _page(
        _template(
            "usage.html",
            {
                "csrf": session.csrf,
                "user": identity.user,
                "role": " (admin)" if identity.admin else "",
                "admin": "true" if identity.admin else "false",
            },
        )
    )
    if session.reissued:
        set_session_cookie(request, page, session.cookie)
    return page


@router.get("/dashboard/login")
def login_form(request: Request, next: str | None = None) -> Response:
    target = safe_next(next)
    try:
        signed_in = _sessions(request).lookup(request.cookies.get(COOKIE), touch=False)
    except SessionsLoading:
        signed_in = None
    if signed_in is not None:
        return RedirectResponse(target, status_code=303)
    return _login_page(request, target)


@router.post("/dashboard/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    target = safe_next(form.get("next"))
    if not _same_origin(request):
        return _login_page(
            request, target, "This form must be sent from the dashboard itself.", 403
        )
    token = form.get("token", "").strip()
    if not token or not token_matches(token, request.app.state.token):
        return _login_page(request, target, LOGIN_REFUSED, 401)
    response = RedirectResponse(target, status_code=303)
    set_session_cookie(request, response, _sessions(request).create().cookie)
    return response


def _callback_url(request: Request) -> str:
    return str(request.base_url).rstrip("/") + ISSUER_CALLBACK


def _set_login_cookie(request: Request, response: Response, value: str) -> None:
    # Lax, unlike the session's: the browser must send it on the issuer's redirect back.
    response.set_cookie(
        LOGIN_COOKIE,
        value,
        max_age=LOGIN_SECONDS,
        path=ISSUER_LOGIN,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )


@router.get(ISSUER_LOGIN)
async def issuer_login(request: Request, next: str | None = None) -> Response:
    """Send the browser to the issuer, bound to this sign-in by a short-lived cookie."""
    target = safe_next(next)
    if _issuer_name(request) is None:
        return _login_page(
            request,
            target,
            "This controller offers no sign-in through an identity provider "
            "(auth.oidc.cliClientId is not set).",
            404,
        )
    start, cookie = _sessions(request).start_login(target)
    try:
        _, client_id, verifier = login_settings(request)
        url = await issuer_authorize_url(
            verifier,
            client_id,
            _callback_url(request),
            start.state,
            pkce_challenge(start.verifier),
            start.nonce,
        )
    except ApiProblem as problem:
        return _login_page(request, target, problem.detail, problem.status)
    response = RedirectResponse(url, status_code=303)
    _set_login_cookie(request, response, cookie)
    return response


@router.get(ISSUER_CALLBACK)
async def issuer_callback(
    request: Request,
    code: str | None = None,
    state: str | None = None,
    error: str | None = None,
) -> Response:
    """Where the issuer sends the browser back: the sign-in this browser started, checked,
    becomes a session of the person the issuer names. Every refusal is the login page with
    the reason; the sign-in's cookie is spent either way."""
    sessions = _sessions(request)
    start = sessions.login_of(request.cookies.get(LOGIN_COOKIE))
    target = start.next if start is not None else HOME
    try:
        response = await _finish_issuer_login(request, sessions, start, code, state, error)
    except ApiProblem as problem:
        response = _login_page(request, target, problem.detail, problem.status)
    response.delete_cookie(
        LOGIN_COOKIE,
        path=ISSUER_LOGIN,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return response


async def _finish_issuer_login(
    request: Request,
    sessions: SessionStore,
    start: LoginStart | None,
    code: str | None,
    state: str | None,
    error: str | None,
) -> Response:
    if start is None:
        raise ApiProblem(
            400,
            f"This sign-in was not started in this browser, or took longer than "
            f"{LOGIN_SECONDS // 60} minutes. Sign in again.",
        )
    if state is None or not hmac.compare_digest(state.encode(), start.state.encode()):
        raise ApiProblem(400, "The issuer's answer belongs to another sign-in. Sign in again.")
    if error is not None:
        # The issuer's own error code (access_denied when the person declined), bounded.
        raise ApiProblem(403, f"The identity provider did not sign you in ({error[:80]}).")
    if code is None or not CODE.fullmatch(code):
        raise ApiProblem(400, "The issuer's answer carries no usable code. Sign in again.")
    _, client_id, verifier = login_settings(request)
    redeemed = await redeem(
        verifier,
        {
            "grant_type": "authorization_code",
            "client_id": client_id,
            "code": code,
            "code_verifier": start.verifier,
            "redirect_uri": _callback_url(request),
        },
    )
    if redeemed.id_token is None:
        raise ApiProblem(502, f"The issuer {verifier.issuer} answered without an ID token.")
    try:
        await verifier.check_id_token(redeemed.id_token, client_id, start.nonce)
    except Unauthorized as refused:
        raise ApiProblem(
            400, f"The issuer's answer does not fit this sign-in: {refused.detail}."
        ) from None
    person = redeemed.person
    if person.user == OPERATOR:
        raise ApiProblem(403, f"The name '{OPERATOR}' is reserved for the operator token.")
    try:
        session = sessions.create(Person(person.user, person.groups))
    except CookieTooLarge:
        raise ApiProblem(
            400,
            f"{person.user} is in too many groups ({len(person.groups)}) for a browser "
            "session; use a token from devbox login --oidc.",
        ) from None
    page = _page(_template("signed_in.html", {"next": start.next, "user": person.user}))
    set_session_cookie(request, page, session.cookie)
    return page


@router.post("/dashboard/logout")
async def logout(request: Request) -> Response:
    sessions = _sessions(request)
    cookie = request.cookies.get(COOKIE)
    session = sessions.lookup(cookie, touch=False)
    form = await _form(request)
    response: Response = RedirectResponse(LOGIN, status_code=303)
    if session is not None:
        if not _same_origin(request) or not csrf_matches(session, form.get("csrf")):
            raise ApiProblem(403, "missing or wrong CSRF value")
        recorded = sessions.end(session)
        try:
            # Answered once the apiserver has taken the record, so every replica refuses
            # the session when the browser is told it is signed out. The record's own
            # thread writes it, so sign-outs take nothing from the pool of box writes.
            await asyncio.wait_for(asyncio.wrap_future(recorded), SIGN_OUT_WAIT_SECONDS)
        except (ApiProblem, TimeoutError) as err:
            log.warning(
                "session ended on this replica only until the Kubernetes API takes the record",
                extra={"error": err.detail if isinstance(err, ApiProblem) else "no answer yet"},
            )
            response = _login_page(request, HOME, SIGNED_OUT_HERE_ONLY, 503)
    response.delete_cookie(
        COOKIE, path="/", httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )
    return response


@router.get("/dashboard/static/{name}")
def asset(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise ApiProblem(404, f"no asset named {name!r}")
    return Response(
        (STATIC / name).read_bytes(),
        media_type=f"{media_type}; charset=utf-8",
        headers={"Cache-Control": "no-cache"},
    )


def _event(kind: str, data: str) -> bytes:
    return f"event: {kind}\ndata: {data}\n\n".encode()


class StreamCredentials:
    """Whether what an event stream was opened with still speaks for its caller as it did.

    A session cookie is looked up at every wake of the stream: that is a lookup in memory.
    A bearer token is offered to the operator token and the identity providers again at
    each keepalive, and on a busy stream at most as often: a token they no longer vouch for,
    or whose holder became or stopped being an admin, ends the stream.
    """

    def __init__(self, request: Request, identity: Identity) -> None:
        self._request = request
        self._identity = identity
        self._token = bearer(request) is not None
        # A request with both is the token's, as for every other route.
        self._cookie = None if self._token else request.cookies.get(COOKIE)
        self._due = time.monotonic() + KEEPALIVE_SECONDS

    async def ended(self, quiet: bool) -> str | None:
        """Why the stream must end now, or None; ``quiet``: it woke for its keepalive."""
        if self._cookie is not None:
            session = _sessions(self._request).lookup(self._cookie, touch=False)
            return SESSION_ENDED if session is None else None
        now = time.monotonic()
        if not self._token or (not quiet and now < self._due):
            return None
        self._due = now + KEEPALIVE_SECONDS
        try:
            current = await authenticate(self._request)
        except IdentityUnavailable:
            # A provider that cannot be asked is no word against the caller: the stream goes
            # on, and the next keepalive asks again.
            return None
        except ApiProblem as refused:
            return f"the token no longer holds: {refused.detail}"
        if current.admin != self._identity.admin:
            change = "now" if current.admin else "no longer"
            return f"{current.user} is {change} an admin; open the stream again"
        return None


def snapshot(
    names: list[str], body_of: Callable[[str], bytes | None], shown: set[str]
) -> Iterator[bytes]:
    """The ``snapshot`` event of the boxes ``names``: their kept bodies, read one slice at
    a time as the reader takes them, so that a stream that stops reading holds its list of
    names and one slice, never a list body of its own; ``shown`` gains each box sent. A
    box gone meanwhile (``body_of`` None) is left out; one that changes is sent again as
    an event, which the reader applies after the snapshot."""
    yield b'event: snapshot\ndata: {"items":['
    separator = b""
    for start in range(0, len(names), SLICE):
        parts = []
        for name in names[start : start + SLICE]:
            body = body_of(name)
            if body is not None:
                parts.append(body)
                shown.add(name)
        if parts:
            yield separator + b",".join(parts)
            separator = b","
    yield b"]}\n\n"


async def _stream(
    store: BoxStore,
    broadcaster: Broadcaster,
    subscriber: Subscriber,
    scope: str | None,
    credentials: StreamCredentials,
) -> AsyncGenerator[bytes]:
    """Box changes as the caller may see them: every box (``scope`` None, an admin's
    unfiltered stream), else only ``scope``'s own; a box that leaves the caller's sight is
    reported removed. The stream ends with ``expired`` once its credentials no longer
    hold."""
    try:
        # Only boxes this stream has shown are reported as removed: the watches may see a
        # new box's other objects before its Deployment.
        shown: set[str] = set()
        yield b"retry: 3000\n\n"

        def body_of(name: str) -> bytes | None:
            try:
                return store.get_body(name, scope).data
            except ApiProblem:
                return None

        for chunk in snapshot(store.names(scope), body_of, shown):
            yield chunk
        yield _event("availability", store.availability.current().model_dump_json())
        while True:
            try:
                await asyncio.wait_for(subscriber.changed.wait(), KEEPALIVE_SECONDS)
                quiet = False
            except TimeoutError:
                quiet = True
            reason = await credentials.ended(quiet)
            if reason is not None:
                log.info("event stream ended", extra={"reason": reason})
                yield _event("expired", json.dumps({"reason": reason}))
                return
            if quiet:
                yield b": keepalive\n\n"
                continue
            names, availability = subscriber.take()
            if availability:
                yield _event("availability", store.availability.current().model_dump_json())
            for name in names:
                try:
                    answer = store.get_body(name, scope)
                except ApiProblem:
                    if name in shown:
                        shown.discard(name)
                        yield _event("removed", json.dumps({"name": name}))
                    continue
                shown.add(name)
                # The box's kept get body: one serialization for every stream.
                yield b"event: box\ndata: " + answer.data + b"\n\n"
    finally:
        broadcaster.unsubscribe(subscriber)


async def paced(
    chunks: AsyncGenerator[bytes],
) -> AsyncIterator[bytes]:
    """The chunks, until one takes the reader longer than SLOW_READER_SECONDS: then the
    reconnect hint, and the end of the stream.

    The server sends a chunk between this generator's yield and its resumption, waiting
    while the connection's send buffer is full, so that time is how long the reader took.
    """
    async with aclosing(chunks):
        async for chunk in chunks:
            offered = time.monotonic()
            yield chunk
            if time.monotonic() - offered > SLOW_READER_SECONDS:
                log.info("slow event-stream reader told to reconnect")
                yield RECONNECT_HINT
                return


@router.get("/dashboard/events")
async def events(
    request: Request,
    identity: Annotated[Identity, Depends(caller)],
    owner: Annotated[str | None, Query(min_length=1, max_length=MAX_USER_LENGTH)] = None,
) -> Response:
    """The stream of box changes; ``owner`` narrows it to one person's boxes, as the
    list route's filter of the same name does."""
    scope = owner_scope(identity, owner)
    store: BoxStore = request.app.state.store
    broadcaster: Broadcaster = request.app.state.broadcaster
    # Subscribe before the snapshot is taken, so no change between the two is lost.
    subscriber = broadcaster.subscribe()
    credentials = StreamCredentials(request, identity)
    return StreamingResponse(
        paced(_stream(store, broadcaster, subscriber, scope, credentials)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def mount_dashboard(app: FastAPI, store: BoxStore, ended: EndedSessions) -> None:
    """Sessions, the push of box changes, and the dashboard routes."""
    app.state.ended = ended
    app.state.sessions = SessionStore(app.state.token, ended)
    broadcaster = Broadcaster()
    app.state.broadcaster = broadcaster
    store.add_answer_listener(broadcaster.changed)
    store.availability.add_listener(broadcaster.availability_changed)
    app.include_router(router)
