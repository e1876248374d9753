"""A testbed names a component that died, with its exit code and log, as `make up` reports
it before stopping everything else."""

from __future__ import annotations

import os
import signal

from devboxes_testbed.cluster import Testbed
from devboxes_testbed.process import wait_for_exit


def test_a_killed_component_is_named_with_its_code_and_log(fault_testbed: Testbed) -> None:
    assert fault_testbed.exited() == []
    kwok = fault_testbed.component("kwok")
    assert kwok.process is not None
    os.killpg(kwok.process.pid, signal.SIGKILL)
    try:
        (gone,) = wait_for_exit(fault_testbed.exited, interval=0.1)
        assert gone.name == "kwok"
        assert gone.code == -signal.SIGKILL
        assert gone.log == kwok.log
        assert str(gone) == f"kwok exited with code -9; its log: {kwok.log}"
    finally:
        fault_testbed.restart("kwok")
    assert fault_testbed.exited() == []
