"""Devbox kernels are offered only where one could start, and a failed start can be
dismissed: the pure parts, without a server."""

from __future__ import annotations

from pathlib import Path

import pytest
from devboxes_jupyter import progress
from devboxes_jupyter.app import kernel_problem
from traitlets.config import Config

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
