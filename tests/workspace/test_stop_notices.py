"""devbox-stop-notices, run as in a box: a notice file as the kubelet writes it, and
terminals of a devpts instance of the test's own, so nothing outside the test is written to."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "workspace" / "devbox-stop-notices"

# Runs in a mount namespace of its own with a new devpts instance: opens two terminals,
# starts the script on FILE, writes three notices (one repeated), and prints what each
# terminal was shown, one line per chunk read, as Python literals.
DRIVER = textwrap.dedent(
    """
    import os, select, subprocess, sys, time
    script, file = sys.argv[1], sys.argv[2]
    terminals = [os.openpty() for _ in range(2)]
    env = dict(os.environ, DEVBOX_STOP_NOTICE_SECONDS="1")
    loop = subprocess.Popen(["sh", script, file], env=env)
    def write(text):
        with open(file + ".tmp", "w") as out:
            out.write(text)
        os.replace(file + ".tmp", file)
    def read(seconds):
        shown = [b"", b""]
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([m for m, _ in terminals], [], [], 0.2)
            for i, (master, _) in enumerate(terminals):
                if master in ready:
                    shown[i] += os.read(master, 4096)
        return shown
    try:
        write("")
        print(repr(read(2.5)))
        write("ttl 2026-12-07T10:00:00Z\\nBox a stops in 10 min.\\x1b[2J")
        print(repr(read(3.5)))
        write("ttl 2026-12-07T10:00:00Z\\nBox a stops in 9 min.")
        print(repr(read(3.5)))
        write("ttl 2026-12-07T11:00:00Z\\nBox a stops at 11:00 UTC.")
        print(repr(read(3.5)))
    finally:
        loop.kill()
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux mount namespaces and devpts")
def test_each_stop_is_shown_once_in_every_terminal_and_steers_none(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a devpts instance of the test's own")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    setup = (
        "mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts && "
        "mount --bind /dev/pts/ptmx /dev/ptmx && "
        f'exec "{sys.executable}" "$0" "$1" "$2"'
    )
    result = subprocess.run(
        [unshare, "--mount", "sh", "-c", setup, str(driver), str(SCRIPT), str(tmp_path / "stop")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    empty, first, repeated, moved = (ast.literal_eval(line) for line in result.stdout.splitlines())
    assert empty == [b"", b""]
    # Both terminals, once, framed (a terminal in its usual mode adds the \r before each
    # \n), and without the escape character the notice carried.
    assert first == [b"\r\r\n\a*** Box a stops in 10 min.[2J ***\r\r\n"] * 2
    assert repeated == [b"", b""]
    assert moved == [b"\r\r\n\a*** Box a stops at 11:00 UTC. ***\r\r\n"] * 2


def test_a_period_that_is_not_a_whole_number_is_refused() -> None:
    result = subprocess.run(
        ["sh", str(SCRIPT), "/nonexistent"],
        env={**os.environ, "DEVBOX_STOP_NOTICE_SECONDS": "0.5"},
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2
    assert "DEVBOX_STOP_NOTICE_SECONDS must be a whole number" in result.stderr
