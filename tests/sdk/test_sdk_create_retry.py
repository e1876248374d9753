"""A create is retried with its idempotency key; other writes are sent once. Against a
small local server that refuses every write with 503 and records what it was sent."""

from __future__ import annotations

import http.server
from collections.abc import Iterator

import pytest
from support import JsonHandler, serving

from devboxes_sdk import Client, Unavailable
from devboxes_sdk.models import IDEMPOTENCY_HEADER

TOKEN = "retry-test-token-" + "z" * 32


class _BusyServer(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _BusyHandler)
        self.seen: list[tuple[str, str | None]] = []


class _BusyHandler(JsonHandler):
    server: _BusyServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.path, self.headers.get(IDEMPOTENCY_HEADER)))
        self.send_json(503, {"detail": "Kubernetes API unavailable"}, {"Retry-After": "5"})


@pytest.fixture
def busy(monkeypatch: pytest.MonkeyPatch) -> Iterator[_BusyServer]:
    monkeypatch.setattr("devboxes_sdk._transport._RETRY_DELAYS", (0.0, 0.0, 0.0))
    with serving(_BusyServer()) as server:
        yield server


def test_a_create_is_retried_with_one_key_and_the_next_create_has_its_own(
    busy: _BusyServer,
) -> None:
    with Client(f"http://127.0.0.1:{busy.server_port}", TOKEN) as devboxes:
        for _ in range(2):
            with pytest.raises(Unavailable):
                devboxes.create("alpha")
    assert [path for path, _ in busy.seen] == ["/api/v1/devboxes"] * 8
    keys = [key for _, key in busy.seen]
    first, second = keys[:4], keys[4:]
    assert len(set(first)) == len(set(second)) == 1
    assert None not in keys
    assert first[0] != second[0]


def test_other_writes_are_sent_once(busy: _BusyServer) -> None:
    with (
        Client(f"http://127.0.0.1:{busy.server_port}", TOKEN) as devboxes,
        pytest.raises(Unavailable),
    ):
        devboxes.start("alpha")
    assert busy.seen == [("/api/v1/devboxes/alpha/start", None)]
