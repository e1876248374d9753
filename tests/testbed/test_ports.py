"""Ports are picked free and released before the process given one binds it, so another
process may take it in between: the testbed starts that process again on new ports, and
two stacks start side by side on one machine."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from devboxes_testbed import hub as hub_module
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.hub import Hub, hub_people
from devboxes_testbed.process import START_TIMEOUT, free_port
from devboxes_testbed.stack import Stack
from support import REPO, Api

pytestmark = pytest.mark.testbed


def held_port() -> socket.socket:
    """A port another process took: listening, as a server that got there first."""
    return socket.create_server(("127.0.0.1", 0))


def through_proxy(hub: Hub) -> requests.Response:
    """The hub's own API as people reach it, through its proxy's public port: only this
    hub knows the testbed service's token."""
    return requests.get(
        f"{hub.url}api/user",
        headers={"Authorization": f"token {hub.service_token}"},
        timeout=30,
    )


# Well under the START_TIMEOUT a start may wait out: a port found taken is picked again as
# soon as the proxy says so, not once the wait has run out.
@pytest.mark.timeout(START_TIMEOUT * 2 / 3)
@pytest.mark.parametrize("name", ["public", "proxy_api"])
def test_a_hub_whose_proxy_port_was_taken_after_it_was_picked_comes_up_on_another(
    tmp_path: Path, name: str
) -> None:
    with held_port() as held:
        taken = held.getsockname()[1]
        hub = Hub(tmp_path / "hub", ports={name: taken})
        hub.start(log=lambda message: None)
        try:
            answer = through_proxy(hub)
            assert answer.status_code == 200, answer.text
            assert answer.json()["name"] == "testbed"
            assert hub.ports[name] != taken
        finally:
            hub.stop()


@pytest.fixture
def isolated_jupyter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Labs' own directories under the test's, not those of whoever runs the tests."""
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.delenv("JUPYTER_TOKEN", raising=False)


@pytest.fixture
def first_hub_port_taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The first port picked for a hub is one this test holds, as if another process took
    it right after it was picked; the list holds it once it was handed out."""
    handed: list[int] = []
    with held_port() as held:

        def pick() -> int:
            if not handed:
                handed.append(held.getsockname()[1])
                return handed[0]
            return free_port()

        monkeypatch.setattr(hub_module, "free_port", pick)
        yield handed


def start_side_by_side(stacks: list[Stack]) -> None:
    failures: list[BaseException] = []

    def start(stack: Stack) -> Callable[[], None]:
        def run() -> None:
            try:
                stack.start()
            except BaseException as error:  # noqa: BLE001 - reported by the test's thread
                failures.append(error)

        return run

    threads = [threading.Thread(target=start(stack)) for stack in stacks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def ports_of(stack: Stack) -> set[int]:
    assert stack.controller is not None
    assert stack.hub is not None
    assert stack.issuer is not None
    return {
        *stack.testbed.ports.values(),
        *stack.ports.values(),
        *stack.hub.ports.values(),
        stack.controller.port,
        stack.issuer.port,
    }


@pytest.mark.usefixtures("isolated_jupyter")
def test_two_stacks_start_side_by_side_and_each_serves_its_own(
    tmp_path: Path, first_hub_port_taken: list[int]
) -> None:
    stacks = [
        Stack(
            Testbed(
                tmp_path / f"testbed-{n}", REPO / "testbed" / "nodes.yaml", log=lambda message: None
            ),
            tmp_path / f"stack-{n}",
        )
        for n in range(2)
    ]
    try:
        start_side_by_side(stacks)
        assert ports_of(stacks[0]).isdisjoint(ports_of(stacks[1]))
        for n, stack in enumerate(stacks):
            assert stack.controller is not None
            assert stack.hub is not None
            assert first_hub_port_taken[0] not in ports_of(stack)
            api = Api(stack.controller)
            api.created(f"side-{n}")
            api.wait_ready(f"side-{n}")
            # The controller names the hub's API where the hub is, even when its first
            # port was taken: it knows the hub's people.
            alice = hub_people(stack.hub)["alice"]
            listed = requests.get(
                f"{stack.controller_url}/api/v1/devboxes",
                headers={"Authorization": f"Bearer {alice}"},
                timeout=30,
            )
            assert listed.status_code == 200, listed.text
            assert through_proxy(stack.hub).status_code == 200
            status = requests.get(
                f"http://127.0.0.1:{stack.ports['jupyter']}/api/status",
                headers={"Authorization": f"token {stack.jupyter_token}"},
                timeout=30,
            )
            assert status.status_code == 200, status.text
    finally:
        for stack in stacks:
            stack.stop()
