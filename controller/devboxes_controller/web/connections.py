"""How many connections clients may hold open, and how long they may take to send a request.

uvicorn bounds neither: a connection that sends nothing, or sends its request head a byte
at a time, is held for ever, and enough of them use up the process's open files, after
which nobody is served (a slowloris). The protocol here is uvicorn's httptools protocol
with:

- a deadline for each request's head, from its first byte (the first request's from the
  opening of the connection), and one for its body, from the end of the head. Past it
  the client gets 408 and the connection is closed. Both end once the request is read,
  so an answer that takes long (a waiting GET, the dashboard's event stream) is never
  cut; while the server itself holds back reading (uvicorn does so for a pipelined
  request behind an unanswered one), the deadline is moved on;
- a bound on the size of a request's head: past it the client gets 431 and the
  connection is closed;
- caps on the connections open at once, per client address and in total. A connection
  over a cap gets 503 and is closed at once, before its request is read;
- a bound on how long a client may take none of an answer: once the connection's send
  buffer is full and stays full for :data:`SEND_STALL_SECONDS`, the connection is dropped,
  and with it whatever the answer still held (a stalled event stream's slice of boxes).

A request that upgrades to a WebSocket (a tunnel to a box) leaves this protocol for
uvicorn's WebSocket protocol; the connection stays counted until that one loses it, and
from then on the tunnel's own idle time bounds it.

The counts are this process's own: every replica applies the caps to its connections,
and each server (the API's port, the probe port) has its own.
"""

from __future__ import annotations

import asyncio
import json
import resource
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypedDict

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from ..config.connections import ConnectionSettings
from ..state.metrics import METRICS

# The longest request head read: the API's are well under 4 KiB, and httptools keeps a
# head whole in memory until it ends, however long that takes.
MAX_HEAD_BYTES = 64 * 1024
# Open files the controller needs besides its clients' connections: its watches and
# Kubernetes client pools, its log, the event loop's own.
RESERVED_FILES = 256
# Far longer than a browser or a CLI on a slow link pauses, and than the event stream
# allows one chunk before it asks its reader to reconnect.
SEND_STALL_SECONDS = 60

Phase = Literal["head", "body", "idle"]
Refusal = Literal["total_limit", "per_client_limit"]


class Gate:
    """The connections open now, per client address and in total; ``metered`` when the
    connection metrics count them (the API's port, not the probe port)."""

    def __init__(self, settings: ConnectionSettings, metered: bool = True) -> None:
        self.settings = settings
        self.metered = metered
        self.total = 0
        self.by_client: dict[str, int] = {}

    def admit(self, client: str) -> Refusal | None:
        """Count a new connection and return None, or return which cap refuses it."""
        if self.total >= self.settings.max_total:
            return "total_limit"
        held = self.by_client.get(client, 0)
        if held >= self.settings.max_per_client:
            return "per_client_limit"
        self.total += 1
        self.by_client[client] = held + 1
        return None

    def refusal(self, cap: Refusal) -> str:
        if cap == "total_limit":
            return f"this replica holds its limit of {self.settings.max_total} connections"
        return (
            f"this address holds this replica's limit of {self.settings.max_per_client} "
            "connections per client"
        )

    def release(self, client: str) -> None:
        self.total -= 1
        held = self.by_client[client] - 1
        if held:
            self.by_client[client] = held
        else:
            del self.by_client[client]


class UpgradedProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, which calls ``on_lost`` when its connection goes: the
    HTTP protocol it took the connection from is no longer told."""

    on_lost: Callable[[], None] | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            if self.on_lost is not None:
                self.on_lost()
                self.on_lost = None


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with read deadlines and connection caps; ``gate`` is
    set on the subclass :func:`protocol` makes for one server."""

    gate: ClassVar[Gate]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._address: str | None = None
        self._phase: Phase = "idle"
        self._deadline: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Only a TCP peer has an address; the controller serves nothing else.
        address = self.client[0] if self.client is not None else ""
        refused = self.gate.admit(address)
        if refused is not None:
            self._count_closed(refused)
            self._answer(503, f"too many connections: {self.gate.refusal(refused)}")
            return
        self._address = address
        if self.gate.metered:
            METRICS.connections.inc()
        self._read("head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_clock()
        self._stop_stall()
        self._release()
        super().connection_lost(exc)

    def _release(self) -> None:
        if self._address is not None:
            self.gate.release(self._address)
            if self.gate.metered:
                METRICS.connections.dec()
            self._address = None

    def handle_websocket_upgrade(self) -> None:
        # The head is read; the WebSocket protocol owns the connection from here on.
        self._stop_clock()
        self._stop_stall()
        super().handle_websocket_upgrade()
        upgraded = self.transport.get_protocol()
        if isinstance(upgraded, UpgradedProtocol):
            upgraded.on_lost = self._release

    def data_received(self, data: bytes) -> None:
        # Bytes between requests (even blank lines, which start no message) start the
        # next request's head.
        if self._phase == "idle":
            self._read("head")
        super().data_received(data)
        # Still in the head after this chunk: all of it was head (or, rarely, it also
        # ended a pipelined request before this one).
        if self._phase == "head" and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._stop_clock()
                self._count_closed("head_too_large")
                self._answer(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes")

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(SEND_STALL_SECONDS, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stop_stall()

    def _stop_stall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        self._stall = None
        self._count_closed("send_stalled")
        # Not close(): that would wait for the peer to take the buffered answer first.
        self.transport.abort()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase == "idle":
            self._read("head")

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._read("body")

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._stop_clock()
        self._phase = "idle"

    def _read(self, phase: Phase) -> None:
        self._stop_clock()
        self._phase = phase
        self._head_bytes = 0
        self._deadline = self.loop.call_later(self._seconds(), self._expired)

    def _seconds(self) -> int:
        settings = self.gate.settings
        if self._phase == "head":
            return settings.header_timeout_seconds
        return settings.body_timeout_seconds

    def _stop_clock(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            self._deadline = self.loop.call_later(self._seconds(), self._expired)
            return
        self._count_closed(f"{self._phase}_timeout")
        cycle = self.cycle
        # While the body is read, the cycle is this request's; while a head is, the
        # previous one's. An answer this request already has, or one to an earlier
        # request not yet finished, cannot be followed by a 408.
        if self._phase == "body":
            answered = cycle.response_started
        else:
            answered = cycle is not None and not cycle.response_complete
        if answered:
            self.transport.close()
            return
        self._answer(
            408, f"the request {self._phase} did not arrive within {self._seconds()} seconds"
        )

    def _count_closed(self, reason: str) -> None:
        if self.gate.metered:
            METRICS.connections_closed.labels(reason).inc()

    def _answer(self, status: int, detail: str) -> None:
        """Answer without the application, in the API's error shape, and close."""
        body = json.dumps({"detail": detail}).encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()


def protocol(settings: ConnectionSettings, metered: bool = True) -> type[LimitedProtocol]:
    """The protocol class of one server, with its own counts."""

    class Protocol(LimitedProtocol):
        gate = Gate(settings, metered)

    return Protocol


class ServerOptions(TypedDict):
    http: type[asyncio.Protocol]
    ws: type[asyncio.Protocol]
    ws_per_message_deflate: bool
    timeout_keep_alive: int


def server_options(settings: ConnectionSettings, metered: bool = True) -> ServerOptions:
    """uvicorn's options for serving with these limits.

    No compression of WebSocket messages: a tunnel carries SSH, which is encrypted and
    does not compress, and each connection's compressor would cost far more memory than
    an idle tunnel otherwise holds.
    """
    return ServerOptions(
        http=protocol(settings, metered),
        ws=UpgradedProtocol,
        ws_per_message_deflate=False,
        timeout_keep_alive=settings.keep_alive_timeout_seconds,
    )


def allow_open_files(settings: ConnectionSettings) -> int | None:
    """Raise this process's soft open-file limit to fit ``max_total`` connections, as far
    as the hard limit allows; the limit when that is still too few, else None."""
    needed = settings.max_total + RESERVED_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    return None if raised >= needed else raised
