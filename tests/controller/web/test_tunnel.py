"""The tunnel to a box's sshd: ``/api/v1/devboxes/{name}/ssh`` over a WebSocket.

The controller's real application is served by uvicorn with the controller's own protocol
and options on loopback, its caches filled with recorded boxes and never started. The
ready box's pod address is moved to a loopback address where a plain TCP server stands
in for the box's sshd: it answers each chunk in upper case, so an answer cannot be the
client's own bytes. The SDK's client and the ``devbox`` command are the clients.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from devboxes_controller.box import naming, stop_warning
from devboxes_controller.config.boxes import SSH_CONTAINER_PORT
from devboxes_controller.k8s.timestamps import format_timestamp
from devboxes_controller.web.identity.base import Identity
from devboxes_controller.web.tunnel import NOTICE_SECONDS
from kubernetes import client
from served import Served, recorded_store, settings_with_connections
from support import wait_for

from devboxes_sdk import Client
from devboxes_sdk.errors import ApiError, AuthenticationError, Conflict, NotFound

TOKEN = "tunnel-test-token-" + "t" * 32
# A person's token, as the identity provider below vouches for it: "person-<name>".
PERSON = "person-"
READY_BOX = "cpu"


class _People:
    """An identity provider that vouches for ``person-<name>`` tokens."""

    async def identify(self, token: str) -> Identity | None:
        if not token.startswith(PERSON):
            return None
        return Identity(user=token.removeprefix(PERSON), mode="oidc")

    async def aclose(self) -> None:
        return None


class Upper:
    """A TCP server that answers every chunk it reads in upper case, on one loopback
    address; stands in for a box's sshd."""

    def __init__(self) -> None:
        # A loopback address of its own: the port is the box's fixed SSH port.
        self.address = f"127.0.{random.randint(1, 254)}.{random.randint(2, 254)}"
        self.listener = socket.create_server((self.address, SSH_CONTAINER_PORT))
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    @staticmethod
    def _answer(connection: socket.socket) -> None:
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data.upper())

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def sshd() -> Iterator[Upper]:
    server = Upper()
    yield server
    server.close()


Serve = Callable[..., str]


@pytest.fixture
def serve(sshd: Upper) -> Iterator[Serve]:
    """Call with ``connections`` settings (camelCase keys); returns the API's URL."""
    served = Served()

    def start(annotations: dict[str, str] | None = None, **connections: int) -> str:
        """``annotations`` are added to the ready box's Deployment."""
        settings = settings_with_connections(connections)
        api = client.ApiClient()
        store = recorded_store(
            settings,
            api,
            (READY_BOX, "stopped", "unplaceable"),
            READY_BOX,
            sshd.address,
            {READY_BOX: annotations or {}},
        )
        port = served.start(settings, store, api, TOKEN, verifiers=[_People()])
        return f"http://127.0.0.1:{port}"

    yield start
    served.stop()


def _metric(url: str, name: str) -> float:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    text = requests.get(f"{url}/metrics", headers=auth, timeout=15).text
    line = next(line for line in text.splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


def test_bytes_cross_the_tunnel_both_ways_and_the_connection_is_released(
    serve: Serve, sshd: Upper
) -> None:
    url = serve()
    before = _metric(url, "devboxes_http_connections")
    with Client(url, TOKEN) as api:
        tunnel = api.tunnel(READY_BOX)
        with tunnel:
            assert _metric(url, "devboxes_tunnels") == 1
            for chunk in (b"ssh-2.0-openssh\r\n", bytes(range(256)) * 300):
                tunnel.send(chunk)
                received = b""
                while len(received) < len(chunk):
                    received += tunnel.recv(timeout=15)  # type: ignore[operator]
                assert received == chunk.upper()
    assert sshd.accepted == 1
    wait_for(lambda: _metric(url, "devboxes_tunnels") == 0, timeout=15)
    wait_for(lambda: _metric(url, "devboxes_http_connections") == before, timeout=15)
    assert _metric(url, 'devboxes_tunnel_bytes_total{direction="to_box"}') == 17 + 256 * 300


def test_a_tunnel_is_refused_as_the_api_refuses_the_box(serve: Serve, sshd: Upper) -> None:
    url = serve()
    with pytest.raises(AuthenticationError):
        Client(url, "not-a-token-" + "x" * 20).tunnel(READY_BOX)
    # Another person's box is as absent as one that does not exist.
    with pytest.raises(NotFound) as elsewhere:
        Client(url, PERSON + "alice").tunnel(READY_BOX)
    with pytest.raises(NotFound) as absent:
        Client(url, TOKEN).tunnel("no-such-box")
    assert str(elsewhere.value).replace(READY_BOX, "X") == str(absent.value).replace(
        "no-such-box", "X"
    )
    with pytest.raises(Conflict, match="devbox 'stopped' is stopped; start it with"):
        Client(url, TOKEN).tunnel("stopped")
    with pytest.raises(Conflict, match="devbox 'unplaceable' is starting, not ready"):
        Client(url, TOKEN).tunnel("unplaceable")
    assert sshd.accepted == 0


def test_a_person_holds_at_most_their_share_of_tunnels(serve: Serve) -> None:
    url = serve(tunnelsPerPerson=1)
    with Client(url, TOKEN) as api, api.tunnel(READY_BOX):
        with pytest.raises(ApiError, match=r"tunnelsPerPerson") as refused:
            api.tunnel(READY_BOX)
        assert refused.value.status == 429
    with Client(url, TOKEN) as api, api.tunnel(READY_BOX) as again:
        again.send(b"x")
        assert again.recv(timeout=15) == b"X"


def test_devbox_ssh_stdio_carries_standard_input_and_output(serve: Serve) -> None:
    url = serve()
    environment = {**os.environ, "DEVBOX_URL": url, "DEVBOX_TOKEN": TOKEN}
    done = subprocess.run(
        [sys.executable, "-m", "devboxes_sdk", "ssh", "--stdio", f"{READY_BOX}.devbox"],
        input=b"hello box\n",
        capture_output=True,
        env=environment,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"HELLO BOX\n"


def test_devbox_ssh_stdio_says_in_one_line_why_a_box_cannot_be_reached(serve: Serve) -> None:
    url = serve()
    environment = {**os.environ, "DEVBOX_URL": url, "DEVBOX_TOKEN": TOKEN}
    done = subprocess.run(
        [sys.executable, "-m", "devboxes_sdk", "ssh", "--stdio", "stopped"],
        capture_output=True,
        env=environment,
        timeout=60,
        check=False,
        text=True,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "Devboxes API returned 409: devbox 'stopped' is stopped; start it with: "
        "devbox start stopped"
    ]


def test_config_ssh_writes_one_block_for_the_controller_it_was_given(
    serve: Serve, tmp_path: Path
) -> None:
    url = serve()
    config = tmp_path / "ssh" / "config"
    environment = {**os.environ, "DEVBOX_URL": url, "DEVBOX_TOKEN": TOKEN}

    def config_ssh(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "devboxes_sdk", "config-ssh", "--file", str(config)]
        return subprocess.run(
            [*command, *extra], capture_output=True, env=environment, text=True, check=False
        )

    shown = config_ssh("--dry-run")
    assert shown.returncode == 0, shown.stderr
    assert not config.exists()
    written = config_ssh()
    assert written.returncode == 0, written.stderr
    assert config.read_text() == shown.stdout
    assert f"/env DEVBOX_URL={url} " in shown.stdout
    assert config.stat().st_mode & 0o777 == 0o600
    assert config_ssh().returncode == 0
    assert config.read_text() == shown.stdout


def _warned(stops_in: timedelta, warned_in: timedelta | None = None) -> dict[str, str]:
    """The ready box's annotations once the leader warned of its time to live's end,
    ``stops_in`` from now (of a stop ``warned_in`` from now, when that one has moved)."""
    now = datetime.now(UTC)
    warned = format_timestamp(now + (warned_in or stops_in))
    return {
        naming.ANNOTATION_EXPIRES_AT: format_timestamp(now + stops_in),
        stop_warning.ANNOTATION_STOP_WARNED: f"ttl {warned}",
    }


def test_a_tunnel_that_asks_carries_the_box_s_stop_warning_once(serve: Serve) -> None:
    url = serve(_warned(timedelta(minutes=5)))
    with Client(url, TOKEN) as api, api.tunnel(READY_BOX, notices=True) as tunnel:
        notice = tunnel.recv(timeout=15)
        assert isinstance(notice, str)
        assert notice.startswith(f"Box {READY_BOX} stops in 5 min, at ")
        assert "its time to live ends" in notice
        tunnel.send(b"still here")
        assert tunnel.recv(timeout=15) == b"STILL HERE"
        # Told once: the next looks find nothing new.
        with pytest.raises(TimeoutError):
            tunnel.recv(timeout=3 * NOTICE_SECONDS)
    # A client that did not ask gets bytes only.
    with Client(url, TOKEN) as api, api.tunnel(READY_BOX) as tunnel:
        tunnel.send(b"quiet")
        assert tunnel.recv(timeout=15) == b"QUIET"
        with pytest.raises(TimeoutError):
            tunnel.recv(timeout=3 * NOTICE_SECONDS)


def test_a_warning_of_a_stop_that_has_moved_since_is_not_carried(serve: Serve) -> None:
    url = serve(_warned(timedelta(hours=2), warned_in=timedelta(minutes=5)))
    with Client(url, TOKEN) as api, api.tunnel(READY_BOX, notices=True) as tunnel:
        tunnel.send(b"x")
        assert tunnel.recv(timeout=15) == b"X"
        with pytest.raises(TimeoutError):
            tunnel.recv(timeout=3 * NOTICE_SECONDS)


def test_devbox_ssh_stdio_prints_the_warning_on_its_own_line_beside_the_session(
    serve: Serve,
) -> None:
    url = serve(_warned(timedelta(minutes=5)))
    environment = {**os.environ, "DEVBOX_URL": url, "DEVBOX_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "devboxes_sdk", "ssh", "--stdio", f"{READY_BOX}.devbox"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(b"hello box\n")
    process.stdin.flush()
    assert process.stdout.readline() == b"HELLO BOX\n"
    # Past the tunnel's first looks for a notice.
    threading.Event().wait(2 * NOTICE_SECONDS)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out == b""
    lines = err.decode().split("\r\n")
    notices = [line for line in lines if line.startswith(f"devbox: Box {READY_BOX} stops in ")]
    assert len(notices) == 1, err
    assert notices[0].startswith(f"devbox: Box {READY_BOX} stops in 5 min, at ")
