"""A bench's work folder, new and temporary, removed only after a success: on failure the
controllers' and the cluster's logs in it stay for a post-mortem."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devboxes_testbed.rig import Rig


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A new temporary folder whose name starts with ``prefix``, for one ``with`` block."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    yield workdir
    shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def scratch_rig(prefix: str) -> Iterator[Rig]:
    """A rig working in a new ``scratch_dir``."""
    with scratch_dir(prefix) as workdir, Rig(workdir) as rig:
        yield rig
