"""Everything `make up` runs: the testbed cluster, the controller with example GPU
profiles, and JupyterLab with the Devboxes extension pointed at that controller."""

from __future__ import annotations

import secrets
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .cluster import Component, Testbed, free_port, reassigner, start_component
from .controller import Controller, example_settings

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "devboxes"


@dataclass
class Stack:
    testbed: Testbed
    state_dir: Path
    ports: dict[str, int] = field(default_factory=dict)
    controller_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    jupyter_token: str = field(default_factory=lambda: secrets.token_hex(24))
    controller: Controller | None = None
    services: list[Component] = field(default_factory=list)

    @property
    def controller_url(self) -> str:
        assert self.controller is not None, "the stack is not started"
        return self.controller.url

    @property
    def jupyter_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['jupyter']}/lab?token={self.jupyter_token}"

    def _controller(self, logs: Path) -> Controller:
        # JupyterLab reads the operator token from this file.
        token_file = self.state_dir / "controller-token"
        token_file.write_text(self.controller_token)
        token_file.chmod(0o600)
        return Controller(
            self.testbed.kubeconfig,
            example_settings(NAMESPACE),
            logs,
            token=self.controller_token,
            lease_seconds=None,
        )

    def _jupyter(self, logs: Path) -> Component:
        self.ports["jupyter"] = free_port()
        root = self.state_dir / "notebooks"
        if not root.exists():
            shutil.copytree(REPO / "notebooks", root)
        return Component(
            "jupyterlab",
            lambda: [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={self.ports['jupyter']}",
                f"--ServerApp.root_dir={root}",
                f"--IdentityProvider.token={self.jupyter_token}",
                f"--DevboxesJupyterApp.controller_url={self.controller_url}",
                f"--DevboxesJupyterApp.token_file={self.state_dir / 'controller-token'}",
                "--ServerApp.jpserver_extensions={'devboxes_jupyter': True}",
                "--ServerApp.allow_root=True",
            ],
            lambda: (
                f"http://127.0.0.1:{self.ports['jupyter']}/api/status?token={self.jupyter_token}"
            ),
            logs / "jupyterlab.log",
            reassigner(self.ports, "jupyter"),
        )

    def start(self) -> None:
        self.testbed.start()
        try:
            from kubernetes import client

            client.CoreV1Api(self.testbed.api_client()).create_namespace(
                {"metadata": {"name": NAMESPACE}}
            )
            logs = self.state_dir / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            self.controller = self._controller(logs)
            self.controller.start()
            self.testbed.log(f"  devboxes-controller ready on {self.controller_url}/ready")
            jupyter = self._jupyter(logs)
            self.services.append(jupyter)
            start_component(jupyter, self.testbed.log)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()
        if self.controller is not None:
            self.controller.stop()
        self.testbed.stop()

    def env(self) -> dict[str, str]:
        return {
            **self.testbed.env(),
            "DEVBOX_URL": self.controller_url,
            "DEVBOX_TOKEN": self.controller_token,
            "JUPYTER_URL": self.jupyter_url,
        }

    def summary(self, env_file: Path) -> str:
        return "\n".join(
            [
                "",
                "Devboxes is running on the local testbed:",
                f"  Kubernetes API   {self.testbed.server}",
                f"  Devboxes API     {self.controller_url}   (dashboard: {self.controller_url}"
                "/dashboard)",
                f"  JupyterLab       {self.jupyter_url}",
                f"  environment      source {env_file}   (KUBECONFIG, DEVBOX_URL, DEVBOX_TOKEN,"
                " JUPYTER_URL)",
                "  Ctrl-C stops everything.",
            ]
        )
