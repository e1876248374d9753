"""A testbed whose only node is this machine's real one, for the benches that measure it."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import record
from devboxes_testbed import realnode
from devboxes_testbed.rig import Rig

NODES = Path(__file__).resolve().parent.parent / "tests" / "data" / "nodes-real.yaml"


@contextmanager
def real_node_rig(prefix: str) -> Iterator[Rig]:
    """A rig with the testbed started on the real node, in a work folder of the bench's;
    afterwards, what the node left behind is said and the folder removed."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    with Rig(work) as rig:
        started = time.monotonic()
        node = rig.start_testbed(NODES).real_node
        assert node is not None
        print(f"testbed with the real node started in {time.monotonic() - started:.1f} s")
        try:
            yield rig
        finally:
            stopping = time.monotonic()
            rig.stop()
            print(f"testbed stopped in {time.monotonic() - stopping:.1f} s")
            left = realnode.leftovers(node.index, node.state_dir)
            print(f"left behind: {left or 'nothing'}")
            shutil.rmtree(work, ignore_errors=True)


def run(
    bench: str,
    parser: argparse.ArgumentParser,
    measure: Callable[[argparse.Namespace, Rig], object],
) -> int:
    """``record.run`` of a bench on the real node: ``measure`` gets its ``real_node_rig``,
    whose work folder is named after the bench."""

    def on_real_node(args: argparse.Namespace) -> None:
        with real_node_rig(f"{bench.replace('_', '-')}-") as rig:
            measure(args, rig)

    return record.run(bench, parser, on_real_node, real_node=True)
