"""Helpers shared by tests that watch real cluster state change."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def wait_for(predicate: Any, timeout: float = 60, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s: {predicate.__doc__ or predicate}")
        time.sleep(interval)


# Debian's Chromium, never a downloaded browser build; flags for a closed network.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def service_account_kubeconfig(
    testbed: Any, kube: Any, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig that authenticates as ``account``, with a token from the TokenRequest API."""
    from kubernetes import client

    token = (
        client.CoreV1Api(kube)
        .create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": 3600}}
        )
        .status.token
    )
    config = yaml.safe_load(testbed.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = account
    path.write_text(yaml.safe_dump(config))
    return path


def helm_binary() -> str:
    """The testbed's helm; the test is skipped when the testbed binaries are not built."""
    from devboxes_testbed import build

    directory = build.installed()
    if directory is None:
        pytest.skip("the testbed binaries (helm) are not built: run `make testbed`")
    return str(directory / "helm")


def helm_run(testbed: Any, *args: str) -> str:
    """Run helm against the testbed and return its output; any failure fails the test."""
    result = subprocess.run(
        [helm_binary(), *args, "--kubeconfig", str(testbed.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@contextlib.contextmanager
def running_testbed(state_dir: Path) -> Iterator[Any]:
    """A testbed cluster with the standard node pools, stopped when the block ends."""
    from devboxes_testbed.cluster import Testbed

    bed = Testbed(state_dir, REPO / "testbed" / "nodes.yaml", log=lambda message: None)
    bed.start()
    try:
        yield bed
    finally:
        bed.stop()
