"""Shared fixtures: one real testbed cluster per test session, a fresh namespace per test.

``controller`` is the session's controller process (on namespace ``devboxes-session``,
with the example GPU profiles); ``start_controller`` starts more of them on the test's
own namespace. The tests of the controller package itself live in ``tests/controller/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from devboxes_testbed import build
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.hub import Hub
from devboxes_testbed.issuer import Issuer
from devboxes_testbed.rig import Rig, create_namespace
from kubernetes import client
from support import REPO, Api, DevicePool, StartController, named_cluster, wait_for

# Under CI, a skip is a failure (tests/ci_strict.py).
pytest_plugins = ["ci_strict"]

# The namespace the session's controller serves.
SESSION_NAMESPACE = "devboxes-session"

# Fixtures that start a testbed or one of its programs built from Go (``helm`` is
# tests/helm/test_chart.py's): a test that uses one, directly or through another fixture,
# is marked ``testbed`` so that ``make test-unit`` leaves it out. A test that starts one
# itself carries the marker in its source.
TESTBED_FIXTURES = {"testbed", "fault_testbed", "real_testbed", "dra_testbed", "issuer", "helm"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if TESTBED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.testbed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """A test without the ``testbed`` marker that reaches for a testbed program fails.

    Every program the testbed builds from Go, and every image it builds, is found through
    the testbed cache, so refusing the cache for such a test keeps ``make test-unit`` free
    of them and names the test that needs the marker.
    """
    if item.get_closest_marker("testbed") is not None:
        return (yield)

    def refused() -> NoReturn:
        pytest.fail(
            f"{item.nodeid} uses a testbed program without the testbed marker: use a "
            "testbed fixture or mark it @pytest.mark.testbed",
            pytrace=False,
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "cache_root", refused)
        return (yield)


@pytest.fixture(scope="module")
def dra_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A testbed of the module's own whose GPUs are published for DRA
    (testbed/nodes-dra.yaml): the module's claims start from free devices."""
    with Rig(tmp_path_factory.mktemp("dra-testbed")) as rig:
        yield rig.start_testbed(REPO / "testbed" / "nodes-dra.yaml", log=lambda message: None)


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    """A real OpenID provider on loopback with the demo people (alice in ml, bob in vision,
    olivia in gpu-admins); ``issuer.token_for(name)`` logs in as one of them."""
    with Issuer(tmp_path_factory.mktemp("issuer")) as provider:
        yield provider


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """A real JupyterHub of the module's own, with alice (group ml), bob (vision) and
    olivia (gpu-admins); no Kubernetes."""
    started = Hub(tmp_path_factory.mktemp("hub"))
    started.start(log=lambda message: None)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def lab_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    """A second cluster for the module: a controller named lab-b on a testbed of its own,
    whose one device of the pool profile (``DevicePool.PROFILE``) is free."""
    with Rig(tmp_path_factory.mktemp("lab-b")) as rig:
        testbed = rig.start_testbed(log=lambda message: None)
        namespace = rig.create_namespace("lab-b")
        pool = DevicePool(testbed.api_client(), devices=1)
        yield rig.start_controller(named_cluster(pool.settings(namespace), "lab-b"))


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with Rig(tmp_path_factory.mktemp("testbed")) as rig:
        yield rig.start_testbed(log=lambda message: None)


@pytest.fixture(scope="session")
def kube(testbed: Testbed) -> Any:
    return testbed.api_client()


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    """A fresh namespace with its default ServiceAccount, deleted after the test."""
    core = client.CoreV1Api(kube)
    name = create_namespace(core, f"t-{uuid.uuid4().hex[:10]}")
    yield name
    core.delete_namespace(name)


@pytest.fixture
def pool(kube: Any, request: pytest.FixtureRequest) -> Iterator[DevicePool]:
    """A kwok node of devices of its own, for tests that need devices nobody else takes:
    one, or the module's ``POOL_DEVICES``."""
    made = DevicePool(kube, devices=getattr(request.module, "POOL_DEVICES", 1))
    yield made
    made.delete()


@pytest.fixture(scope="session")
def controller(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    """The controller with the example GPU profiles, serving one namespace for the session."""
    with Rig(tmp_path_factory.mktemp("controller"), testbed) as rig:
        rig.create_namespace(SESSION_NAMESPACE)
        yield rig.start_controller(example_settings(SESSION_NAMESPACE))


@pytest.fixture(scope="session")
def controller_env(controller: Controller) -> dict[str, str]:
    return {"DEVBOX_URL": controller.url, "DEVBOX_TOKEN": controller.token}


@pytest.fixture
def controller_client(controller: Controller) -> Any:
    from devboxes_sdk import Client

    return Client(controller.url, controller.token)


@pytest.fixture
def cleanup(controller: Controller, kube: Any) -> Iterator[list[str]]:
    """Names of boxes on the session's controller, purged after the test (newest first)
    so that their GPUs and volumes are free for the next one."""
    from devboxes_controller.box.naming import object_names

    names: list[str] = []
    yield names
    Api(controller).purge(*reversed(names))
    claims = {object_names(name).pvc for name in names}
    core = client.CoreV1Api(kube)

    def volumes_gone() -> bool:
        """the purged boxes' home volumes are deleted: until then a box of the same name
        cannot be created (409)"""
        listed = core.list_namespaced_persistent_volume_claim(SESSION_NAMESPACE).items
        return not claims & {claim.metadata.name for claim in listed}

    wait_for(volumes_gone, timeout=120)


@pytest.fixture
def start_controller(testbed: Testbed, namespace: str, tmp_path: Path) -> Iterator[StartController]:
    """Start controllers on this test's namespace; each is stopped after the test."""
    with Rig(tmp_path, testbed) as rig:

        def start(settings: dict[str, Any] | None = None, **kwargs: Any) -> Controller:
            return rig.start_controller(settings or example_settings(namespace), **kwargs)

        yield start
