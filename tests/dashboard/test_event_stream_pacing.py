"""A reader of the dashboard's event stream that stops reading is told to reconnect and
dropped, not buffered for: the stream's pacing served by uvicorn, as the controller
serves it, to raw sockets that read fast or not at all. A reader that never reads again
has its connection dropped by the controller's protocol, and the stream is let go."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from devboxes_controller.config.connections import ConnectionSettings
from devboxes_controller.state.metrics import METRICS
from devboxes_controller.web import connections, dashboard
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

CHUNK = b"event: box\ndata: " + b"x" * 65536 + b"\n\n"
SLOW_SECONDS = 0.5


async def endless() -> AsyncGenerator[bytes]:
    while True:
        yield CHUNK
        await asyncio.sleep(0)


async def stream(_request: Request) -> StreamingResponse:
    return StreamingResponse(dashboard.paced(endless()), media_type="text/event-stream")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The port of a uvicorn server of one endless, paced stream."""
    monkeypatch.setattr(dashboard, "SLOW_READER_SECONDS", SLOW_SECONDS)
    yield from _serve(Starlette(routes=[Route("/events", stream)]), {})


def _serve(app: Starlette, options: Any) -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", **options
    )
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not running.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield port
    running.should_exit = True
    thread.join(10)


def open_stream(port: int) -> socket.socket:
    reader = socket.socket()
    # A small receive window, so that the server's buffers fill soon once nobody reads.
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", port))
    reader.sendall(b"GET /events HTTP/1.1\r\nHost: test\r\n\r\n")
    reader.settimeout(10)
    return reader


def test_a_reader_that_stops_reading_is_told_to_reconnect_and_dropped(server: int) -> None:
    # What the connection's buffers can hold when the reader stops: the kernel's send
    # buffer (at most tcp_wmem's maximum), the small receive window and a few chunks in
    # uvicorn. A stream that went on past it would be buffered for, or never end.
    send_buffer = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    bound = send_buffer + 4 * len(CHUNK)
    with open_stream(server) as reader:
        time.sleep(SLOW_SECONDS * 4)
        received = bytearray()
        while (chunk := reader.recv(1 << 20)) and len(received) < bound:
            received += chunk
    assert len(received) < bound
    # The stream ended, the server closing its end, with the hint.
    last_chunk = b"\r\n0\r\n\r\n"
    assert received.endswith(dashboard.RECONNECT_HINT + last_chunk), bytes(received[-300:])


def test_a_reader_that_keeps_up_is_never_dropped(
    server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loaded machine may stall this process for a moment; a reader that keeps up does
    # not take seconds for one chunk.
    monkeypatch.setattr(dashboard, "SLOW_READER_SECONDS", 3.0)
    with open_stream(server) as reader:
        received = 0
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            chunk = reader.recv(1 << 20)
            assert chunk, "the server ended the stream of a reader that kept up"
            assert b"event: reconnect" not in chunk
            received += len(chunk)
    assert received > 4 * len(CHUNK)


def test_a_reader_that_never_reads_again_is_dropped_and_its_stream_let_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stream would wait for the reader for an hour; the connection gives up first.
    monkeypatch.setattr(dashboard, "SLOW_READER_SECONDS", 3600.0)
    monkeypatch.setattr(connections, "SEND_STALL_SECONDS", 1)
    released = threading.Event()

    async def held() -> AsyncGenerator[bytes]:
        try:
            while True:
                yield CHUNK
                await asyncio.sleep(0)
        finally:
            released.set()

    async def held_stream(_request: Request) -> StreamingResponse:
        return StreamingResponse(dashboard.paced(held()), media_type="text/event-stream")

    dropped = METRICS.connections_closed.labels("send_stalled")
    before = dropped._value.get()
    app = Starlette(routes=[Route("/events", held_stream)])
    options = connections.server_options(ConnectionSettings())
    for port in _serve(app, options):
        with open_stream(port) as reader:
            assert released.wait(15), "the stream of a reader that never reads was kept"
            assert dropped._value.get() == before + 1
            received = 0
            with contextlib.suppress(ConnectionResetError):
                while chunk := reader.recv(1 << 20):
                    received += len(chunk)
            send_buffer = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
            assert received < send_buffer + 4 * len(CHUNK)
