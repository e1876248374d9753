"""The SDK pages through the box list, against a small local server that pages by name
and expires its tokens when told to."""

from __future__ import annotations

import http.server
import itertools
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from support import JsonHandler, serving

from devboxes_sdk import Client, ListExpired

TOKEN = "paging-test-token-" + "z" * 32
# Named so that name order and newest-first order differ.
BOXES = {"delta": 1, "alpha": 4, "echo": 2, "charlie": 5, "bravo": 3}


def _box(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "state": "stopped",
        "preset": "small",
        "created_at": f"2026-12-0{BOXES[name]}T00:00:00Z",
    }


class _PagingServer(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _PagingHandler)
        self.queries: list[dict[str, list[str]]] = []
        # Answers to a request with a continue token: 410 while this is positive.
        self.expiries = 0
        # A server from before paging answers every request with the whole list.
        self.pages = True
        # What the last page carries as its continue.
        self.end: str | None = None


class _PagingHandler(JsonHandler):
    server: _PagingServer

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)
        self.server.queries.append(query)
        status, answer = 200, self._answer(query)
        if "continue" in query and self.server.expiries > 0:
            self.server.expiries -= 1
            status, answer = 410, {"detail": "the continue token has expired"}
        self.send_json(status, answer)

    def _answer(self, query: dict[str, list[str]]) -> dict[str, Any]:
        if not self.server.pages:
            newest = sorted(BOXES, key=BOXES.__getitem__, reverse=True)
            return {"items": [_box(name) for name in newest]}
        limit = int(query["limit"][0])
        after = query.get("continue", [""])[0]
        names = [name for name in sorted(BOXES) if name > after]
        page = names[:limit]
        following = page[-1] if len(names) > limit else self.server.end
        return {"items": [_box(name) for name in page], "continue": following}


@pytest.fixture
def server() -> Iterator[_PagingServer]:
    with serving(_PagingServer()) as running:
        yield running


@pytest.fixture
def devboxes(server: _PagingServer) -> Iterator[Client]:
    with Client(f"http://127.0.0.1:{server.server_port}", TOKEN) as client:
        yield client


def test_iteration_follows_the_pages_in_name_order(server: _PagingServer, devboxes: Client) -> None:
    boxes = devboxes.iter_boxes(page_size=2, state="stopped")
    assert next(boxes).name == "alpha"
    assert len(server.queries) == 1
    assert [box.name for box in boxes] == ["bravo", "charlie", "delta", "echo"]
    assert [q.get("continue") for q in server.queries] == [None, ["bravo"], ["delta"]]
    assert all(q["state"] == ["stopped"] and q["limit"] == ["2"] for q in server.queries)


def test_an_empty_continue_ends_the_list_as_in_kubernetes(
    server: _PagingServer, devboxes: Client
) -> None:
    server.end = ""
    # Bounded: a client that sent the empty value back would go round the list forever.
    names = [box.name for box in itertools.islice(devboxes.iter_boxes(page_size=2), 20)]
    assert names == sorted(BOXES)
    assert [q.get("continue") for q in server.queries] == [None, ["bravo"], ["delta"]]


def test_a_list_with_a_page_size_is_still_newest_first(devboxes: Client) -> None:
    names = [box.name for box in devboxes.list(page_size=2)]
    assert names == ["charlie", "alpha", "bravo", "echo", "delta"]


def test_an_expired_list_starts_again_once_without_repeating_a_box(
    server: _PagingServer, devboxes: Client
) -> None:
    server.expiries = 1
    assert [box.name for box in devboxes.iter_boxes(page_size=2)] == sorted(BOXES)
    assert [q.get("continue") for q in server.queries] == [
        None,
        ["bravo"],
        None,
        ["bravo"],
        ["delta"],
    ]


def test_a_list_that_expires_again_raises_list_expired(
    server: _PagingServer, devboxes: Client
) -> None:
    server.expiries = 2
    with pytest.raises(ListExpired, match="expired again after starting over") as caught:
        list(devboxes.iter_boxes(page_size=2))
    assert caught.value.status == 410


def test_a_server_from_before_paging_gives_the_whole_list_at_once(
    server: _PagingServer, devboxes: Client
) -> None:
    server.pages = False
    assert sorted(box.name for box in devboxes.iter_boxes(page_size=2)) == sorted(BOXES)
    assert len(server.queries) == 1


@pytest.mark.parametrize("size", [0, 1001])
def test_a_page_size_out_of_range_is_refused_before_any_request(
    server: _PagingServer, devboxes: Client, size: int
) -> None:
    with pytest.raises(ValueError, match="between 1 and 1000"):
        next(devboxes.iter_boxes(page_size=size))
    assert server.queries == []
