"""Everything `make up` runs: the testbed cluster with its real node, an OpenID provider
and a JupyterHub with the same demo people, the controller with example GPU profiles
trusting both, and JupyterLab with the Devboxes extension pointed at that controller, its
devbox kernels logging in to boxes with a key made for the stack."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from .cluster import Testbed
from .controller import ANY_ADDRESS, Controller, example_settings
from .errors import TestbedError
from .hub import PEOPLE, Hub
from .issuer import CLI_CLIENT_ID, DEMO_PEOPLE, Issuer
from .process import Component, Exit, exits, free_port, reassigner, start_component

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "devboxes"
AUTHORIZED_KEYS = "devbox-keys"  # the Secret boxes take their login keys from
# testbed/nodes-up.yaml taints the AMD pool so that CPU boxes stay off it.
AMD_TOLERATION = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# A DRA profile for the L4s the real node's DRA plugin publishes (testbed/nodes-up.yaml).
PRODUCT = "device.attributes['gpu.nvidia.com'].productName"
L4_DRA_PROFILE: dict[str, Any] = {
    "name": "nvidia-l4-dra",
    "displayName": "NVIDIA L4 (DRA)",
    "description": "One NVIDIA L4 (24 GB), allocated through Dynamic Resource Allocation",
    "deviceClassName": "gpu.nvidia.com",
    "selectors": [f"has({PRODUCT}) && {PRODUCT} == 'NVIDIA L4'"],
    "count": 1,
    "workspaceImage": "devboxes/workspace-cuda:12.8",
}
# The demo people's group whose members act on every box.
ADMIN_GROUP = "gpu-admins"
# Long enough for a working day on the stack without logging in again.
ACCESS_LIFETIME = "12h"
# A GPU box nobody uses (a notebook left open on a dead server, a forgotten SSH session's
# box) is stopped after this many minutes, so its device comes back within minutes.
IDLE_MINUTES = 15


def merge_people(path: Path, tokens: Mapping[str, str]) -> None:
    """Add these people's bearer tokens, by name, to the people file, keeping the entries
    already there: each identity provider the stack starts adds its own. The file is
    readable by its owner only from its first byte, and replaced whole, so a reader never
    sees half of it."""
    people: dict[str, str] = {}
    if path.exists():
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise TestbedError(f"cannot read {path} ({error}); remove it") from None
        if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
            raise TestbedError(f"{path} is not a JSON object of names and tokens; remove it")
        people.update(found)
    people.update(tokens)
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(people, out, indent=1)
    partial.replace(path)


def write_private(path: Path, text: str) -> None:
    """``text`` in a new file at ``path`` that only its owner can read, from its first byte."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)


def lab_environment(token: str, token_file: Path, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` for a JupyterLab whose login token is ``token``: the token goes to
    ``token_file``, readable by its owner only from its first byte, which JUPYTER_TOKEN_FILE
    names. On the command line, `ps` would show it to every local user. A JUPYTER_TOKEN in
    ``base`` would win over the file, so it is left out."""
    write_private(token_file, token)
    environment = {key: value for key, value in base.items() if key != "JUPYTER_TOKEN"}
    environment["JUPYTER_TOKEN_FILE"] = str(token_file)
    return environment


@dataclass
class Stack:
    testbed: Testbed
    state_dir: Path
    ports: dict[str, int] = field(default_factory=dict)
    controller_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    jupyter_token: str = field(default_factory=lambda: secrets.token_hex(24))
    controller: Controller | None = None
    issuer: Issuer | None = None
    services: list[Component] = field(default_factory=list)
    hub: Hub | None = None

    @property
    def controller_url(self) -> str:
        assert self.controller is not None, "the stack is not started"
        return self.controller.url

    @property
    def jupyter_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['jupyter']}/lab?token={self.jupyter_token}"

    @property
    def ssh_key(self) -> Path:
        """The stack's own key: devbox kernels log in to boxes with it."""
        return self.state_dir / "ssh" / "id_ed25519"

    def _authorize_keys(self) -> None:
        """Boxes accept the stack's key and the public keys of whoever runs `make up`,
        so that `devbox ssh` and the Lab's devbox kernels work without configuration."""
        if not self.ssh_key.exists():
            self.ssh_key.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "devboxes-make-up",
                 "-f", str(self.ssh_key)],
                check=True,
            )  # fmt: skip
        public = [self.ssh_key.with_suffix(".pub"), *sorted(Path.home().glob(".ssh/id_*.pub"))]
        keys = "".join(path.read_text().rstrip("\n") + "\n" for path in public)
        secret = {"metadata": {"name": AUTHORIZED_KEYS}, "stringData": {"authorized_keys": keys}}
        client.CoreV1Api(self.testbed.api_client()).create_namespaced_secret(NAMESPACE, secret)

    def settings(self, port: int | None = None) -> dict[str, Any]:
        """The controller's settings. ``port`` is the controller's: web previews are
        served on ``{port}-{box}.localhost`` there (browsers resolve ``*.localhost`` to
        this machine), and with a real node its boxes' activity agents report to it."""
        settings = example_settings(NAMESPACE)
        if port is not None:
            settings["connections"] = {"previewUrl": f"http://*.localhost:{port}"}
        node = self.testbed.real_node
        if node is not None and port is not None:
            settings["idle"] = {
                "stopAfterMinutes": IDLE_MINUTES,
                "controllerUrl": f"http://{node.machine_address}:{port}",
            }
        settings["ssh"] = {
            **settings.get("ssh", {}),
            "authorizedKeysSecret": AUTHORIZED_KEYS,
            **({"host": node.address} if node is not None else {}),
        }
        for profile in settings["gpu"]["profiles"]:
            if profile.get("resourceName") == "amd.com/gpu":
                profile["tolerations"] = [*profile.get("tolerations", []), AMD_TOLERATION]
        settings["gpu"]["profiles"].append(L4_DRA_PROFILE)
        assert self.issuer is not None, "the issuer starts before the controller"
        assert self.hub is not None, "the hub's ports are chosen before the controller starts"
        settings["auth"] = {
            "adminGroups": [ADMIN_GROUP],
            "oidc": {
                "issuer": self.issuer.url,
                "audience": CLI_CLIENT_ID,
                "cliClientId": CLI_CLIENT_ID,
            },
            "hub": {"apiUrl": self.hub.api_url},
        }
        return settings

    @property
    def people_file(self) -> Path:
        return self.state_dir / "people.json"

    def _write_people(self) -> None:
        """Each demo person's bearer token, so a newcomer can act as each at once."""
        assert self.issuer is not None
        tokens = {p.username: self.issuer.token_for(p.username) for p in DEMO_PEOPLE}
        merge_people(self.people_file, tokens)

    def _controller(self, logs: Path, port: int | None = None) -> Controller:
        # JupyterLab reads the operator token from this file.
        token_file = self.state_dir / "controller-token"
        write_private(token_file, self.controller_token)
        listen_host = "127.0.0.1"
        # The settings name the port before the controller starts.
        port = port or free_port()
        if self.testbed.real_node is not None:
            # The agents in the real node's boxes reach the controller at the machine's
            # address.
            listen_host = ANY_ADDRESS
        return Controller(
            self.testbed.kubeconfig,
            self.settings(port),
            logs,
            token=self.controller_token,
            lease_seconds=None,
            port=port,
            listen_host=listen_host,
        )

    def _follow_hub(self, logs: Path) -> None:
        """The hub's port was taken before the hub bound it and picked again: the
        controller is started anew to name the new one, on its own port, which the
        hub's servers name."""
        assert self.controller is not None
        assert self.hub is not None
        self.controller.stop()
        self.controller = self._controller(logs, port=self.controller.port)
        self.controller.start()
        self.testbed.log(f"  devboxes-controller restarted for the hub's API at {self.hub.api_url}")

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
                # A taken port fails the start, to be picked again: Jupyter's own retries
                # would serve elsewhere than where the stack looks for it.
                "--ServerApp.port_retries=0",
                f"--ServerApp.root_dir={root}",
                f"--DevboxesJupyterApp.controller_url={self.controller_url}",
                f"--DevboxesJupyterApp.token_file={self.state_dir / 'controller-token'}",
                f"--DevboxKernelProvisioner.ssh_key_file={self.ssh_key}",
                "--ServerApp.jpserver_extensions={'devboxes_jupyter': True}",
                "--ServerApp.allow_root=True",
            ],
            lambda: (
                f"http://127.0.0.1:{self.ports['jupyter']}/api/status?token={self.jupyter_token}"
            ),
            logs / "jupyterlab.log",
            reassigner(self.ports, "jupyter"),
            env=lab_environment(self.jupyter_token, self.state_dir / "jupyter-token", os.environ),
        )

    def start(self) -> None:
        self.testbed.start()
        try:
            client.CoreV1Api(self.testbed.api_client()).create_namespace(
                {"metadata": {"name": NAMESPACE}}
            )
            self._authorize_keys()
            logs = self.state_dir / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            self.issuer = Issuer(self.state_dir / "issuer", lifetime=ACCESS_LIFETIME).start()
            self.testbed.log(f"  OpenID provider ready on {self.issuer.discovery_url}")
            # The controller's settings name the hub, the hub's servers the controller.
            self.hub = Hub(self.state_dir / "hub")
            self.hub.pick_ports()
            self.controller = self._controller(logs)
            self.controller.start()
            self.testbed.log(f"  devboxes-controller ready on {self.controller_url}/ready")
            self._write_people()
            self.hub.controller_url = self.controller_url
            hub_api = self.hub.api_url
            self.hub.start(self.testbed.log)
            if self.hub.api_url != hub_api:
                self._follow_hub(logs)
            jupyter = self._jupyter(logs)
            self.services.append(jupyter)
            start_component(jupyter, self.testbed.log)
        except BaseException:
            self.stop()
            raise

    def exited(self) -> list[Exit]:
        """Whatever the stack started that has exited: a cluster component, the
        controller, JupyterLab, the hub or the OpenID provider."""
        hub = [self.hub.component] if self.hub is not None and self.hub.component else []
        found = [*self.testbed.exited(), *exits([*self.services, *hub])]
        if self.issuer is not None and (code := self.issuer.exit_code()) is not None:
            found.append(Exit("issuer", code, self.issuer.log))
        process = self.controller.process if self.controller is not None else None
        if process is not None and (code := process.poll()) is not None:
            assert self.controller is not None
            found.append(Exit("devboxes-controller", code, self.controller.log))
        return found

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()
        if self.hub is not None:
            self.hub.stop()
        if self.controller is not None:
            self.controller.stop()
        if self.issuer is not None:
            self.issuer.stop()
        self.people_file.unlink(missing_ok=True)
        self.testbed.stop()

    def env(self) -> dict[str, str]:
        return {
            **self.testbed.env(),
            "DEVBOX_URL": self.controller_url,
            "DEVBOX_TOKEN": self.controller_token,
            "JUPYTER_URL": self.jupyter_url,
        }

    def summary(self, env_file: Path) -> str:
        node = self.testbed.real_node
        where = (
            f"  Real node        {node.name} at {node.address}: CPU boxes and NVIDIA L4 boxes"
            " run here for real"
            if node is not None
            else "  Real node        none on this machine: boxes are scheduled, not run"
        )
        previews_port = self.controller_url.rsplit(":", 1)[1]
        return "\n".join(
            [
                "",
                "Devboxes is running on the local testbed:",
                f"  Kubernetes API   {self.testbed.server}",
                where,
                f"  Devboxes API     {self.controller_url}   (dashboard: {self.controller_url}"
                "/dashboard)",
                f"  Web previews     http://<port>-<box>.localhost:{previews_port}/   (open "
                "them from the dashboard; devbox create web --image web-preview)",
                f"  JupyterLab       {self.jupyter_url}",
                f"  OpenID provider  {self.issuer.url if self.issuer else '-'}   (people: "
                + ", ".join(f"{p.username} in {', '.join(p.groups)}" for p in DEMO_PEOPLE)
                + f"; {ADMIN_GROUP} are admins)",
                f"  people's tokens  {self.people_file}",
                "  their passwords  "
                + (str(self.issuer.people_file) if self.issuer else "-")
                + "   (for devbox login --oidc)",
                *self._hub_summary(),
                f"  environment      source {env_file}   (KUBECONFIG, DEVBOX_URL, DEVBOX_TOKEN,"
                " JUPYTER_URL)",
                "  Ctrl-C stops everything.",
            ]
        )

    def _hub_summary(self) -> list[str]:
        if self.hub is None:
            return []
        people = ", ".join(f"{name} ({group})" for name, group in PEOPLE.items())
        return [f"  JupyterHub       {self.hub.url}   (log in as {people}, any password)"]
