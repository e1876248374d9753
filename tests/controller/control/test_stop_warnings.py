"""Warnings before a stop, on the testbed: the leader marks the box once per stop, records
a StopWarning Event, shows the warning in the box's status and posts the webhook until
its receiver takes it, once, across a change of leader; an extend that moves the stop
out of the warning time leaves nothing more to send."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from devboxes_controller.box import naming
from devboxes_controller.box.stop_warning import (
    ANNOTATION_STOP_WARNED,
    ANNOTATION_WEBHOOK_SENT,
    WEBHOOK_KIND,
)
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from receiver import Receiver
from support import StartController, event_messages, wait_for

# Longer than the box's one hour to live: it is warned as soon as its time to live runs.
LEAD_MINUTES = 61
# The receiver refuses this many deliveries before it takes one.
REFUSALS = 2


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(REFUSALS)
    yield server
    server.close()


def warning_settings(namespace: str, url: str) -> dict[str, Any]:
    settings = example_settings(namespace)
    settings["stopWarnings"] = {
        "leadMinutes": LEAD_MINUTES,
        "webhook": {"url": url, "timeoutSeconds": 2, "attempts": 6},
    }
    return settings


def call(process: Controller, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(
        method, f"{process.url}/api/v1{path}", headers=process.headers(), timeout=30, **kwargs
    )


def annotations(kube: Any, namespace: str, name: str) -> dict[str, str]:
    deployment = client.AppsV1Api(kube).read_namespaced_deployment(
        naming.object_names(name).deployment, namespace
    )
    return dict(deployment.metadata.annotations or {})


def test_a_box_is_warned_once_before_its_time_to_live_ends_and_the_webhook_told_once(
    start_controller: StartController, receiver: Receiver, kube: Any, namespace: str
) -> None:
    settings = warning_settings(namespace, receiver.url)
    first = start_controller(settings)
    created = call(first, "POST", "/devboxes", json={"name": "warned", "ttl_hours": 1})
    assert created.status_code == 201, created.text

    def warning() -> dict[str, Any] | None:
        body = call(first, "GET", "/devboxes/warned").json()
        return body.get("stop_warning")

    shown = wait_for(warning, timeout=60)
    assert shown["reason"] == "ttl"
    assert shown["message"].startswith("Box warned stops at ")
    assert "`devbox extend warned --hours 1`" in shown["message"]
    wait_for(lambda: receiver.taken == 1, timeout=60)
    assert len(receiver.posts) == REFUSALS + 1
    ids = {headers["Idempotency-Key"] for headers, _ in receiver.posts}
    (_, body), *_ = receiver.posts
    assert ids == {body["id"]}
    assert body["kind"] == WEBHOOK_KIND
    assert (body["box"], body["owner"], body["reason"]) == ("warned", "operator", "ttl")
    assert body["stopsAt"] == shown["stops_at"].replace("+00:00", "Z")
    marks = wait_for(
        lambda: (
            (found := annotations(kube, namespace, "warned")).get(ANNOTATION_WEBHOOK_SENT) and found
        ),
        timeout=30,
    )
    assert marks[ANNOTATION_WEBHOOK_SENT] == marks[ANNOTATION_STOP_WARNED]
    assert len(event_messages(kube, namespace, "warned", "StopWarning")) == 1

    # Another leader finds the warning sent and acknowledged: nothing goes out again.
    first.stop()
    second = start_controller(settings, port=first.port)
    wait_for(lambda: call(second, "GET", "/devboxes/warned").ok, timeout=60)
    extended = call(second, "POST", "/devboxes/warned/extend", json={"hours": 1})
    assert extended.status_code == 200, extended.text
    # Two hours ahead now, out of the 61-minute warning time.
    assert extended.json()["stop_warning"] is None
    second.stop()
    third = start_controller(settings, port=first.port)
    wait_for(lambda: call(third, "GET", "/devboxes/warned").ok, timeout=60)
    # A few reconcile passes of the new leader (one every five seconds).
    threading.Event().wait(12)
    assert len(receiver.posts) == REFUSALS + 1
    assert len(event_messages(kube, namespace, "warned", "StopWarning")) == 1
    assert call(third, "GET", "/devboxes/warned").json()["stop_warning"] is None
    call(third, "DELETE", "/devboxes/warned", params={"purge": "true"})
