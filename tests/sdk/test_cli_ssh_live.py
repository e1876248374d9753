"""``devbox ssh NAME`` against the real controller on the testbed: a box ready behind the
tunnel is reached without loading the client, with the same ssh command line the client
builds; anything else goes through the client, which says what is wrong as before.

ssh itself is a script here that records what it was started with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devboxes_sdk import Client
from devboxes_sdk._cli_ssh import tunnel_argv

HEAVY = ("pydantic", "requests", "devboxes_sdk.client", "devboxes_sdk.models")
PREFIX = "lean-ssh-"


@pytest.fixture
def recording_ssh(tmp_path: Path) -> Path:
    """A directory whose ``ssh`` writes its arguments to ``ssh-argv.json`` beside it."""
    script = tmp_path / "ssh"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, pathlib\n"
        f"pathlib.Path({str(tmp_path / 'ssh-argv.json')!r}).write_text(json.dumps(sys.argv))\n"
    )
    script.chmod(0o755)
    return tmp_path


def devbox_ssh(
    env: dict[str, str], bin_dir: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[str] | None, list[str]]:
    """``python -m devboxes_sdk ssh ARGS``: its run, the arguments ssh got (None when ssh
    never started) and the modules it imported before ssh replaced it."""
    recorded = bin_dir / "ssh-argv.json"
    recorded.unlink(missing_ok=True)
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEVBOX_")},
        "DEVBOX_CONFIG": "/nonexistent/devbox.toml",
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "devboxes_sdk", "ssh", *args],
        capture_output=True, text=True, env=environment, timeout=120, check=False,
    )  # fmt: skip
    imported = [
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    ]
    argv = json.loads(recorded.read_text())[1:] if recorded.exists() else None
    return done, argv, imported


def heavy(imported: list[str]) -> list[str]:
    return [module for module in imported if module.startswith(HEAVY)]


def said(done: subprocess.CompletedProcess[str]) -> str:
    return "".join(line + "\n" for line in done.stderr.splitlines() if "import time:" not in line)


def test_a_ready_box_is_reached_without_the_client_as_the_client_would_reach_it(
    controller_client: Client, controller_env: dict[str, str], recording_ssh: Path
) -> None:
    name = f"{PREFIX}ready"
    try:
        controller_client.create(name)
        box = controller_client.wait_ready(name, timeout=120)
        done, lean, imported = devbox_ssh(controller_env, recording_ssh, name, "--", "true")
        assert done.returncode == 0, done.stderr
        assert heavy(imported) == []
        expected = tunnel_argv(box, ["--", "true"])
        assert lean == expected[1:]
        # Given an option, the command line goes through the parser and the client.
        url = controller_env["DEVBOX_URL"]
        done, full, imported = devbox_ssh(
            controller_env, recording_ssh, "--url", url, name, "--", "true"
        )
        assert done.returncode == 0, done.stderr
        assert heavy(imported) != []
        assert full == lean
    finally:
        controller_client.delete(name, purge=True)


@pytest.mark.parametrize("stopped", [True, False], ids=["stopped", "absent"])
def test_a_box_not_ready_is_explained_by_the_client(
    controller_client: Client,
    controller_env: dict[str, str],
    recording_ssh: Path,
    stopped: bool,
) -> None:
    name = f"{PREFIX}{'parked' if stopped else 'nowhere'}"
    try:
        if stopped:
            controller_client.create(name)
            controller_client.wait_ready(name, timeout=120)
            controller_client.stop(name)
        url = controller_env["DEVBOX_URL"]
        lean_run, lean_argv, _ = devbox_ssh(controller_env, recording_ssh, name)
        full_run, full_argv, _ = devbox_ssh(controller_env, recording_ssh, "--url", url, name)
        assert lean_argv is None
        assert full_argv is None
        assert lean_run.returncode == full_run.returncode != 0
        assert said(lean_run) == said(full_run) != ""
    finally:
        if stopped:
            controller_client.delete(name, purge=True)


def test_a_wrong_token_is_explained_by_the_client(
    controller_client: Client, controller_env: dict[str, str], recording_ssh: Path
) -> None:
    env: dict[str, Any] = {**controller_env, "DEVBOX_TOKEN": "not-the-token"}
    done, argv, imported = devbox_ssh(env, recording_ssh, "someone")
    assert argv is None
    assert done.returncode == 1
    assert "token" in said(done)
    assert heavy(imported) != []
