"""The SDK and the `devbox` console script against the real controller on the testbed."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from devboxes_testbed import L4, MIG
from devboxes_testbed.controller import Controller
from support import StartController, wait_for, wait_until_no_pod_requests

from devboxes_sdk import Client
from devboxes_sdk.errors import (
    AuthenticationError,
    Conflict,
    NotFound,
    StartTimeout,
    ValidationError,
)
from devboxes_sdk.models import DevboxState

DEVBOX = Path(os.environ.get("VIRTUAL_ENV", Path(__file__).resolve().parents[2] / ".venv"))
DEVBOX_SCRIPT = str(DEVBOX / "bin" / "devbox")


@pytest.fixture
def process(start_controller: StartController) -> Controller:
    started: Controller = start_controller()
    return started


@pytest.fixture
def sdk(process: Controller) -> Iterator[Client]:
    client = Client(process.url, process.token)
    yield client
    for box in client.list():
        client.delete(box.name, purge=True)


def run_cli(process: Controller, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DEVBOX_URL": process.url,
        "DEVBOX_TOKEN": process.token,
        "DEVBOX_CONFIG": "/nonexistent/devbox.toml",
    }
    return subprocess.run(
        [DEVBOX_SCRIPT, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_every_verb_and_error_class(sdk: Client) -> None:
    profiles = sdk.capabilities().gpu.profiles
    assert profiles[0].name == L4
    assert sdk.whoami().user == "operator"
    box = sdk.create("sdk-mig", gpu=MIG)
    assert box.gpu is not None
    assert box.gpu.resource_name == "nvidia.com/mig-1g.10gb"
    ready = box.wait_ready(timeout=90)
    assert ready.state is DevboxState.READY
    assert ready.ssh_command
    assert sdk.get("sdk-mig").state is DevboxState.READY
    assert sdk.stop("sdk-mig").state is DevboxState.STOPPED
    assert sdk.start("sdk-mig").state is not DevboxState.STOPPED
    with pytest.raises(Conflict):
        sdk.create("sdk-mig")
    with pytest.raises(NotFound):
        sdk.get("missing-box")
    with pytest.raises(ValidationError) as invalid:
        sdk.create("sdk-bad", gpu="no-such-profile")
    assert "no-such-profile" in str(invalid.value)
    with pytest.raises(AuthenticationError):
        Client(sdk.url, "x" * 40).list()
    result = sdk.delete("sdk-mig")
    assert result.purged is False


def test_start_timeout_carries_the_scheduler_reason(sdk: Client, kube: Any) -> None:
    wait_until_no_pod_requests(kube, "nvidia.com/gpu")
    names = ("sdk-l4-a", "sdk-l4-b", "sdk-l4-c")
    for name in names:
        sdk.create(name, gpu=True)

    def waiting_box() -> str | None:
        """two of three L4 boxes are ready on the testbed's two L4 GPUs and one is in line"""
        boxes = sdk.list()
        ready = [box for box in boxes if box.state is DevboxState.READY]
        in_line = [box for box in boxes if "in line for a device" in (box.message or "")]
        return in_line[0].name if len(ready) == 2 and len(in_line) == 1 else None

    # Which of the three is left without a device is the scheduler's choice, and how soon
    # the other two become ready depends on the machine: wait on the one left in line.
    name = wait_for(waiting_box, timeout=120)
    with pytest.raises(StartTimeout) as timeout:
        sdk.wait_ready(name, timeout=5)
    assert timeout.value.state is DevboxState.STARTING
    assert "in line for a device" in (timeout.value.message or "")


def test_cli_json_passes_server_fields_and_errors_exit_non_zero(
    sdk: Client, process: Controller
) -> None:
    created = run_cli(process, "--json", "create", "cli-box", "--no-wait")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["name"] == "cli-box"
    listed = run_cli(process, "--json", "list")
    assert [b["name"] for b in json.loads(listed.stdout)["items"]] == ["cli-box"]
    table = run_cli(process, "list")
    assert table.stdout.splitlines()[0].split()[:2] == ["NAME", "STATE"]
    missing = run_cli(process, "status", "nope")
    assert missing.returncode != 0
    assert "Devboxes API returned 404" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_reads_revalidate_with_the_entity_tag_and_accept_gzip(process: Controller) -> None:
    """Reading the same thing again costs a 304 and gives the same objects; the list, large
    enough to be compressed, comes gzipped and decodes to the JSON sent uncompressed."""
    session = requests.Session()
    seen: list[tuple[str, int, str | None, str | None]] = []
    session.hooks["response"].append(
        lambda response, *args, **kwargs: seen.append(
            (
                response.request.path_url,
                response.status_code,
                response.request.headers.get("If-None-Match"),
                response.headers.get("Content-Encoding"),
            )
        )
    )
    sdk = Client(process.url, process.token, session=session)
    names = [f"etag-{i}" for i in range(4)]
    try:
        for name in names:
            sdk.create(name)
        for name in names:  # once ready, nothing about these boxes changes
            sdk.wait_ready(name, timeout=120)
        seen.clear()
        box, box_again = sdk.get(names[0]), sdk.get(names[0])
        listed, listed_again = sdk.list(), sdk.list()
        catalog, catalog_again = sdk.capabilities(), sdk.capabilities()
        assert box_again.raw == box.raw
        assert [b.raw for b in listed_again] == [b.raw for b in listed]
        assert catalog_again == catalog
        paths = ["/api/v1/devboxes/etag-0", "/api/v1/devboxes", "/api/v1/capabilities"]
        assert [(path, status) for path, status, _, _ in seen] == [
            (path, status) for path in paths for status in (200, 304)
        ]
        assert all(tag is None for _, status, tag, _ in seen if status == 200)
        assert all(tag for _, status, tag, _ in seen if status == 304)
        assert seen[2][3] == "gzip"
        plain = requests.get(
            f"{process.url}/api/v1/devboxes",
            headers={**process.headers(), "Accept-Encoding": "identity"},
            timeout=30,
        )
        assert "Content-Encoding" not in plain.headers
        assert plain.json()["items"] == [b.raw for b in listed]
    finally:
        for name in names:
            sdk.delete(name, purge=True)
