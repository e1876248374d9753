"""The env file `make up` writes: sourced in a new shell, it points the tools at the stack
and puts the `devbox` command on PATH."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

from devboxes_testbed.__main__ import write_env

from devboxes_sdk._version import __version__


def test_sourcing_the_env_file_puts_devbox_on_path_and_keeps_values_whole(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / ".devboxes" / "env"
    url = "http://127.0.0.1:8000/it's $HOME"
    write_env(env_file, {"DEVBOX_URL": url, "KUBECONFIG": str(tmp_path / "a b")})
    # A shell as a new terminal starts it: none of this Python's scripts on PATH.
    sourced = subprocess.run(
        ["sh", "-c", '. "$1" && command -v devbox && devbox --version && echo "$DEVBOX_URL"',
         "sh", str(env_file)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=60,
        check=False,
    )  # fmt: skip
    assert sourced.returncode == 0, sourced.stderr
    assert sourced.stdout.splitlines() == [
        str(Path(sysconfig.get_path("scripts")) / "devbox"),
        f"devbox {__version__}",
        url,
    ]
    assert env_file.stat().st_mode & 0o777 == 0o600
