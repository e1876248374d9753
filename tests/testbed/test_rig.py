"""SIGTERM does not strand a testbed: within a rig it interrupts the run, the rig stops
what it started, and a second SIGTERM does not cut that short."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, wait_for

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "testbed"), str(REPO)])}

INTERRUPTED = """
import os, signal, time
from devboxes_testbed.process import terminate_as_interrupt

try:
    with terminate_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            print("clean-up ran to its end", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
print("handler restored" if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else "not")
"""

# Starts a testbed, writes its processes' ids, and waits to be terminated.
STANDING = """
import json, sys, time
from pathlib import Path
from devboxes_testbed.rig import Rig

workdir = Path(sys.argv[1])
with Rig(workdir) as rig:
    bed = rig.start_testbed(log=lambda message: None)
    pids = [c.process.pid for c in bed.components if c.process]
    (workdir / "pids.json").write_text(json.dumps(pids))
    time.sleep(600)
"""


def test_sigterm_interrupts_the_block_once_and_the_handler_comes_back() -> None:
    run = subprocess.run(
        [sys.executable, "-c", INTERRUPTED], env=ENV, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["clean-up ran to its end", "interrupted", "handler restored"]


@pytest.mark.testbed
def test_a_terminated_run_stops_its_testbed(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", STANDING, str(tmp_path)], env=ENV)
    pids_file = tmp_path / "pids.json"
    try:
        wait_for(lambda: pids_file.exists() or child.poll() is not None, timeout=300)
        assert child.poll() is None, "the testbed did not start"
        pids = json.loads(pids_file.read_text())
        assert len(pids) == 6
        child.send_signal(signal.SIGTERM)
        child.wait(120)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if Path(f"/proc/{pid}").exists()}
        time.sleep(0.2)
    assert not alive, f"testbed processes left running: {sorted(alive)}"
