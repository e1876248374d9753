"""The SDK's paged iteration and `devbox list`'s filters against the session controller."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from devboxes_testbed.boxes import write_stopped
from devboxes_testbed.controller import example_settings
from support import wait_for
from test_cli_live import devbox

from devboxes_sdk import Client, DevboxState, ValidationError

SESSION_NAMESPACE = "devboxes-session"


@pytest.fixture
def stopped(controller_client: Client, kube: Any) -> Iterator[tuple[list[str], list[str]]]:
    """Three stopped CPU boxes and two stopped NVIDIA L4 boxes, deleted afterwards."""
    from kubernetes import client

    tag = uuid.uuid4().hex[:6]
    cpu = [f"pg-{tag}-{i}" for i in range(3)]
    gpu = [f"pg-{tag}-l4-{i}" for i in range(2)]
    settings = example_settings(SESSION_NAMESPACE)
    write_stopped(kube, settings, cpu)
    write_stopped(kube, settings, gpu, profile="nvidia-l4")

    def listed() -> bool:
        """the controller lists every box written"""
        return set(cpu + gpu) <= {box.name for box in controller_client.list()}

    wait_for(listed, timeout=60)
    yield cpu, gpu
    apps = client.AppsV1Api(kube)
    for name in cpu + gpu:
        apps.delete_namespaced_deployment(f"devbox-{name}", SESSION_NAMESPACE)


def test_iteration_yields_every_box_once_in_name_order(
    controller_client: Client, stopped: tuple[list[str], list[str]]
) -> None:
    cpu, gpu = stopped
    names = [box.name for box in controller_client.iter_boxes(page_size=2)]
    assert names == sorted(set(names))
    assert set(cpu + gpu) <= set(names)
    assert {box.name for box in controller_client.list()} == set(names)


def test_filters_reach_the_server(
    controller_client: Client, stopped: tuple[list[str], list[str]]
) -> None:
    cpu, gpu = stopped
    l4 = controller_client.list(state=DevboxState.STOPPED, profile="nvidia-l4", page_size=1)
    assert {box.name for box in l4} & set(cpu + gpu) == set(gpu)
    assert all(box.gpu is not None and box.gpu.profile == "nvidia-l4" for box in l4)
    plain = controller_client.list(profile="cpu")
    assert set(cpu) <= {box.name for box in plain}
    assert all(box.gpu is None for box in plain)
    with pytest.raises(ValidationError, match="unknown profile"):
        controller_client.list(profile="no-such-profile")


def test_devbox_list_filters_by_state_and_profile(
    controller_env: dict[str, str], stopped: tuple[list[str], list[str]]
) -> None:
    cpu, gpu = stopped
    shown = devbox(controller_env, "list", "-q", "--state", "stopped", "--profile", "nvidia-l4")
    assert shown.returncode == 0, shown.stderr
    assert set(shown.stdout.split()) & set(cpu + gpu) == set(gpu)
    as_json = devbox(controller_env, "--json", "list", "--profile", "cpu")
    assert as_json.returncode == 0, as_json.stderr
    assert set(cpu) <= set(as_json.stdout.replace('"', " ").split())
    refused = devbox(controller_env, "list", "--state", "running")
    assert refused.returncode == 2
    assert "invalid choice: 'running'" in refused.stderr
