"""The cluster's id: the UID of the kube-system Namespace, read apart from every request;
a read that fails says why once and leaves the id unknown until a later read succeeds,
and the capabilities' body follows from memory."""

from __future__ import annotations

import json
import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest
import urllib3
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.k8s import cluster_id, rest
from devboxes_controller.state.bodies import CapabilitiesBody
from kubernetes import client
from support import wait_for

UID = "9f0b7f3e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
FORBIDDEN = (
    'namespaces "kube-system" is forbidden: User "system:serviceaccount:boxes:devboxes" '
    'cannot get resource "namespaces" in API group "" at the cluster scope'
)


def forbidden() -> client.ApiException:
    refused = client.ApiException(status=403, reason="Forbidden")
    refused.body = json.dumps({"message": FORBIDDEN})
    return refused


class Apiserver:
    """Stands in for :func:`rest.request`: answers the reads in turn, each an exception
    to raise or the Namespace to answer with, and records what was asked."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, api: Any, method: str, path: str, *args: Any, **options: Any) -> Any:
        with self.lock:
            self.asked.append((method, path))
            answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return SimpleNamespace(data=json.dumps(answer).encode())


def kube_system(uid: str | None = UID) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "kube-system"}
    if uid is not None:
        metadata["uid"] = uid
    return {"kind": "Namespace", "apiVersion": "v1", "metadata": metadata}


def served(monkeypatch: pytest.MonkeyPatch, *answers: Any) -> Apiserver:
    apiserver = Apiserver(*answers)
    monkeypatch.setattr(rest, "request", apiserver)
    return apiserver


def warnings(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [
        (r.getMessage(), r.__dict__["problem"])
        for r in caplog.records
        if r.name == cluster_id.__name__ and r.levelno == logging.WARNING
    ]


def test_one_get_of_kube_system_gives_its_uid(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    apiserver = served(monkeypatch, kube_system())
    cluster = cluster_id.ClusterId(client.ApiClient())
    assert cluster.value is None
    with caplog.at_level(logging.INFO):
        assert cluster.read()
    assert cluster.value == UID
    assert apiserver.asked == [("GET", "/api/v1/namespaces/kube-system")]
    assert [(r.getMessage(), r.__dict__["cluster_id"]) for r in caplog.records] == [
        ("cluster id read", UID)
    ]


def test_a_failed_read_says_why_once_per_reason_and_a_later_read_fills_the_id_in(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    served(
        monkeypatch,
        forbidden(),
        forbidden(),
        urllib3.exceptions.MaxRetryError(None, "/", "refused"),  # type: ignore[arg-type]
        kube_system(None),
        kube_system(),
    )
    cluster = cluster_id.ClusterId(client.ApiClient())
    with caplog.at_level(logging.INFO):
        assert [cluster.read() for _ in range(4)] == [False] * 4
        assert cluster.value is None
        assert cluster.read()
    assert cluster.value == UID
    said = (
        "cannot read the cluster id (the UID of Namespace kube-system): the capabilities give "
        "none until a later read succeeds"
    )
    assert warnings(caplog) == [
        (said, f"Kubernetes refused the request: {FORBIDDEN}"),
        (said, "Kubernetes API unreachable"),
        (said, "Namespace kube-system has no uid"),
    ]


def test_the_thread_reads_again_until_it_has_the_id_and_then_never(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apiserver = served(monkeypatch, forbidden(), forbidden(), kube_system())
    cluster = cluster_id.ClusterId(client.ApiClient(), first_retry=0.01, max_retry=0.02)
    cluster.start()
    try:
        wait_for(lambda: cluster.value == UID, timeout=10)
        cluster._thread.join(5)
        assert not cluster._thread.is_alive()
        assert len(apiserver.asked) == 3
    finally:
        cluster.stop()


def test_a_stopped_reader_asks_no_more(monkeypatch: pytest.MonkeyPatch) -> None:
    apiserver = served(monkeypatch, forbidden())
    cluster = cluster_id.ClusterId(client.ApiClient(), first_retry=60)
    cluster.start()
    wait_for(lambda: apiserver.asked, timeout=10)
    cluster.stop()
    cluster._thread.join(5)
    assert not cluster._thread.is_alive()
    assert len(apiserver.asked) == 1
    assert cluster.value is None


def test_the_capabilities_body_is_made_again_only_when_the_id_changes() -> None:
    known: list[str | None] = [None]
    answer = CapabilitiesBody(
        settings_from_mapping({"cluster": {"name": "gpu-eu"}}), lambda: known[0]
    )
    before = answer.current()
    assert json.loads(before.data)["cluster"] == {"name": "gpu-eu", "id": None}
    assert answer.current() is before
    known[0] = UID
    after = answer.current()
    assert json.loads(after.data)["cluster"] == {"name": "gpu-eu", "id": UID}
    assert after.etag != before.etag
    assert answer.current() is after
