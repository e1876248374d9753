"""Hostile and odd requests: refused early, precisely, and without cost to the server."""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from collections import Counter
from contextlib import ExitStack

import pytest
import requests
from devboxes_testbed.controller import Controller, example_settings
from support import StartController, wait_for

HUNDRED_MB = 100 * 1024 * 1024
CHUNK = b"{" * (1024 * 1024)


def send_huge_body(controller: Controller, headers: str) -> tuple[bytes, int]:
    """POST a declared 100 MB body, streaming it until the server answers or hangs up.

    Returns the status line and the bytes the server let us send before it answered."""
    sock = socket.create_connection(("127.0.0.1", controller.port), timeout=30)
    sent = 0
    answer = b""
    answered = threading.Event()

    def read() -> None:
        nonlocal answer
        try:
            answer = sock.recv(4096)
        finally:
            answered.set()

    request = (
        f"POST /api/v1/devboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
        f"Content-Type: application/json\r\nContent-Length: {HUNDRED_MB}\r\n\r\n"
    )
    sock.sendall(request.encode())
    reader = threading.Thread(target=read)
    reader.start()
    try:
        while sent < HUNDRED_MB and not answered.is_set():
            sock.sendall(CHUNK)
            sent += len(CHUNK)
    except OSError:
        pass  # the server closed the connection after answering
    reader.join(30)
    sock.close()
    return answer.split(b"\r\n", 1)[0], sent


def test_a_huge_unauthenticated_body_is_refused_before_it_is_read(
    controller: Controller,
) -> None:
    before = controller.rss_kib()
    status, _sent = send_huge_body(controller, "")
    assert status == b"HTTP/1.1 401 Unauthorized", status
    grown_kib = controller.rss_kib() - before
    assert grown_kib < 5 * 1024, f"RSS grew by {grown_kib} KiB"


def test_a_huge_authenticated_body_gets_413(controller: Controller) -> None:
    before = controller.rss_kib()
    status, _sent = send_huge_body(controller, f"Authorization: Bearer {controller.token}\r\n")
    assert status == b"HTTP/1.1 413 Request Entity Too Large", status
    assert controller.rss_kib() - before < 5 * 1024


def test_a_chunked_body_over_the_limit_gets_413(controller: Controller) -> None:
    def chunks() -> object:
        for _ in range(64):
            yield b" " * 1024

    response = requests.post(
        f"{controller.url}/api/v1/devboxes",
        data=chunks(),
        headers={**controller.headers(), "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 413, response.text
    assert "limit" in response.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"\xff\xfe\x00", b'{"name": 1}', b""],
    ids=["bad", "binary", "typed", "empty"],
)
def test_unauthenticated_malformed_bodies_get_401(controller: Controller, body: bytes) -> None:
    response = requests.post(
        f"{controller.url}/api/v1/devboxes",
        data=body,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("name", ["\u212aelvin", "caf\u00e9", "abc\u0131", "ab\uff43"])
def test_unicode_lookalike_names_are_refused(controller: Controller, name: str) -> None:
    response = requests.post(
        f"{controller.url}/api/v1/devboxes",
        json={"name": name},
        headers=controller.headers(),
        timeout=30,
    )
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "name"]
    assert "lowercase letters" in error["msg"]
    path = requests.get(
        f"{controller.url}/api/v1/devboxes/{name}", headers=controller.headers(), timeout=30
    )
    assert path.status_code == 422, path.text


def test_a_wrong_method_lists_every_method_the_path_takes(controller: Controller) -> None:
    response = requests.put(
        f"{controller.url}/api/v1/devboxes", headers=controller.headers(), timeout=30
    )
    assert response.status_code == 405
    assert set(response.headers["Allow"].split(", ")) >= {"GET", "POST"}
    one = requests.put(
        f"{controller.url}/api/v1/devboxes/{uuid.uuid4().hex[:8]}",
        headers=controller.headers(),
        timeout=30,
    )
    assert one.status_code == 405
    assert set(one.headers["Allow"].split(", ")) >= {"GET", "DELETE"}


def _metric(controller: Controller, pattern: str) -> float:
    text = requests.get(f"{controller.url}/metrics", headers=controller.headers(), timeout=10).text
    return sum(float(found) for found in re.findall(pattern + r" ([0-9.e+]+)", text))


def test_a_client_that_hangs_up_mid_body_is_a_disconnect_not_a_server_error(
    controller: Controller,
) -> None:
    disconnects = r'devboxes_http_disconnects_total\{method="POST",route="unmatched"\}'
    server_errors = r'devboxes_http_requests_total\{[^}]*status="5\d\d"\}'
    before = _metric(controller, disconnects), _metric(controller, server_errors)
    token = controller.headers()["Authorization"]
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", controller.port), timeout=30) as sock:
            sock.sendall(
                f"POST /api/v1/devboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {token}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                '{"name": '.encode()
            )
    assert wait_for(lambda: _metric(controller, disconnects) >= before[0] + 3, timeout=60)
    assert _metric(controller, server_errors) == before[1]


def _exchange(address: tuple[str, int], source: str, request: bytes) -> bytes:
    """Send ``request`` from ``source`` and read until the controller closes."""
    with socket.create_connection(address, timeout=30, source_address=(source, 0)) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        return received


def test_the_controller_process_applies_its_connection_settings(
    start_controller: StartController, namespace: str
) -> None:
    limits = {"headerTimeoutSeconds": 10, "maxPerClient": 2, "maxTotal": 8}
    controller = start_controller({**example_settings(namespace), "connections": limits})
    address = ("127.0.0.1", controller.port)
    health = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    with (
        socket.create_connection(address, timeout=30, source_address=("127.0.0.1", 0)) as slow,
        socket.create_connection(address, timeout=30, source_address=("127.0.0.1", 0)),
    ):
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        refused = _exchange(address, "127.0.0.1", b"")
        assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), refused
        served = _exchange(address, "127.0.0.2", health)
        assert served.startswith(b"HTTP/1.1 200 OK\r\n"), served
        cut = slow.recv(4096)
        assert cut.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), cut


def test_probes_answer_on_their_own_port_while_many_addresses_hold_the_api_at_its_cap(
    start_controller: StartController, namespace: str
) -> None:
    """A slowloris from many addresses fills the API's connections; the kubelet's probes,
    on the probe port, are all answered."""
    flooders = [f"127.0.0.{n}" for n in range(2, 12)]
    per_address = 4
    cap = len(flooders) * per_address
    # The head deadline outlasts the test, so the flood holds every connection throughout.
    limits = {"headerTimeoutSeconds": 300, "maxPerClient": per_address, "maxTotal": cap}
    controller = start_controller(
        {**example_settings(namespace), "connections": limits}, probes=True
    )
    api = ("127.0.0.1", controller.port)
    probes = ("127.0.0.1", controller.probe_port)
    with ExitStack() as flood:
        for source in flooders:
            for _ in range(per_address):
                held = socket.create_connection(api, timeout=30, source_address=(source, 0))
                flood.enter_context(held).sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # A new connection is refused at once: connections are taken in order, so the
        # flood's were all admitted first. It sends nothing, since a refusal resets a
        # connection whose request arrived unread.
        at_cap = _exchange(api, "127.0.0.100", b"")
        head, _, body = at_cap.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), at_cap
        assert json.loads(body) == {
            "detail": f"too many connections: this replica holds its limit of {cap} connections"
        }
        answers: Counter[tuple[str, bytes]] = Counter()
        for n in range(30):
            path = ("/health", "/ready")[n % 2]
            request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            answer = _exchange(probes, flooders[n % len(flooders)], request.encode())
            answers[path, answer.split(b"\r\n", 1)[0]] += 1
        assert answers == {
            ("/health", b"HTTP/1.1 200 OK"): 15,
            ("/ready", b"HTTP/1.1 200 OK"): 15,
        }
        still = _exchange(api, "127.0.0.101", b"")
        assert still.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), still
