"""The stop-warning webhook's deliveries to a real HTTP receiver on loopback: retried
until taken, marked before being let go, and given up after its attempts for good."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from devboxes_controller.config.stop_warnings import WebhookSettings
from devboxes_controller.control.webhook import Delivery, Webhook
from receiver import Receiver
from support import wait_for

KEY = "ttl 2030-01-01T12:00:00Z"
# Past every attempt of a test.
REFUSING = 1000


def _delivery() -> Delivery:
    return Delivery(
        "atlas", KEY, {"id": f"atlas {KEY}", "box": "atlas"}, datetime.now(UTC) + timedelta(hours=1)
    )


class Marks:
    """The acknowledgements, with a hook run inside each."""

    def __init__(self) -> None:
        self.marked: list[tuple[str, str]] = []
        self.hook: Callable[[], None] | None = None

    def __call__(self, box: str, key: str) -> None:
        self.marked.append((box, key))
        if self.hook is not None:
            self.hook()


@contextlib.contextmanager
def _webhook(receiver: Receiver, marks: Marks, attempts: int) -> Iterator[Webhook]:
    settings = WebhookSettings(url=receiver.url, timeout_seconds=2, attempts=attempts)
    webhook = Webhook(settings, marks, lambda: True, lambda: datetime.now(UTC))
    webhook.start()
    yield webhook
    webhook.stop()


@pytest.fixture
def taking() -> Iterator[Receiver]:
    server = Receiver(1)
    yield server
    server.close()


@pytest.fixture
def refusing() -> Iterator[Receiver]:
    server = Receiver(REFUSING)
    yield server
    server.close()


def test_a_warning_is_retried_until_taken_and_marked_before_it_is_let_go(
    taking: Receiver,
) -> None:
    marks = Marks()
    with _webhook(taking, marks, attempts=3) as webhook:
        # A reconciler pass while the mark is being written asks again: nothing is sent.
        marks.hook = functools.partial(webhook.send, _delivery())
        webhook.send(_delivery())
        webhook.send(_delivery())
        wait_for(lambda: marks.marked, timeout=30)
    assert marks.marked == [("atlas", KEY)]
    assert len(taking.posts) == 2
    assert taking.taken == 1
    assert {headers["Idempotency-Key"] for headers, _ in taking.posts} == {f"atlas {KEY}"}


def test_a_warning_given_up_is_not_tried_again_by_this_replica(refusing: Receiver) -> None:
    marks = Marks()
    with _webhook(refusing, marks, attempts=2) as webhook:
        webhook.send(_delivery())
        wait_for(lambda: len(refusing.posts) == 2, timeout=30)
        # 1 s after the first refusal came the second; the next pass asks again.
        threading.Event().wait(1.5)
        webhook.send(_delivery())
        threading.Event().wait(2.5)
    assert len(refusing.posts) == 2
    assert marks.marked == []
