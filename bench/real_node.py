"""A testbed whose only node is this machine's real one, for the benches that measure it."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devboxes_testbed import realnode
from devboxes_testbed.rig import Rig

NODES = Path(__file__).resolve().parent.parent / "tests" / "data" / "nodes-real.yaml"


@contextmanager
def real_node_rig(prefix: str) -> Iterator[tuple[Rig, Path]]:
    """A rig with the testbed started on the real node, and a work folder of the bench's;
    afterwards, what the node left behind is said and the folder removed."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    with Rig(work) as rig:
        started = time.monotonic()
        node = rig.start_testbed(NODES).real_node
        assert node is not None
        print(f"testbed with the real node started in {time.monotonic() - started:.1f} s")
        try:
            yield rig, work
        finally:
            stopping = time.monotonic()
            rig.stop()
            print(f"testbed stopped in {time.monotonic() - stopping:.1f} s")
            left = realnode.leftovers(node.index, node.state_dir)
            print(f"left behind: {left or 'nothing'}")
            shutil.rmtree(work, ignore_errors=True)
