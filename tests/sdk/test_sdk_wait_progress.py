"""A wait tells its caller when a waiting box's place in line moves, not only when its
state or message does. Against a small local server that answers a scripted sequence."""

from __future__ import annotations

import http.server
from collections.abc import Iterator

import pytest
from support import JsonHandler, serving

from devboxes_sdk import Client
from devboxes_sdk.models import Devbox

TOKEN = "wait-test-token-" + "w" * 32
BLOCKED = "Scheduling blocked: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
BOX = {
    "name": "queued",
    "preset": "small",
    "created_at": "2026-12-02T08:00:00Z",
    "gpu": {
        "profile": "nvidia-l4",
        "display_name": "NVIDIA L4",
        "resource_name": "nvidia.com/gpu",
        "count": 1,
    },
}
# The same state and scheduler sentence throughout; only the summary moves.
SEQUENCE = [
    dict(BOX, state="starting", message=BLOCKED, summary=f"Waiting: 0 of 2 free, {place}")
    for place in ("2nd in line (estimate)", "2nd in line (estimate)", "1st in line (estimate)")
] + [dict(BOX, state="ready", message="Ready for SSH.")]


class _ScriptedServer(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.answers = list(SEQUENCE)


class _ScriptedHandler(JsonHandler):
    server: _ScriptedServer

    def do_GET(self) -> None:
        answers = self.server.answers
        box = answers.pop(0) if len(answers) > 1 else answers[0]
        self.send_json(200, box)


@pytest.fixture
def scripted() -> Iterator[_ScriptedServer]:
    with serving(_ScriptedServer()) as server:
        yield server


def test_a_moving_place_in_line_is_an_update(scripted: _ScriptedServer) -> None:
    seen: list[Devbox] = []
    with Client(f"http://127.0.0.1:{scripted.server_port}", TOKEN) as devboxes:
        ready = devboxes.wait_ready("queued", timeout=30, on_update=seen.append)
    assert ready.state.value == "ready"
    assert [box.summary for box in seen] == [
        "Waiting: 0 of 2 free, 2nd in line (estimate)",
        "Waiting: 0 of 2 free, 1st in line (estimate)",
        None,
    ]
