"""Shared fixtures: one real testbed cluster per test session, a fresh namespace per test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devboxes_testbed.cluster import Testbed

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    bed = Testbed(tmp_path_factory.mktemp("testbed"), REPO / "testbed" / "nodes.yaml",
                  log=lambda message: None)
    bed.start()
    try:
        yield bed
    finally:
        bed.stop()


@pytest.fixture(scope="session")
def kube(testbed: Testbed) -> Any:
    return testbed.api_client()


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    """A fresh namespace with its default ServiceAccount, deleted after the test."""
    from kubernetes import client

    core = client.CoreV1Api(kube)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", name)
            break
        except client.ApiException:
            time.sleep(0.2)
    yield name
    core.delete_namespace(name)

