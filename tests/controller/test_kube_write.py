"""Every write of a box's objects is counted once, by its verb, when the apiserver took it;
whether writes land is still told to the write health as for every call."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from devboxes_controller.k8s import kube
from devboxes_controller.k8s.write_health import WRITES
from devboxes_controller.state.metrics import METRICS
from kubernetes import client


def written(verb: str) -> float:
    return (
        METRICS.registry.get_sample_value("devboxes_kubernetes_writes_total", {"verb": verb}) or 0.0
    )


def test_a_write_is_counted_by_its_verb_once_it_landed() -> None:
    def patch_namespaced_deployment(*args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(data=json.dumps({"metadata": {"name": args[0]}}).encode())

    before = written("patch")
    assert kube.write(patch_namespaced_deployment, "devbox-atlas", "boxes", {}) == {
        "metadata": {"name": "devbox-atlas"}
    }
    assert written("patch") == before + 1


def test_a_refused_write_is_not_counted_and_tells_the_write_health(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failures: list[str] = []
    monkeypatch.setattr(WRITES, "failed", failures.append)

    def create_namespaced_service(*args: Any, **kwargs: Any) -> Any:
        raise client.ApiException(status=503, reason="etcd is full")

    before = written("create")
    with pytest.raises(kube.Unavailable):
        kube.write(create_namespaced_service, "boxes", {})
    assert written("create") == before
    assert failures == ["Kubernetes API unavailable: etcd is full"]


def test_a_read_is_no_write() -> None:
    def read_namespaced_service(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="does not write"):
        kube.write(read_namespaced_service, "devbox-atlas-ssh", "boxes")
