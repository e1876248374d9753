"""`make up`'s JupyterLab takes its login token from a file only its owner may read, never
from its command line, which `ps` shows every local user."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import requests
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller
from devboxes_testbed.process import start_component
from devboxes_testbed.stack import Stack, lab_environment

INHERITED = "a-token-of-whoever-starts-the-stack"


def test_the_token_is_in_a_file_of_the_owner_only_and_an_inherited_one_is_dropped(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "jupyter-token"
    token_file.write_text("an earlier run's token")
    token_file.chmod(0o644)
    environment = lab_environment("s3cret", token_file, {"JUPYTER_TOKEN": INHERITED, "A": "b"})
    assert environment == {"A": "b", "JUPYTER_TOKEN_FILE": str(token_file)}
    assert token_file.read_text() == "s3cret"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600


def test_the_running_lab_has_no_token_on_its_command_line_or_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Lab's own directories under the test's, not those of whoever runs the tests.
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("JUPYTER_TOKEN", INHERITED)
    stack = Stack(Testbed(tmp_path / "testbed", tmp_path / "pool.yaml"), tmp_path / "stack")
    # No controller answers there; the Lab starts all the same.
    stack.controller = Controller(tmp_path / "kubeconfig", {}, tmp_path / "controller")
    stack.state_dir.mkdir()
    lab = stack._jupyter(tmp_path)
    # Healthy means its status answered to the stack's token, the inherited one dropped.
    start_component(lab, log=lambda message: None)
    try:
        assert lab.process is not None
        proc = Path(f"/proc/{lab.process.pid}")
        command_line = (proc / "cmdline").read_bytes()
        assert b"jupyterlab" in command_line
        assert stack.jupyter_token.encode() not in command_line
        assert stack.jupyter_token.encode() not in (proc / "environ").read_bytes()
        status = requests.get(
            f"http://127.0.0.1:{stack.ports['jupyter']}/api/status",
            headers={"Authorization": f"token {INHERITED}"},
            timeout=30,
        )
        assert status.status_code == 403
    finally:
        lab.stop()
