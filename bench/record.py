"""Keep a bench run's raw output under bench/results/.

Every bench takes ``--results`` (and ``--label``): everything it prints, to stdout and
stderr, is then also written to ``bench/results/YYYY-MM-DD-<commit>-<bench>[-<label>].txt``.
The file opens with the command line, the commit, the date and the machine, and ends with
the run's wall time and the load average seen during it (sampled every
``LOAD_INTERVAL`` seconds), so a figure quoted from it can be traced to the run.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from devboxes_testbed import host

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
LOAD_INTERVAL = 15.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        action="store_true",
        help="also write the output to bench/results/DATE-COMMIT-BENCH[-LABEL].txt",
    )
    parser.add_argument("--label", default="", help="suffix of the --results file name")


def run(
    bench: str,
    parser: argparse.ArgumentParser,
    measure: Callable[[argparse.Namespace], object],
    argv: Sequence[str] | None = None,
    *,
    check: Callable[[argparse.Namespace], str | None] | None = None,
    real_node: bool = False,
) -> int:
    """A bench's whole command: its arguments with ``--results`` and ``--label``, refused
    with ``check``'s sentence when it finds one; then ``measure``, with its output kept
    when asked. A bench on the ``real_node`` needs a machine that can run one."""
    add_arguments(parser)
    args = parser.parse_args(argv)
    problem = check(args) if check is not None else None
    if problem is not None:
        parser.error(problem)
    if real_node:
        why = host.can_run()
        if why is not None:
            print(f"this machine cannot run a real node: {why}", file=sys.stderr)
            return 2
    with recording(bench, args):
        measure(args)
    return 0


def running_within_boxes(args: argparse.Namespace) -> str | None:
    """The check of a bench that runs ``--running`` of its ``--boxes``."""
    if not 0 < args.running < args.boxes:
        return "--running must be between 1 and --boxes"
    return None


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@contextmanager
def checkout(revision: str, where: Path) -> Iterator[Path]:
    """The tree of ``revision`` at ``where`` for one ``with`` block, to run an earlier
    release's controller beside this one's."""
    git("worktree", "add", "--detach", str(where), revision)
    try:
        yield where
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)],
            check=False,
            capture_output=True,
        )


def commit() -> str:
    """The short commit, with ``+dirty`` when tracked files differ from it."""
    head = git("rev-parse", "--short", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no")
    return f"{head}+dirty" if changed else head


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    memory_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return (
        f"{os.cpu_count()} CPUs ({model}), {memory_kib / 1024**2:.1f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def command() -> str:
    """This process's command line, with PYTHONPATH and without a --token's value."""
    words = list(sys.orig_argv)
    for index, word in enumerate(words):
        if word == "--token" and index + 1 < len(words):
            words[index + 1] = "..."
        elif word.startswith("--token="):
            words[index] = "--token=..."
    python_path = os.environ.get("PYTHONPATH")
    prefix = f"PYTHONPATH={shlex.quote(python_path)} " if python_path else ""
    return prefix + shlex.join(words)


class _Tee:
    """A text stream writing to the original stream and the results file."""

    def __init__(self, stream: TextIO, file: TextIO, lock: threading.Lock) -> None:
        self._stream = stream
        self._file = file
        self._lock = lock

    def write(self, text: str) -> int:
        with self._lock:
            self._stream.write(text)
            self._file.write(text)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            self._stream.flush()
            self._file.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


@contextmanager
def recording(bench: str, args: argparse.Namespace) -> Iterator[Path | None]:
    """Tee stdout and stderr into a results file when ``args.results`` is set."""
    if not args.results:
        yield None
        return
    started = datetime.now(UTC)
    label = f"-{args.label}" if args.label else ""
    revision = commit()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{started:%Y-%m-%d}-{revision}-{bench}{label}.txt"
    loads: list[float] = []
    stop = threading.Event()

    def sample_load() -> None:
        while True:
            loads.append(os.getloadavg()[0])
            if stop.wait(LOAD_INTERVAL):
                return

    lock = threading.Lock()
    with path.open("x", encoding="utf-8", buffering=1) as file:
        file.write(
            f"command: {command()}\n"
            f"niceness: {os.getpriority(os.PRIO_PROCESS, 0)}\n"
            f"commit: {revision}\n"
            f"date: {started:%Y-%m-%d %H:%M:%S} UTC\n"
            f"machine: {machine()}\n\n"
        )
        sampler = threading.Thread(target=sample_load, daemon=True)
        sampler.start()
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout = _Tee(stdout, file, lock)
        sys.stderr = _Tee(stderr, file, lock)
        outcome = "failed"
        began = time.monotonic()
        try:
            yield path
            outcome = "completed"
        except BaseException:
            file.write(traceback.format_exc())
            raise
        finally:
            stop.set()
            sampler.join()
            sys.stdout, sys.stderr = stdout, stderr
            file.write(
                f"\n{outcome} {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC, "
                f"{time.monotonic() - began:.0f} s wall time; 1-minute load average during "
                f"the run (every {LOAD_INTERVAL:.0f} s): min {min(loads):.1f}, "
                f"median {sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f}\n"
            )
        print(f"results written to {path.relative_to(REPO)}", file=sys.stderr)
