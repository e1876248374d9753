"""The probe port: ``/health`` and ``/ready`` served apart from the API's connection caps,
for as long as the API's server runs.

A small ASGI application stands in for the API on a real socket on loopback, served with
the controller's own protocol by :class:`ServerWithProbes`, in a thread; no cluster runs.
Tests of the controller process at its cap are in tests/api/test_api_hostile.py.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
import uvicorn
from devboxes_controller.__main__ import main
from devboxes_controller.config.connections import ConnectionSettings
from devboxes_controller.state.metrics import METRICS
from devboxes_controller.web.connections import server_options
from devboxes_controller.web.probes import PROBE_CONNECTIONS, ServerWithProbes, probe_socket
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send
from support import wait_for

# Generous: the machine may be busy; only what is answered is asserted, never how fast.
GRACE = 15.0
SLOW_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"


async def api(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("api")(scope, receive, send)


class Served:
    """The API's port and the probe port of one running :class:`ServerWithProbes`."""

    def __init__(self, server: ServerWithProbes, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread
        self.api_port: int = server.servers[0].sockets[0].getsockname()[1]
        self.probe_port: int = server.probe_sockets[0].getsockname()[1]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(GRACE)
        assert not self.thread.is_alive()


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    """Call with the API's connection settings and what readiness says; returns the ports."""
    started: list[Served] = []

    def start(problem: Callable[[], str | None], **connections: int) -> Served:
        config = uvicorn.Config(
            api,
            host="127.0.0.1",
            port=0,
            lifespan="off",
            log_level="error",
            **server_options(ConnectionSettings(**connections)),
        )
        server = ServerWithProbes(config, problem, probe_socket("127.0.0.1", 0))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_for(lambda: server.started and server.probes.started, timeout=60, interval=0.05)
        served = Served(server, thread)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=GRACE, source_address=(source, 0))


def exchange(port: int, request: bytes, source: str = "127.0.0.1") -> tuple[int, bytes, bytes]:
    """Send ``request`` on a fresh connection; the status, head and body of the answer.
    A connection refused at a cap is sent nothing: the refusal resets a connection whose
    request arrived unread."""
    with connect(port, source) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def probe(
    port: int, path: str, method: str = "GET", source: str = "127.0.0.1"
) -> tuple[int, bytes, bytes]:
    request = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    return exchange(port, request.encode(), source)


def metric(name: str, **labels: str) -> float:
    return METRICS.registry.get_sample_value(name, labels) or 0.0


def test_the_probe_port_answers_while_the_api_port_is_at_its_cap(
    serve: Callable[..., Served],
) -> None:
    served = serve(lambda: None, maxTotal=2, maxPerClient=2, headerTimeoutSeconds=300)
    with connect(served.api_port) as one, connect(served.api_port) as two:
        one.sendall(SLOW_HEAD)
        two.sendall(SLOW_HEAD)
        status, _, body = exchange(served.api_port, b"", source="127.0.0.2")
        assert (status, json.loads(body)) == (
            503,
            {"detail": "too many connections: this replica holds its limit of 2 connections"},
        )
        answers = [probe(served.probe_port, path) for path in ("/health", "/ready") * 5]
        assert [(status, json.loads(body)) for status, _, body in answers] == [
            (200, {"status": "ok"}),
            (200, {"status": "ready"}),
        ] * 5


def test_ready_on_the_probe_port_says_what_readiness_says(
    serve: Callable[..., Served],
) -> None:
    served = serve(lambda: "waiting for the Kubernetes caches to sync")
    status, _, body = probe(served.probe_port, "/ready")
    assert (status, json.loads(body)) == (
        503,
        {"status": "not ready", "detail": "waiting for the Kubernetes caches to sync"},
    )


def test_the_probe_port_answers_nothing_else(serve: Callable[..., Served]) -> None:
    served = serve(lambda: None)
    status, _, body = probe(served.probe_port, "/api/v1/devboxes")
    assert (status, json.loads(body)) == (
        404,
        {"detail": "not found: this port answers only GET /health and GET /ready"},
    )
    status, head, body = probe(served.probe_port, "/health", method="POST")
    assert (status, json.loads(body)) == (
        405,
        {"detail": "method POST not allowed: /health answers only GET"},
    )
    assert b"\r\nallow: GET" in head


def test_the_probe_port_has_caps_of_its_own_outside_the_apis_metrics(
    serve: Callable[..., Served],
) -> None:
    served = serve(lambda: None)
    refused_before = metric("devboxes_http_connections_closed_total", reason="per_client_limit")
    open_before = metric("devboxes_http_connections")
    with ExitStack() as held:
        for _ in range(PROBE_CONNECTIONS.max_per_client):
            held.enter_context(connect(served.probe_port)).sendall(SLOW_HEAD)
        status, _, body = exchange(served.probe_port, b"")
        assert (status, json.loads(body)["detail"]) == (
            503,
            "too many connections: this address holds this replica's limit of "
            f"{PROBE_CONNECTIONS.max_per_client} connections per client",
        )
        assert probe(served.probe_port, "/health", source="127.0.0.2")[0] == 200
        assert metric("devboxes_http_connections") == open_before
    assert (
        metric("devboxes_http_connections_closed_total", reason="per_client_limit")
        == refused_before
    )


def test_a_slow_probe_head_is_cut_at_the_probe_ports_deadline(
    serve: Callable[..., Served],
) -> None:
    served = serve(lambda: None, headerTimeoutSeconds=300)
    status, _, body = exchange(served.probe_port, SLOW_HEAD)
    assert (status, json.loads(body)) == (
        408,
        {
            "detail": "the request head did not arrive within "
            f"{PROBE_CONNECTIONS.header_timeout_seconds} seconds"
        },
    )


def test_the_probe_port_closes_when_the_api_server_stops(
    serve: Callable[..., Served],
) -> None:
    served = serve(lambda: None)
    assert probe(served.probe_port, "/health")[0] == 200
    served.stop()
    with pytest.raises(ConnectionRefusedError):
        connect(served.probe_port).close()


def test_the_probe_port_must_differ_from_the_apis(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--listen", "0.0.0.0:8080", "--probe-listen", "127.0.0.1:8080"]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "--probe-listen needs a port of its own, not the API's (8080)" in capsys.readouterr().err


def test_a_probe_port_that_is_taken_stops_the_controller_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DEVBOXES_TOKEN", "t" * 32)
    monkeypatch.delenv("DEVBOXES_SETTINGS", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = main(["serve", "--listen", "127.0.0.1:1", "--probe-listen", f"127.0.0.1:{port}"])
    assert code == 1
    assert capsys.readouterr().err == (
        f"devboxes-controller: cannot serve the probes on 127.0.0.1:{port}: "
        "Address already in use\n"
    )
