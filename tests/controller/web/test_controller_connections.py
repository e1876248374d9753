"""Connection limits: read deadlines for a request's head and body, caps per client address
and in total, and the idle keep-alive timeout.

The controller's real application is served here by uvicorn with the controller's own
protocol and options, on a real socket on loopback. Its caches hold one recorded box and
are never started, so no cluster runs. Clients connect from 127.0.0.1 and, as a second
address, from 127.0.0.2.
"""

from __future__ import annotations

import json
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from typing import Any

import pytest
import requests
from devboxes_controller.config.connections import ConnectionSettings
from devboxes_controller.state import slim
from devboxes_controller.state.store import BoxStore
from devboxes_controller.state.watches import DEPLOYMENTS, Watches
from devboxes_controller.web.connections import MAX_HEAD_BYTES
from kubernetes import client
from served import Served, settings_with_connections
from support import recorded, wait_for

TOKEN = "connections-test-token-" + "z" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# A box whose pod never becomes ready: a waiting GET of it is held until its wait ends.
WAITING_BOX = "unplaceable"
OTHER_ADDRESS = "127.0.0.2"
# How long a test waits for the server to act on a 1-second deadline: generous, since
# the machine may be busy; only that the connection is closed is asserted, not when.
GRACE = 15.0

Serve = Callable[..., str]


def _waiting_box() -> dict[str, Any]:
    (deployment,) = recorded("deployments", WAITING_BOX)
    deployment["spec"]["replicas"] = 1
    return deployment


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Call with ``controller.connections`` settings (camelCase keys); returns the port."""
    served = Served()

    def start(**connections: int) -> int:
        settings = settings_with_connections(connections)
        api = client.ApiClient()
        watches = Watches(settings, api)
        store = BoxStore(settings, watches)
        watches[DEPLOYMENTS]._put(slim.deployment(_waiting_box()))
        store._changed_box(WAITING_BOX)
        return served.start(settings, store, api, TOKEN)

    yield start
    served.stop()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=GRACE, source_address=(source, 0))
    sock.settimeout(GRACE)
    return sock


def answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def status_and_detail(raw: bytes) -> tuple[int, str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["detail"]


def get(port: int, path: str, source: str = "127.0.0.1", **kwargs: Any) -> requests.Response:
    """A GET on a fresh connection from ``source``."""
    with requests.Session() as session:
        adapter = requests.adapters.HTTPAdapter()
        adapter.init_poolmanager(1, 1, source_address=(source, 0))
        session.mount("http://", adapter)
        return session.get(f"http://127.0.0.1:{port}{path}", timeout=GRACE, **kwargs)


def test_a_request_head_that_does_not_arrive_in_time_gets_408_and_is_closed(
    serve: Serve,
) -> None:
    port = serve(headerTimeoutSeconds=1)
    with connect(port) as silent, connect(port) as dribbling:
        dribbling.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        # Every byte is late on its own account; the deadline counts from the first one.
        while time.monotonic() - started < GRACE:
            try:
                dribbling.sendall(b"X")
            except OSError:
                break
            if time.monotonic() - started > 2.5:
                break
            time.sleep(0.2)
        dribbled = answer(dribbling)
        closed = time.monotonic() - started
        assert status_and_detail(dribbled) == (
            408,
            "the request head did not arrive within 1 seconds",
        )
        assert closed < GRACE
        # A connection that never sends a byte is held no longer.
        assert status_and_detail(answer(silent))[0] == 408
    assert get(port, "/health").status_code == 200


def test_a_request_head_larger_than_the_bound_gets_431_and_is_closed(serve: Serve) -> None:
    port = serve()
    start = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Large: "
    with connect(port) as sock:
        # One byte over, and no more: the server has read all of it when it closes.
        sock.sendall(start + b"a" * (MAX_HEAD_BYTES + 1 - len(start)))
        assert status_and_detail(answer(sock)) == (
            431,
            f"the request head is larger than {MAX_HEAD_BYTES} bytes",
        )
    large = get(port, "/health", headers={"X-Large": "a" * (MAX_HEAD_BYTES // 2)})
    assert large.status_code == 200


def test_a_request_body_that_does_not_arrive_in_time_gets_408_and_is_closed(
    serve: Serve,
) -> None:
    port = serve(bodyTimeoutSeconds=1)
    with connect(port) as sock:
        sock.sendall(
            b"POST /api/v1/devboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n"
            + b'{"name": "slow'
        )
        started = time.monotonic()
        assert status_and_detail(answer(sock)) == (
            408,
            "the request body did not arrive within 1 seconds",
        )
        assert time.monotonic() - started < GRACE
    # Refused before its body was read: the connection is closed at the deadline with
    # no second answer.
    with connect(port) as sock:
        sock.sendall(
            b"POST /api/v1/devboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n"
            b'{"name": "slow'
        )
        refused = answer(sock)
        assert refused.startswith(b"HTTP/1.1 401 Unauthorized\r\n"), refused
        assert refused.count(b"HTTP/1.1 ") == 1, refused


def test_an_answer_that_takes_longer_than_the_read_deadlines_is_not_cut(serve: Serve) -> None:
    port = serve(headerTimeoutSeconds=1, bodyTimeoutSeconds=1, keepAliveTimeoutSeconds=1)
    started = time.monotonic()
    held = get(
        port,
        f"/api/v1/devboxes/{WAITING_BOX}",
        params={"wait": "ready", "timeout": "3"},
        headers=AUTH,
    )
    assert held.status_code == 200, held.text
    assert held.json()["name"] == WAITING_BOX
    assert time.monotonic() - started >= 3


def refusal(port: int, source: str = "127.0.0.1") -> str:
    """What a connection over a cap reads when it waits for the server's first word."""
    with connect(port, source) as sock:
        status, detail = status_and_detail(answer(sock))
    assert status == 503
    return detail


def refused(port: int, source: str) -> bool:
    """A request over a cap is refused: with a 503, or, when the request had reached the
    server before the refusal was written, a reset connection."""
    try:
        return get(port, "/health", source=source).status_code == 503
    except requests.ConnectionError:
        return True


def test_a_client_over_its_cap_is_refused_while_another_address_is_served(
    serve: Serve,
) -> None:
    port = serve(maxPerClient=2, maxTotal=10, headerTimeoutSeconds=60)
    with ExitStack() as held:
        for _ in range(2):
            held.enter_context(connect(port))
        assert refusal(port) == (
            "too many connections: this address holds this replica's limit of 2 "
            "connections per client"
        )
        assert refused(port, "127.0.0.1")
        assert get(port, "/health", source=OTHER_ADDRESS).status_code == 200
        listed = get(port, "/api/v1/devboxes", source=OTHER_ADDRESS, headers=AUTH)
        assert listed.status_code == 200
    # The held connections are gone, and with them the first address's count.
    wait_for(lambda: not refused(port, "127.0.0.1"), timeout=GRACE, interval=0.1)


def test_connections_over_the_total_cap_are_refused(serve: Serve) -> None:
    port = serve(maxPerClient=2, maxTotal=3, headerTimeoutSeconds=60)
    with connect(port), connect(port), connect(port, OTHER_ADDRESS):
        assert refusal(port, "127.0.0.3") == (
            "too many connections: this replica holds its limit of 3 connections"
        )
        assert refused(port, "127.0.0.4")
    wait_for(lambda: not refused(port, "127.0.0.4"), timeout=GRACE, interval=0.1)


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(serve: Serve) -> None:
    port = serve(keepAliveTimeoutSeconds=1)
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with connect(port) as sock:
        sock.sendall(request)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 "), first
        # Kept alive: a second request on the same connection is answered.
        sock.sendall(request)
        second = sock.recv(65536)
        assert second.startswith(b"HTTP/1.1 200 "), second
        started = time.monotonic()
        assert sock.recv(65536) == b""
        assert time.monotonic() - started < GRACE


def _metric(port: int, name: str) -> float:
    text = get(port, "/metrics", headers=AUTH).text
    return sum(float(found) for found in re.findall(rf"^{name} ([0-9.e+]+)$", text, re.M))


def test_health_and_reads_answer_while_many_half_open_connections_are_held(
    serve: Serve,
) -> None:
    port = serve()
    sources = [f"127.0.0.{n}" for n in range(2, 7)]
    refused = 'devboxes_http_connections_closed_total{reason="per_client_limit"}'
    refused_before = _metric(port, re.escape(refused))
    per_client = ConnectionSettings().max_per_client
    attempts = per_client + 44
    with ExitStack() as held:
        opened: list[socket.socket] = []
        for source in sources:
            for _ in range(attempts):
                sock = held.enter_context(connect(port, source))
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                opened.append(sock)
        for _ in range(20):
            for sock in opened[:: len(opened) // 50]:
                # Those the cap refused are closed.
                with suppress(OSError):
                    sock.sendall(b"a")
            health = get(port, "/health")
            assert health.status_code == 200, health.text
            listed = get(port, "/api/v1/devboxes", headers=AUTH)
            assert listed.status_code == 200, listed.text
            assert [box["name"] for box in listed.json()["items"]] == [WAITING_BOX]
        # The held ones, and the few of this test's own reads not yet closed.
        open_now = _metric(port, "devboxes_http_connections")
        assert len(sources) * per_client <= open_now <= len(sources) * per_client + 3
        assert _metric(port, re.escape(refused)) - refused_before == len(sources) * 44


def test_the_open_file_limit_is_raised_to_fit_the_connections() -> None:
    """Container runtimes may start the controller with a soft limit of 1,024 open files,
    far below the connections allowed: the controller raises it as far as the hard limit
    lets it, and says when that is still too few."""
    script = (
        "import resource\n"
        "from devboxes_controller.config.connections import ConnectionSettings\n"
        "from devboxes_controller.web.connections import allow_open_files\n"
        "for total in (4096, 10000):\n"
        "    short = allow_open_files(ConnectionSettings(max_total=total))\n"
        "    print(short, *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 8192))

    ran = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=low_limit,
    )
    assert ran.stdout.splitlines() == ["None 4352 8192", "8192 8192 8192"]
