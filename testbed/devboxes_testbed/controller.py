"""Run the real controller as a subprocess against a kubeconfig, as an operator would: the
one way the tests, the benchmarks and `make up` start it."""

from __future__ import annotations

import copy
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .api import bearer
from .errors import TestbedError
from .process import START_TIMEOUT, free_port, start_process

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SETTINGS = REPO / "testbed" / "settings.yaml"
# After SIGABRT the fault handler needs a moment to write every thread's stack.
ABORT_SECONDS = 10.0


def example_settings(namespace: str) -> dict[str, Any]:
    """testbed/settings.yaml, the example GPU profiles, serving ``namespace``."""
    settings: dict[str, Any] = yaml.safe_load(EXAMPLE_SETTINGS.read_text())
    settings["namespace"] = namespace
    return settings


def without_gpu_profiles(settings: dict[str, Any], *names: str) -> dict[str, Any]:
    """A copy of ``settings`` with the GPU profiles ``names`` retired as an operator
    retires them: gone from the catalog and from every image profile's accelerators,
    and an image profile left with no accelerator gone too."""
    retired = copy.deepcopy(settings)
    gpu = retired["gpu"]
    gpu["profiles"] = [p for p in gpu.get("profiles", []) if p["name"] not in names]
    images = retired.get("images")
    if images:
        kept = []
        for profile in images["profiles"]:
            if "accelerators" in profile:
                profile["accelerators"] = [a for a in profile["accelerators"] if a not in names]
                if not profile["accelerators"]:
                    continue
            kept.append(profile)
        images["profiles"] = kept
    return retired


ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - what a controller serving the real node's boxes binds


class Controller:
    """One ``devboxes-controller serve`` process on loopback with its own settings file,
    token and log.

    ``lease_seconds`` None leaves the controller's own Lease duration; ``port`` fixes the
    port, as the Service in front of replicas does for what boxes reach; ``listen_host``
    is the address it serves on (``0.0.0.0`` lets boxes on the real node reach it at
    the node's ``machine_address``, while ``url`` stays on loopback, where clients may
    use plain http); ``source`` is a checkout to import the controller from instead of
    this one; ``probes`` serves ``/health`` and ``/ready`` on a port of their own too,
    ``probe_port``, as the chart does.
    """

    def __init__(
        self,
        kubeconfig: Path,
        settings: dict[str, Any],
        workdir: Path,
        token: str | None = None,
        identity: str | None = None,
        lease_seconds: int | None = 3,
        port: int | None = None,
        source: Path | None = None,
        listen_host: str = "127.0.0.1",
        probes: bool = False,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.settings = settings
        self.workdir = workdir
        self.token = token or secrets.token_urlsafe(32)
        # The controller's own default has this shape; tests and benches need to know it.
        self.identity = identity or f"{socket.gethostname()}-{secrets.token_hex(4)}"
        self.lease_seconds = lease_seconds
        self.fixed_port = port
        self.source = source
        self.listen_host = listen_host
        self.probes = probes
        self.port = 0
        self.probe_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"controller-{self.identity}.log"

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.listen_host == ANY_ADDRESS else self.listen_host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the controller is not running"
        return self.process.pid

    def headers(self) -> dict[str, str]:
        return bearer(self.token)

    def _argv(self, settings_file: Path) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "devboxes_controller",
            "serve",
            "--settings",
            str(settings_file),
            "--kubeconfig",
            str(self.kubeconfig),
            "--listen",
            f"{self.listen_host}:{self.port}",
            "--identity",
            self.identity,
        ]
        if self.lease_seconds is not None:
            argv += ["--lease-seconds", str(self.lease_seconds)]
        if self.probes:
            argv += ["--probe-listen", f"{self.listen_host}:{self.probe_port}"]
        return argv

    def _environment(self) -> dict[str, str]:
        # The token in the environment, not on a command line every local user can read;
        # the fault handler so that a stop past its grace leaves every thread's stack.
        environment = {**os.environ, "DEVBOXES_TOKEN": self.token, "PYTHONFAULTHANDLER": "1"}
        if self.source is not None:
            environment["PYTHONPATH"] = f"{self.source / 'controller'}{os.pathsep}{self.source}"
        return environment

    def start(self, timeout: float = START_TIMEOUT, until: str = "/ready") -> Controller:
        """Start the process and wait until ``until`` (``/ready`` or ``/health``) answers
        200; a port another process took meanwhile is picked again."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        settings_file = self.workdir / f"settings-{self.identity}.yaml"
        settings_file.write_text(yaml.safe_dump(self.settings))

        def launch() -> subprocess.Popen[bytes]:
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    self._argv(settings_file),
                    # `python -m` puts the working directory first on sys.path.
                    cwd=self.source,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self._environment(),
                    start_new_session=True,
                )
            return self.process

        self._pick_ports()
        start_process(
            "controller",
            launch,
            self.stop,
            lambda: f"{self.url}{until}",
            self.log,
            None if self.fixed_port else self._pick_ports,
            timeout,
        )
        return self

    def _pick_ports(self) -> None:
        self.port = self.fixed_port or free_port()
        self.probe_port = free_port() if self.probes else 0

    def rss_kib(self) -> int:
        """The process's resident memory now, from /proc."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise TestbedError(f"no VmRSS line for pid {self.pid}")

    def stop(self, grace: float = 15, kill: bool = False) -> float | None:
        """SIGTERM (SIGKILL with ``kill``) and wait: the seconds the process took to exit,
        or None when it outlived ``grace`` and was aborted, its stacks then in the log."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return 0.0
        sent = time.monotonic()
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(grace)
            return time.monotonic() - sent
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
        try:
            process.wait(ABORT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return None
