"""The event stream's snapshot, read from the kept box bodies a slice at a time: every box
once, as valid JSON, whatever changes between two slices, and never a list of its own."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from devboxes_controller.state.answers import Answers
from devboxes_controller.web import dashboard
from devboxes_controller.web.dashboard import snapshot

from devboxes_sdk.models import Devbox, DevboxState

SLICE = 10
CREATED = datetime(2026, 12, 1, tzinfo=UTC)


def box(name: str, owner: str = "alice") -> Devbox:
    return Devbox(
        name=name, state=DevboxState.STOPPED, preset="small", created_at=CREATED, owner=owner
    )


def kept(count: int) -> Answers:
    answers = Answers()
    for number in range(count):
        answers.put(box(f"box-{number:03d}", owner="alice" if number % 2 else "bob"))
    return answers


def body_of(answers: Answers) -> Callable[[str], bytes | None]:
    def read(name: str) -> bytes | None:
        kept = answers.body(name)
        return None if kept is None else kept.data

    return read


def sent(answers: Answers, shown: set[str], owner: str | None = None) -> Iterator[bytes]:
    return snapshot(answers.names((owner, None, None)), body_of(answers), shown)


def items(chunks: Iterator[bytes] | list[bytes]) -> list[dict[str, Any]]:
    event = b"".join(chunks)
    head = b"event: snapshot\ndata: "
    assert event.startswith(head)
    assert event.endswith(b"\n\n")
    data = event[len(head) : -2]
    assert b"\n" not in data
    return list(json.loads(data)["items"])


def test_every_box_once_over_many_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard, "SLICE", SLICE)
    shown: set[str] = set()
    chunks = list(sent(kept(35), shown))
    # The event's head, four slices of at most ten boxes, the end.
    assert len(chunks) == 6
    names = [item["name"] for item in items(chunks)]
    assert names == [f"box-{number:03d}" for number in range(35)]
    assert shown == set(names)


def test_an_owners_snapshot_holds_only_their_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard, "SLICE", SLICE)
    shown: set[str] = set()
    names = [item["name"] for item in items(sent(kept(35), shown, "alice"))]
    assert names == [f"box-{number:03d}" for number in range(1, 35, 2)]
    assert shown == set(names)


def test_no_boxes_is_an_empty_list() -> None:
    shown: set[str] = set()
    assert items(sent(Answers(), shown)) == []
    assert shown == set()


def test_boxes_made_and_removed_while_it_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard, "SLICE", SLICE)
    answers = kept(30)
    shown: set[str] = set()
    chunks = sent(answers, shown)
    taken = [next(chunks), next(chunks)]
    # After the first slice: a box ahead is removed and two boxes are made.
    answers.remove("box-015")
    answers.put(box("box-0155"))
    answers.put(box("box-000a"))
    taken.extend(chunks)
    names = [item["name"] for item in items(taken)]
    assert "box-015" not in names
    # A box made after the stream opened comes as an event, not in the snapshot.
    assert "box-0155" not in names
    assert "box-000a" not in names
    assert len(names) == len(set(names)) == 29
    # Only what was sent is shown: its removal later is reported, nothing else's.
    assert shown == set(names)


def test_a_stream_holds_one_slice_not_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard, "SLICE", SLICE)
    answers = kept(200)
    read = body_of(answers)
    bodies_read = 0

    def counted(name: str) -> bytes | None:
        nonlocal bodies_read
        bodies_read += 1
        return read(name)

    chunks = snapshot(answers.names((None, None, None)), counted, set())
    next(chunks)
    first = next(chunks)
    # The reader stops here: the stream has read one slice of bodies, never the list.
    assert bodies_read == SLICE
    assert len(first) < len(answers.filtered((None, None, None)).data) / 10
