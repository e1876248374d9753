"""An event stream opened with a bearer token lasts while the token speaks for its caller as
it did when the stream opened: the controller asks the identity providers again at each
keepalive, here a real JupyterHub that revokes a token and takes a person out of the admin
group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from devboxes_controller.web.dashboard import KEEPALIVE_SECONDS
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.hub import ADMIN_GROUP, Hub
from support import StartController

# The shortest the settings allow, so that the hub's word on a token is asked again at the
# stream's next keepalive.
HUB_CACHE_SECONDS = 1
KEEPALIVE = ": keepalive"


@pytest.fixture
def hub_controller(start_controller: StartController, namespace: str, hub: Hub) -> Controller:
    settings = example_settings(namespace)
    settings["auth"] = {
        "adminGroups": [ADMIN_GROUP],
        "hub": {"apiUrl": hub.api_url, "cacheSeconds": HUB_CACHE_SECONDS},
    }
    return start_controller(settings)


@pytest.fixture
def olivia_demoted(hub: Hub) -> Iterator[None]:
    """For the test, olivia is out of the admin group; the module's hub gets her back."""
    yield
    hub.request("POST", f"/groups/{ADMIN_GROUP}/users", {"users": ["olivia"]})


def _open(controller: Controller, token: str) -> Iterator[str]:
    """The lines of a new stream; its first, the reconnection delay, already read."""
    stream = requests.get(
        f"{controller.url}/dashboard/events",
        headers={"Authorization": f"Bearer {token}"},
        stream=True,
        # Bytes come at least every keepalive; three of them is a stream that stopped.
        timeout=(10, 3 * KEEPALIVE_SECONDS),
    )
    assert stream.status_code == 200, stream.text
    lines = (line for line in stream.iter_lines(decode_unicode=True) if line)
    assert next(lines).startswith("retry: ")
    return lines


def _ending(lines: Iterator[str]) -> tuple[str, dict[str, Any]]:
    """The last event of a stream the controller ended, with its data; fails on a stream
    that goes on past a second keepalive, one more than the check takes."""
    last: list[str] = []
    keepalives = 0
    for line in lines:
        if line.startswith("event: "):
            last = [line.removeprefix("event: ")]
        elif line.startswith("data: ") and last:
            last.append(line.removeprefix("data: "))
        elif line == KEEPALIVE:
            keepalives += 1
            assert keepalives < 2, "the stream goes on"
    assert len(last) == 2, f"the stream ended without an event: {last}"
    return last[0], json.loads(last[1])


def test_a_stream_ends_once_its_token_no_longer_speaks_for_its_caller_as_it_did(
    hub: Hub, hub_controller: Controller, olivia_demoted: None
) -> None:
    made = hub.request("POST", "/users/alice/tokens", {"note": "event stream"})
    alice = _open(hub_controller, made["token"])
    olivia = _open(hub_controller, hub.token_for("olivia"))
    bob = _open(hub_controller, hub.token_for("bob"))

    hub.request("DELETE", f"/users/alice/tokens/{made['id']}")
    hub.request("DELETE", f"/groups/{ADMIN_GROUP}/users", {"users": ["olivia"]})

    assert _ending(alice) == ("expired", {"reason": "the token no longer holds: invalid token"})
    assert _ending(olivia) == (
        "expired",
        {"reason": "olivia is no longer an admin; open the stream again"},
    )
    # bob's token was asked about at the same keepalive, which the stream then sent.
    seen = []
    for line in bob:
        seen.append(line)
        if line == KEEPALIVE:
            break
    assert not any(line.startswith("event: expired") for line in seen)
    log = hub_controller.log.read_text()
    assert made["token"] not in log
