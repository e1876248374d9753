"""A testbed of the fault tests' own: they restart and freeze its apiserver and etcd,
which would disturb every other test sharing the session's testbed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from support import StartController, running_testbed


@pytest.fixture(scope="module")
def fault_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with running_testbed(tmp_path_factory.mktemp("fault-testbed")) as bed:
        yield bed


@pytest.fixture
def fault_kube(fault_testbed: Testbed) -> Any:
    """A fresh client per test: connections of an earlier test may point at a dead apiserver."""
    return fault_testbed.api_client()


@pytest.fixture
def fault_namespace(fault_kube: Any) -> str:
    name = f"f-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(fault_kube).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def start_fault_controller(
    fault_testbed: Testbed, fault_namespace: str, tmp_path: Path
) -> Iterator[StartController]:
    started: list[Controller] = []

    def start(kubeconfig: Path | None = None, until: str = "/ready", **kwargs: Any) -> Controller:
        process = Controller(
            kubeconfig or fault_testbed.kubeconfig,
            example_settings(fault_namespace),
            tmp_path,
            **kwargs,
        )
        started.append(process)
        return process.start(until=until)

    yield start
    for process in started:
        process.stop()
