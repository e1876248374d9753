"""``/api/v1/devboxes/{name}/ssh``: a tunnel to a box's sshd over a WebSocket.

The tunnel adds reach, not trust: the route checks the person as every route does (the
box's owner or an admin; another person's box is as absent as one that does not exist),
then carries bytes between the WebSocket's binary messages and a TCP connection to the
box pod's sshd, which still checks the person's key. Any replica serves any tunnel: the
pod's address comes from the watches every replica keeps.

A client that asks (the ``Devboxes-Notices: text`` header, as ``devbox ssh`` sends it) is
also sent the box's stop warnings as text messages, each once, which ``devbox`` prints on
the person's terminal.

A refusal is an HTTP answer in the API's error shape, sent instead of the upgrade, so a
client can say what failed in one line. A tunnel that carries no byte either way for
``connections.tunnelIdleSeconds`` is closed; a person holds at most
``connections.tunnelsPerPerson`` tunnels open on one replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketState

from devboxes_sdk.models import API_PREFIX, DevboxState, normalize_name

from ..box import naming, status, stop_warning
from ..config.boxes import SSH_CONTAINER_PORT
from ..config.connections import ConnectionSettings
from ..control.lifecycle import Lifecycle
from ..k8s.kube import ApiProblem, Conflict, Unavailable, rule_broken
from ..state.metrics import METRICS
from ..state.store import BoxStore
from .identity.base import Identity
from .identity.chooser import authenticate_token

log = logging.getLogger(__name__)

# Dialling a ready pod on the cluster network takes milliseconds; a pod that does not
# answer within this is not going to.
DIAL_SECONDS = 5.0
# How often a tunnel looks for a notice to carry: a warning reaches an open session
# within this after the leader made it.
NOTICE_SECONDS = 2.0
# A client that sends this header with "text" takes notices as text messages.
NOTICES_HEADER = "devboxes-notices"
# One read from sshd: about what one SSH packet of a bulk copy is, and what a tunnel
# holds at most while the client takes it.
CHUNK_BYTES = 64 * 1024
# How the controller closes a tunnel, by how it ended: WebSocket close codes (RFC 6455)
# and the reason sent with them.
CLOSES = {
    "client_closed": (1000, ""),
    "box_closed": (1001, "the box's SSH server closed the connection"),
    "idle": (1013, "closed after no traffic for connections.tunnelIdleSeconds"),
}

router = APIRouter(prefix=API_PREFIX)


class TooManyTunnels(ApiProblem):
    def __init__(self, held: int) -> None:
        super().__init__(
            429,
            f"you hold {held} tunnels on this replica, the limit "
            "(connections.tunnelsPerPerson); close one first",
        )


@dataclass
class Tunnels:
    """The tunnels open on this replica, counted per person."""

    settings: ConnectionSettings
    held: Counter[str] = field(default_factory=Counter)

    def take(self, person: str) -> None:
        if self.held[person] >= self.settings.tunnels_per_person:
            raise TooManyTunnels(self.held[person])
        self.held[person] += 1
        METRICS.tunnels.inc()

    def give_back(self, person: str) -> None:
        self.held[person] -= 1
        if self.held[person] <= 0:
            del self.held[person]
        METRICS.tunnels.dec()


def _address(store: BoxStore, name: str, identity: Identity) -> tuple[str, str]:
    """The box's name and where its sshd listens, when the caller may reach the box and
    it is ready."""
    try:
        name = normalize_name(name)
    except ValueError as err:
        raise rule_broken(["path", "name"], str(err)) from None
    box = store.get(name, identity.scope)
    if box.state is DevboxState.STOPPED:
        raise Conflict(f"devbox '{name}' is stopped; start it with: devbox start {name}")
    objects = store.objects(naming.object_names(name))
    address = status.tunnel_address(objects) if objects is not None else None
    if address is None:
        raise Conflict(
            f"devbox '{name}' is {box.state.value}, not ready: {box.message}", retry_after=5
        )
    return name, address


async def _refuse(websocket: WebSocket, problem: ApiProblem) -> None:
    """The refusal as an HTTP answer instead of the upgrade, where the server can send one;
    else a close whose reason says it."""
    METRICS.tunnels_ended.labels(f"refused_{problem.status}").inc()
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        response = JSONResponse(problem.body(), problem.status, headers=problem.headers)
        await websocket.send_denial_response(response)
    else:
        await websocket.close(code=1008, reason=problem.detail[:120])


@router.websocket("/devboxes/{name}/ssh")
async def ssh_tunnel(websocket: WebSocket, name: str) -> None:
    state = websocket.app.state
    store: BoxStore = state.store
    lifecycle: Lifecycle = state.lifecycle
    tunnels: Tunnels = state.tunnels
    try:
        identity = await authenticate_token(websocket)
        name, address = _address(store, name, identity)
        tunnels.take(identity.user)
    except ApiProblem as problem:
        await _refuse(websocket, problem)
        return
    try:
        await _serve(websocket, store, lifecycle, identity, name, address)
    finally:
        tunnels.give_back(identity.user)


async def _serve(
    websocket: WebSocket,
    store: BoxStore,
    lifecycle: Lifecycle,
    identity: Identity,
    name: str,
    address: str,
) -> None:
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(address, SSH_CONTAINER_PORT, limit=CHUNK_BYTES), DIAL_SECONDS
        )
    except (OSError, TimeoutError):
        await _refuse(
            websocket, Unavailable(f"devbox '{name}' is ready but its SSH server did not answer")
        )
        return
    await websocket.accept()
    deployment = store.deployment(naming.object_names(name))
    if deployment is not None:
        lifecycle.record(deployment, "TunnelOpened", f"SSH tunnel opened by {identity.user}")
    log.info("tunnel opened", extra={"box": name, "user": identity.user})
    started = time.monotonic()
    asked = websocket.headers.get(NOTICES_HEADER, "").strip().lower() == "text"
    notices = StopNotices(store, name, lifecycle.clock) if asked else None
    pipe = Pipe(store.settings.connections.tunnel_idle_seconds, notices)
    outcome = await pipe.run(websocket, reader, writer)
    METRICS.tunnels_ended.labels(outcome).inc()
    seconds = int(time.monotonic() - started)
    if deployment is not None:
        lifecycle.record(
            deployment,
            "TunnelClosed",
            f"SSH tunnel of {identity.user} closed ({outcome}) after {seconds} s, "
            f"{pipe.sent + pipe.received} bytes",
        )
    log.info(
        "tunnel closed",
        extra={"box": name, "user": identity.user, "outcome": outcome, "seconds": seconds},
    )


class StopNotices:
    """The warnings of one box's coming stop that one tunnel has not carried yet: each
    stop the leader warned of, once, while it is still the box's next stop."""

    def __init__(self, store: BoxStore, name: str, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._names = naming.object_names(name)
        self._clock = clock
        self._told: str | None = None

    def __call__(self) -> str | None:
        deployment = self._store.deployment(self._names)
        key = stop_warning.warned(deployment) if deployment is not None else None
        if deployment is None or key is None or key == self._told:
            return None
        now = self._clock()
        stop = stop_warning.next_stop(deployment, self._store.settings, now)
        if stop is None or stop.key != key:
            # Moved by an extend or by activity since: nothing to tell any more.
            return None
        self._told = key
        return stop_warning.message(self._names.box, stop, now)


class Pipe:
    """Carries bytes both ways until either side ends or both stay silent for
    ``idle_seconds``, and the ``notices`` as text messages when the client asked for
    them; ``run`` returns how it ended."""

    def __init__(self, idle_seconds: float, notices: Callable[[], str | None] | None) -> None:
        self.idle_seconds = idle_seconds
        self.notices = notices
        self.last = time.monotonic()
        # To the box, and from it.
        self.sent = 0
        self.received = 0
        # One message at a time on the WebSocket: SSH bytes and notices interleave whole.
        self._sending = asyncio.Lock()

    async def run(
        self, websocket: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> str:
        inbound = asyncio.create_task(self._to_box(websocket, writer), name="tunnel-in")
        outbound = asyncio.create_task(self._from_box(websocket, reader), name="tunnel-out")
        idle = asyncio.create_task(self._watch_idle(), name="tunnel-idle")
        tasks = {inbound: "client_closed", outbound: "box_closed", idle: "idle"}
        notifier = (
            None
            if self.notices is None
            else asyncio.create_task(self._notify(websocket, self.notices), name="tunnel-notices")
        )
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            running = [*tasks, *([notifier] if notifier is not None else [])]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            writer.close()
        ended = next(iter(done))
        outcome = tasks[ended]
        if outcome == "client_closed" and isinstance(ended.exception(), OSError):
            outcome = "box_closed"
        if websocket.client_state is WebSocketState.CONNECTED:
            code, reason = CLOSES[outcome]
            # The client may have gone away meanwhile.
            with contextlib.suppress(RuntimeError, OSError):
                await websocket.close(code=code, reason=reason)
        return outcome

    async def _to_box(self, websocket: WebSocket, writer: asyncio.StreamWriter) -> None:
        while True:
            message = await websocket.receive()
            data = message.get("bytes")
            if message["type"] == "websocket.disconnect" or data is None:
                # A text message: not a tunnel's client.
                return
            if not data:
                # The client has no more to send: sshd is told so, and its answer still
                # comes back until it closes.
                if writer.can_write_eof():
                    writer.write_eof()
                continue
            self.last = time.monotonic()
            self.sent += len(data)
            METRICS.tunnel_bytes.labels("to_box").inc(len(data))
            writer.write(data)
            await writer.drain()

    async def _from_box(self, websocket: WebSocket, reader: asyncio.StreamReader) -> None:
        while data := await reader.read(CHUNK_BYTES):
            self.last = time.monotonic()
            self.received += len(data)
            METRICS.tunnel_bytes.labels("from_box").inc(len(data))
            async with self._sending:
                await websocket.send_bytes(data)

    async def _notify(self, websocket: WebSocket, notices: Callable[[], str | None]) -> None:
        while True:
            text = notices()
            if text is not None:
                async with self._sending:
                    await websocket.send_text(text)
            await asyncio.sleep(NOTICE_SECONDS)

    async def _watch_idle(self) -> None:
        while True:
            left = self.last + self.idle_seconds - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(left)
