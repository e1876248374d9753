"""Devbox kernels are offered only where one could start, and a failed start can be
dismissed or goes once a later kernel of its box runs: the pure parts, without a server."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from devboxes_jupyter import progress
from devboxes_jupyter.app import kernel_problem
from devboxes_jupyter.kernelspecs import unservable
from devboxes_jupyter.watcher import Watcher, replaced
from traitlets.config import Config

from devboxes_sdk import models
from devboxes_sdk.client import Client
from devboxes_sdk.config import ENV_CONFIG, ENV_TOKEN, ENV_TOKEN_FILE, ENV_URL


@pytest.fixture
def no_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_URL, ENV_TOKEN, ENV_TOKEN_FILE):
        monkeypatch.delenv(name, raising=False)
    # No configuration file of whoever runs the tests.
    monkeypatch.setenv(ENV_CONFIG, str(tmp_path / "absent.toml"))


@pytest.mark.usefixtures("no_controller")
def test_kernels_need_a_configured_key_to_exist_and_then_a_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Config()
    # No key configured: kernels make their own, so only the controller is missing.
    assert (kernel_problem(config) or "").startswith("no Devboxes controller for them")

    key = tmp_path / "id_ed25519"
    config.DevboxKernelProvisioner.ssh_key_file = str(key)
    assert kernel_problem(config) == (
        f"the SSH key {key} (DevboxKernelProvisioner.ssh_key_file) is missing"
    )

    key.write_text("a private key\n")
    problem = kernel_problem(config) or ""
    assert problem.startswith("no Devboxes controller for them: no Devboxes URL configured")

    monkeypatch.setenv(ENV_URL, "http://127.0.0.1:9")
    assert "no Devboxes token configured" in (kernel_problem(config) or "")
    monkeypatch.setenv(ENV_TOKEN, "t" * 40)
    assert kernel_problem(config) is None


def test_only_a_failed_start_is_dismissed_and_listeners_hear_of_it() -> None:
    registry = progress.ProgressRegistry()
    heard: list[int] = []
    registry.listeners.append(lambda: heard.append(1))
    registry.update("k1", "nb-ada-cpu", "", "waiting", "box nb-ada-cpu: starting")
    registry.update("k2", "nb-ada-l4", "nvidia-l4", progress.FAILED, "no SSH key configured")
    assert len(heard) == 2

    # A start still under way ends by itself; it cannot be dismissed.
    assert registry.dismiss("k1") is False
    assert registry.dismiss("unknown") is False
    assert len(heard) == 2

    assert registry.dismiss("k2") is True
    assert [k.kernel_id for k in registry.snapshot()] == ["k1"]
    assert len(heard) == 3
    assert registry.dismiss("k2") is False


def _availability(*entries: models.ProfileAvailability) -> models.GpuAvailability:
    return models.GpuAvailability(observed_at=datetime.now(UTC), profiles=list(entries))


def test_a_profile_no_node_serves_is_held_back_with_the_controllers_reason() -> None:
    no_node = "No node matches the profile's node selector"
    availability = _availability(
        models.ProfileAvailability(name="busy", available=0, capacity=2, waiting=3),
        models.ProfileAvailability(name="nowhere", available=0, capacity=0, reason=no_node),
        # A DRA profile, or a controller that cannot see the cluster: counts unknown.
        models.ProfileAvailability(name="uncounted", reason="Free devices are not counted"),
    )
    assert unservable(availability) == {"nowhere": no_node}
    # A controller without the availability route: every profile is offered.
    assert unservable(None) == {}


def test_a_failure_a_later_kernel_of_the_same_box_replaced_is_dismissed() -> None:
    registry = progress.REGISTRY
    watcher = Watcher(lambda: Client("http://127.0.0.1:9", "t" * 40), 2, None, "python3", None)
    ids = [f"replaced-{n}" for n in range(4)]
    try:
        registry.update(ids[0], "nb-ada-cpu", "", progress.FAILED, "SSH to box failed")
        registry.update(ids[1], "nb-ada-l4", "nvidia-l4", progress.FAILED, "not ready")
        registry.update(ids[2], "nb-ada-cpu", "", "running", "kernel running in box nb-ada-cpu")
        kept = [k.kernel_id for k in registry.snapshot() if k.kernel_id in ids]
        # Another box's failure stays, and so does a failure after the success.
        assert kept == ids[1:3]
        registry.update(ids[3], "nb-ada-cpu", "", progress.FAILED, "SSH to box failed")
        kept = [k.kernel_id for k in registry.snapshot() if k.kernel_id in ids]
        assert kept == ids[1:]
    finally:
        watcher.stop()
        for kernel_id in ids:
            registry.forget(kernel_id)


def test_a_box_of_the_same_name_on_another_cluster_replaces_no_failure() -> None:
    registry = progress.ProgressRegistry()
    registry.update("failed-a", "nb-ada-cpu", "", progress.FAILED, "not ready", "lab-a")
    registry.update("running-b", "nb-ada-cpu", "", "running", "kernel running", "lab-b")
    assert replaced(registry.snapshot(), registry.cluster_of) == []
    registry.update("running-a", "nb-ada-cpu", "", "running", "kernel running", "lab-a")
    assert replaced(registry.snapshot(), registry.cluster_of) == ["failed-a"]


def test_a_start_counts_its_current_step_and_its_whole_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    registry = progress.ProgressRegistry()
    registry.update("k1", "nb-ada-cpu", "", "waiting", "box nb-ada-cpu: starting")
    clock[0] += 4
    # The same words again: the step goes on.
    registry.update("k1", "nb-ada-cpu", "", "waiting", "box nb-ada-cpu: starting")
    clock[0] += 3
    ((seen),) = registry.snapshot()
    assert (seen.step_seconds, seen.total_seconds) == (7, 7)
    registry.update("k1", "nb-ada-cpu", "", "connecting", "connecting to nb-ada-cpu")
    clock[0] += 2
    ((seen),) = registry.snapshot()
    assert (seen.step_seconds, seen.total_seconds) == (2, 9)
    registry.forget("k1")
    assert registry.snapshot() == []
