"""A person's Lab in a real JupyterHub: the extension in the single-user server the hub
starts speaks to the controller with that person's hub token, which the controller's
hub verifier then knows as that person."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from devboxes_controller.web.identity.base import Identity
from devboxes_controller.web.identity.hub import HubVerifier
from devboxes_testbed.hub import Hub
from support import JsonHandler

WHOAMI = "/api/v1/whoami"
ALICE_WHOAMI = {"user": "alice", "mode": "hub", "groups": ["ml"], "admin": False}


class Recorder:
    """A loopback stand-in for the controller: answers whoami as alice's and every other
    read with an empty box list, and keeps the path and Authorization header of every
    request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        recorder = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                recorder.seen.append((self.path, self.headers.get("Authorization")))
                answer = ALICE_WHOAMI if self.path == WHOAMI else {"items": []}
                self.send_json(200, answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    thread = threading.Thread(
        target=made.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield made
    made.server.shutdown()
    made.server.server_close()


@pytest.fixture
def hub_with_controller(tmp_path: Path, recorder: Recorder) -> Iterator[Hub]:
    started = Hub(tmp_path / "hub", controller_url=recorder.url)
    started.start(log=lambda message: None)
    try:
        yield started
    finally:
        started.stop()


def test_alices_lab_acts_as_alice(hub_with_controller: Hub, recorder: Recorder) -> None:
    hub = hub_with_controller
    server = hub.start_server("alice")
    alice = hub.token_for("alice")
    # The Lab's sidebar asks its own server, which asks the controller.
    response = requests.get(
        f"{hub.url.removesuffix('/hub/')}{server['url']}devboxes/api/devboxes",
        headers={"Authorization": f"token {alice}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"items": []}
    # As it starts, the server asks whose its token is (and what the controller offers)
    # to offer devbox kernels; the sidebar's list is the one request of the test's own.
    paths = [path for path, _ in recorder.seen]
    assert WHOAMI in paths
    assert paths.count("/api/v1/devboxes") == 1
    assert len({header for _, header in recorder.seen}) == 1
    scheme, _, presented = (recorder.seen[0][1] or "").partition(" ")
    assert scheme == "Bearer"
    # The server's own token from the hub, not the token the browser used.
    assert presented not in ("", alice)
    assert presented not in response.text

    async def who() -> Identity | None:
        verifier = HubVerifier(hub.api_url, 30)
        try:
            return await verifier.identify(presented)
        finally:
            await verifier.aclose()

    assert asyncio.run(who()) == Identity("alice", "hub", ("ml",))
