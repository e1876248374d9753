"""Command line of the testbed: ``python -m devboxes_testbed build|up|down|pin``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from . import build, images
from .cluster import Testbed
from .errors import TestbedError
from .process import Exit, terminate_as_interrupt, wait_for_exit
from .provisioner import serve
from .stack import Stack

REPO = Path(__file__).resolve().parents[2]
STATE = REPO / ".devboxes"
ENV_FILE = STATE / "env"
PID_FILE = STATE / "up.pid"


def write_env(path: Path, values: dict[str, str]) -> None:
    """Write the shell-sourceable env file that points tools at what is running, with the
    scripts of this Python (the ``devbox`` CLI among them) first on PATH."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"export {key}={shlex.quote(value)}" for key, value in values.items()]
    lines.append(f'export PATH={shlex.quote(sysconfig.get_path("scripts"))}:"$PATH"')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


def up(pool_file: Path) -> None:
    if PID_FILE.exists():
        raise TestbedError(f"already running (pid file {PID_FILE}); run 'make down' first")
    STATE.mkdir(parents=True, exist_ok=True)
    PID_FILE.write_text(str(os.getpid()))
    testbed = Testbed(STATE / "testbed", pool_file)
    stack = Stack(testbed, STATE)
    dead: list[Exit] = []
    try:
        with terminate_as_interrupt():
            stack.start()
            write_env(ENV_FILE, stack.env())
            print(stack.summary(ENV_FILE), flush=True)
            # A part that dies takes the stack down with a message: half a stack that
            # looks up is worse than none.
            dead = wait_for_exit(stack.exited)
            for gone in dead:
                print(f"\n{gone}", flush=True)
            print("stopping everything else ...", flush=True)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
    finally:
        stack.stop()
        ENV_FILE.unlink(missing_ok=True)
        PID_FILE.unlink(missing_ok=True)
        print("stopped", flush=True)
    if dead:
        raise TestbedError(f"stopped because {dead[0]}")


def detach(pool_file: Path) -> None:
    log = STATE / "up.log"
    STATE.mkdir(parents=True, exist_ok=True)
    ENV_FILE.unlink(missing_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "devboxes_testbed", "up", "--pools", str(pool_file)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "testbed")},
        )
    while not ENV_FILE.exists():
        if process.poll() is not None:
            raise TestbedError(f"start failed; see {log}:\n{log.read_text()[-2000:]}")
        time.sleep(0.5)
    print(f"running in the background (pid {process.pid}); log {log}; 'make down' stops it")


def down() -> None:
    try:
        pid = int(PID_FILE.read_text())
    except (OSError, ValueError):
        print("nothing is running")
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        for _ in range(300):
            os.kill(pid, 0)
            time.sleep(0.1)
        raise TestbedError(f"pid {pid} did not stop within 30s")
    PID_FILE.unlink(missing_ok=True)
    print("stopped")


def write_images(out: Path) -> None:
    """The release's images, tagged with the project's version, ready to push."""
    version = json.loads((REPO / "jupyter_ext" / "package.json").read_text())["version"]
    out.mkdir(parents=True, exist_ok=True)
    for name, image in (
        ("controller", images.controller_image(())),
        ("workspace", images.workspace_image(())),
    ):
        archive = out / f"devboxes-{name}-{version}.oci.tar"
        images.export(image, f"devboxes/{name}:{version}", archive)
        print(f"{archive}  (devboxes/{name}:{version})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devboxes_testbed", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build the pinned binaries into the cache if missing")
    commands.add_parser("pin", help="regenerate the wrapper go.mod files for the pinned versions")
    start = commands.add_parser("up", help="start everything and stay in the foreground")
    start.add_argument(
        "--pools",
        type=Path,
        default=REPO / "testbed" / "nodes-up.yaml",
        help="node pool file (testbed/nodes-scale.yaml for benchmarks)",
    )
    start.add_argument("--detach", action="store_true", help="run in the background")
    commands.add_parser("down", help="stop a detached 'up'")
    release = commands.add_parser(
        "images", help="build the controller and workspace images as OCI archives"
    )
    release.add_argument("--out", type=Path, required=True, help="directory for the archives")
    provision = commands.add_parser("provisioner", help="run the simulated storage provisioner")
    provision.add_argument("--kubeconfig", required=True)
    provision.add_argument("--port", type=int, required=True)
    provision.add_argument("--volumes-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            started = time.monotonic()
            directory = build.ensure_built(lambda m: print(m, flush=True))
            print(f"testbed binaries in {directory} ({time.monotonic() - started:.0f}s)")
        elif args.command == "pin":
            build.pin()
        elif args.command == "up":
            (detach if args.detach else up)(args.pools)
        elif args.command == "down":
            down()
        elif args.command == "images":
            write_images(args.out)
        elif args.command == "provisioner":
            serve(args.kubeconfig, args.port, args.volumes_dir)
    except TestbedError as err:
        print(f"testbed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
