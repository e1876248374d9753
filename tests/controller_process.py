"""Run the real controller as a subprocess against the testbed, as an operator would."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from devboxes_testbed.cluster import controller_command, free_port, wait_healthy

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_SETTINGS = REPO / "testbed" / "settings.yaml"


def example_settings(namespace: str) -> dict[str, Any]:
    settings: dict[str, Any] = yaml.safe_load(EXAMPLE_SETTINGS.read_text())
    settings["namespace"] = namespace
    return settings


class ControllerProcess:
    """One ``devboxes-controller serve`` process with its own settings file and token."""

    def __init__(
        self,
        kubeconfig: Path,
        settings: dict[str, Any],
        workdir: Path,
        token: str | None = None,
        identity: str | None = None,
        lease_seconds: int = 3,
        port: int | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.settings = settings
        self.workdir = workdir
        self.token = token or secrets.token_urlsafe(32)
        self.identity = identity or f"test-{secrets.token_hex(3)}"
        self.lease_seconds = lease_seconds
        # A fixed port stands for the Service in front of the replicas: what boxes reach.
        self.fixed_port = port
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"controller-{self.identity}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def start(self, timeout: float = 60, until: str = "/ready") -> ControllerProcess:
        """Start the process and wait until ``until`` (``/ready`` or ``/health``) answers 200."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        settings_file = self.workdir / f"settings-{self.identity}.yaml"
        settings_file.write_text(yaml.safe_dump(self.settings))
        self.port = self.fixed_port or free_port()
        env = {**os.environ, "DEVBOXES_TOKEN": self.token}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    *controller_command(settings_file, self.kubeconfig, self.port),
                    "--identity",
                    self.identity,
                    "--lease-seconds",
                    str(self.lease_seconds),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        failure = wait_healthy(self.process, f"{self.url}{until}", timeout)
        if failure is None:
            return self
        self.stop()
        raise RuntimeError(f"controller {failure}: {self.log.read_text()[-2000:]}")

    def rss_kib(self) -> int:
        """The process's resident memory now, from /proc."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    def stop(self, kill: bool = False) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


# The ``start_controller`` fixture: settings (the example ones by default) and
# ControllerProcess keyword arguments in, a started controller out.
StartController = Callable[..., ControllerProcess]
