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
from devboxes_testbed.rig import Rig, create_namespace
from kubernetes import client
from support import StartController


@pytest.fixture(scope="module")
def fault_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with Rig(tmp_path_factory.mktemp("fault-testbed")) as rig:
        yield rig.start_testbed(log=lambda message: None)


@pytest.fixture
def fault_kube(fault_testbed: Testbed) -> Any:
    """A fresh client per test: connections of an earlier test may point at a dead apiserver."""
    return fault_testbed.api_client()


@pytest.fixture
def fault_namespace(fault_kube: Any) -> str:
    return create_namespace(client.CoreV1Api(fault_kube), f"f-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def start_fault_controller(
    fault_testbed: Testbed, fault_namespace: str, tmp_path: Path
) -> Iterator[StartController]:
    with Rig(tmp_path, fault_testbed) as rig:

        def start(
            kubeconfig: Path | None = None, until: str = "/ready", **kwargs: Any
        ) -> Controller:
            return rig.start_controller(
                example_settings(fault_namespace), kubeconfig=kubeconfig, until=until, **kwargs
            )

        yield start


@pytest.fixture
def fault_controller(start_fault_controller: StartController) -> Controller:
    """A controller of the example settings on the fault testbed, once it is ready."""
    return start_fault_controller()
