"""What a test or a benchmark stands up: a testbed, namespaces on it and controllers serving
them, taken down in reverse order when the ``with`` block ends, also when SIGTERM ends it
(every process of the testbed runs in a session of its own and would outlive the run)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from .cluster import Testbed
from .controller import Controller
from .errors import TestbedError
from .process import START_TIMEOUT, StoppedAtExit, terminate_as_interrupt

REPO = Path(__file__).resolve().parents[2]
STANDARD_POOLS = REPO / "testbed" / "nodes.yaml"
# The controller-manager writes a new namespace's default ServiceAccount within a second or
# two; a loaded machine takes longer.
SERVICE_ACCOUNT_TIMEOUT = 60.0


def create_namespace(core: Any, name: str) -> str:
    """Create namespace ``name`` and wait for its default ServiceAccount: until the
    controller-manager writes it, the apiserver refuses pods created straight into it."""
    core.create_namespace({"metadata": {"name": name}})
    deadline = time.monotonic() + SERVICE_ACCOUNT_TIMEOUT
    selector = "metadata.name=default"
    while not core.list_namespaced_service_account(name, field_selector=selector).items:
        if time.monotonic() > deadline:
            raise TestbedError(
                f"namespace {name} has no default ServiceAccount after "
                f"{SERVICE_ACCOUNT_TIMEOUT:.0f}s: is the controller-manager running?"
            )
        time.sleep(0.2)
    return name


class Rig(StoppedAtExit):
    """A testbed with what runs on it, for one ``with`` block.

    ``Rig(workdir)`` starts its own testbed with ``start_testbed`` and stops it at the end;
    ``Rig(workdir, testbed)`` works on one a wider block stood up and leaves it running.
    Controllers write their settings and logs to ``workdir``. Namespaces stay: they go
    with their testbed.
    """

    def __init__(self, workdir: Path, testbed: Testbed | None = None) -> None:
        self.workdir = workdir
        self._testbed = testbed
        self._stops = contextlib.ExitStack()

    def __enter__(self) -> Rig:
        self._stops.enter_context(terminate_as_interrupt())
        return self

    @property
    def testbed(self) -> Testbed:
        if self._testbed is None:
            raise TestbedError("no testbed yet: start_testbed() first")
        return self._testbed

    def start_testbed(
        self, pools: Path = STANDARD_POOLS, log: Callable[[str], None] = print
    ) -> Testbed:
        """A testbed of the node pools in ``pools``, in ``workdir/testbed``."""
        testbed = Testbed(self.workdir / "testbed", pools, log=log)
        # A failed start stops what it started before it raises.
        testbed.start()
        self._stops.callback(testbed.stop)
        self._testbed = testbed
        return testbed

    def create_namespace(self, name: str) -> str:
        return create_namespace(client.CoreV1Api(self.testbed.api_client()), name)

    def start_controller(
        self,
        settings: dict[str, Any],
        *,
        kubeconfig: Path | None = None,
        timeout: float = START_TIMEOUT,
        until: str = "/ready",
        **options: Any,
    ) -> Controller:
        """A controller with these settings (``options`` as ``Controller`` takes them), on
        the testbed's admin kubeconfig unless given another, started and waited for as
        ``Controller.start`` does; stopped when the block ends unless stopped before."""
        controller = Controller(
            kubeconfig or self.testbed.kubeconfig, settings, self.workdir, **options
        )
        self._stops.callback(controller.stop)
        return controller.start(timeout, until)

    def stop(self) -> None:
        """Stop everything, in reverse order: when the block ends, or before it for a
        benchmark that times the stop."""
        self._stops.close()
