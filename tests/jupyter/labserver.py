"""A JupyterLab started the way ``make up`` starts it, and kernels driven over its REST API.

The server gets the controller URL and a token file on its command line, exactly as
``testbed/devboxes_testbed/stack.py`` passes them, and an environment with no
``DEVBOX_*`` variables: whatever a kernel knows about the controller, it learned from
the extension.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from devboxes_jupyter.provisioner import box_name
from devboxes_testbed.controller import Controller
from devboxes_testbed.process import free_port, wait_healthy
from devboxes_testbed.stack import lab_environment
from sshd import box_host_key, loopback_sshd, make_key, need_sshd
from support import wait_for

from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import NotFound

REPO = Path(__file__).resolve().parents[2]
LABEXTENSION = REPO / "jupyter_ext" / "devboxes_jupyter" / "labextension"
LAB_START_TIMEOUT = 120
KERNEL_START_TIMEOUT = 400


@dataclass
class Lab:
    url: str
    token: str
    log: Path
    root: Path
    data: Path

    def api(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        response = requests.request(
            method,
            f"{self.url}/{path.lstrip('/')}",
            json=body,
            headers={"Authorization": f"token {self.token}"},
            timeout=timeout,
        )
        response.raise_for_status()
        return response.json() if response.content else None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def running_lab(
    base: Path,
    controller_url: str,
    controller_token: str,
    extra_args: list[str] | None = None,
    sdk_config: str | None = None,
) -> Iterator[Lab]:
    """JupyterLab with this checkout's extension, configured as ``make up`` configures it.

    With ``sdk_config``, the server is given no controller: it finds its controllers in
    that SDK configuration file (``~/.config/devbox/config.toml`` of the server's HOME),
    as a person's own Jupyter finds those ``devbox login`` saved."""
    data = base / "data"
    (data / "labextensions").mkdir(parents=True)
    # First on JUPYTER_PATH, so this checkout's build wins over any installed copy.
    (data / "labextensions" / "devboxes-jupyter").symlink_to(LABEXTENSION)
    root = base / "root"
    root.mkdir()
    # No "get notified about news?" toast over the screenshots.
    labconfig = base / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )
    token_file = base / "controller-token"
    token_file.write_text(controller_token)
    token_file.chmod(0o600)
    controller_args = [
        f"--DevboxesJupyterApp.controller_url={controller_url}",
        f"--DevboxesJupyterApp.token_file={token_file}",
    ]
    if sdk_config is not None:
        config = base / "home" / ".config" / "devbox" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(sdk_config)
        config.chmod(0o600)
        controller_args = []
    token = secrets.token_hex(24)
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("DEVBOX_")}
    env.update(
        {
            "JUPYTER_PATH": str(data),
            "JUPYTER_CONFIG_DIR": str(base / "config"),
            "JUPYTER_DATA_DIR": str(base / "user-data"),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTER_PLATFORM_DIRS": "1",
            # No ~/.config/devbox/config.toml of whoever runs the tests.
            "HOME": str(base / "home"),
        }
    )
    env = lab_environment(token, base / "lab-token", env)
    log_path = base / "lab.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--port-retries=0",
            # CI runs as root; the server is on loopback with a random token.
            "--ServerApp.allow_root=True",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.jpserver_extensions={'devboxes_jupyter': True}",
            *controller_args,
            f"--LabApp.workspaces_dir={base / 'workspaces'}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            *(extra_args or []),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    lab = Lab(url=f"http://127.0.0.1:{port}", token=token, log=log_path, root=root, data=data)
    try:
        failure = wait_healthy(
            process, f"{lab.url}/api/status", LAB_START_TIMEOUT, {"Authorization": f"token {token}"}
        )
        if failure is not None:
            pytest.fail(f"JupyterLab {failure}; see {log_path}")
        yield lab
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


@dataclass
class Execution:
    """What one ``execute_request`` produced."""

    status: str
    stdout: str = ""
    errors: list[dict[str, Any]] = field(default_factory=list)
    results: list[str] = field(default_factory=list)


class KernelChannels:
    """One kernel of a Lab, started through ``/api/kernels`` and driven over its websocket."""

    def __init__(self, lab: Lab, kernel_id: str) -> None:
        import websocket

        self.lab = lab
        self.kernel_id = kernel_id
        self.session = uuid.uuid4().hex
        ws_url = lab.url.replace("http://", "ws://", 1)
        self._ws = websocket.create_connection(
            f"{ws_url}/api/kernels/{kernel_id}/channels?session_id={self.session}",
            header=[f"Authorization: token {lab.token}"],
            timeout=30,
        )

    @classmethod
    @contextlib.contextmanager
    def start(cls, lab: Lab, name: str, timeout: float = 120) -> Iterator[KernelChannels]:
        model = lab.api("POST", "api/kernels", {"name": name}, timeout=timeout)
        channels = cls(lab, model["id"])
        try:
            yield channels
        finally:
            channels.close()
            with contextlib.suppress(requests.RequestException):
                lab.api("DELETE", f"api/kernels/{model['id']}", timeout=60)

    def close(self) -> None:
        self._ws.close()

    def _send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        msg_id = uuid.uuid4().hex
        self._ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": msg_type,
                        "session": self.session,
                        "username": "test",
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": content,
                    "channel": channel,
                    "buffers": [],
                }
            )
        )
        return msg_id

    def _receive(self, deadline: float) -> dict[str, Any]:
        import websocket

        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no answer from kernel {self.kernel_id} in time")
            self._ws.settimeout(remaining)
            try:
                message: dict[str, Any] = json.loads(self._ws.recv())
            except websocket.WebSocketTimeoutException:
                continue
            return message

    def send_execute(self, code: str) -> str:
        return self._send(
            "shell",
            "execute_request",
            {"code": code, "silent": False, "store_history": True, "allow_stdin": False},
        )

    def collect(self, msg_id: str, timeout: float = 300) -> Execution:
        """Outputs of one request until its execute_reply and idle status both arrived."""
        deadline = time.monotonic() + timeout
        execution = Execution(status="")
        idle = False
        while not (idle and execution.status):
            message = self._receive(deadline)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = message["header"]["msg_type"]
            content = message["content"]
            if kind == "execute_reply":
                execution.status = content["status"]
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            elif kind == "stream":
                execution.stdout += content["text"]
            elif kind == "error":
                execution.errors.append(content)
            elif kind in ("execute_result", "display_data"):
                execution.results.append(content["data"].get("text/plain", ""))
        return execution

    def execute(self, code: str, timeout: float = 300) -> Execution:
        return self.collect(self.send_execute(code), timeout)

    def wait_busy(self, msg_id: str, timeout: float = 60) -> None:
        """Return once the kernel reports it started working on ``msg_id``."""
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline)
            if (
                message.get("parent_header", {}).get("msg_id") == msg_id
                and message["header"]["msg_type"] == "status"
                and message["content"]["execution_state"] == "busy"
            ):
                return


def execute_once(lab: Lab, kernel_id: str, code: str) -> Execution:
    """Run ``code`` in the kernel over channels opened for it alone."""
    channels = KernelChannels(lab, kernel_id)
    try:
        return channels.execute(code)
    finally:
        channels.close()


@dataclass
class KernelLab:
    """A Lab whose devbox kernels reach "boxes" through the loopback sshd (see sshd.py)."""

    lab: Lab
    owner: str
    key: Path
    base: Path

    def sshd(
        self, folder: str, port: int, host_key: str | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """A box's stand-in sshd at ``port`` that lets this Lab's kernels in, presenting
        ``host_key`` or else a key of its own kept in ``folder``."""
        return loopback_sshd(self.base / folder, port, self.key.with_suffix(".pub"), host_key)

    def box_sshd(
        self, controller: Controller, box: str, port: int, folder: str = "sshd"
    ) -> contextlib.AbstractContextManager[None]:
        """The stand-in sshd of ``box``, presenting the host key ``controller`` made for it,
        as the box's own sshd does."""
        return self.sshd(folder, port, box_host_key(controller, box))


@contextlib.contextmanager
def running_kernel_lab(
    base: Path,
    controller: Controller,
    owner_prefix: str,
    connect_timeout: int,
    extra_args: list[str] | None = None,
    share_with: KernelLab | None = None,
    sdk_config: str | None = None,
) -> Iterator[KernelLab]:
    """A Lab as ``make up`` starts it, whose devbox kernels log in to this machine (whose
    python has ipykernel) with a throwaway key, as a box of ``owner_prefix``-named user.

    With ``share_with``, a second Lab of that Lab's person: the same owner, key and
    known_hosts file, as one OS user's Jupyter servers share them. With ``sdk_config``,
    the Lab finds its controllers in that SDK configuration file (see ``running_lab``)."""
    key = share_with.key if share_with else make_key(base)
    owner = share_with.owner if share_with else f"{owner_prefix}{secrets.token_hex(3)}"
    known_hosts = (share_with.base if share_with else base) / "known_hosts"
    args = [
        *(extra_args or []),
        f"--DevboxKernelProvisioner.ssh_key_file={key}",
        f"--DevboxKernelProvisioner.ssh_user={getpass.getuser()}",
        f"--DevboxKernelProvisioner.owner={owner}",
        f"--DevboxKernelProvisioner.known_hosts_file={known_hosts}",
        f"--DevboxKernelProvisioner.ssh_connect_timeout={connect_timeout}",
        # kwok pods run nothing: an sshd on loopback at the box's SSH address stands in.
        "--DevboxKernelProvisioner.ssh_route=address",
        f"--DevboxesJupyterApp.kernel_python={sys.executable}",
    ]
    with running_lab(base / "lab", controller.url, controller.token, args, sdk_config) as lab:
        yield KernelLab(lab, owner, key, base)


def module_kernel_lab(
    owner_prefix: str,
    connect_timeout: int,
    *extra_args: str,
    needs: Sequence[Callable[[], None]] = (need_sshd,),
) -> Any:
    """A test module's ``setup`` fixture: one :func:`running_kernel_lab` for the module's
    tests, once each of ``needs`` has found what the module needs on this machine."""

    @pytest.fixture(scope="module")
    def setup(
        controller: Controller, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[KernelLab]:
        for need in needs:
            need()
        base = tmp_path_factory.mktemp(f"lab-{owner_prefix}")
        with running_kernel_lab(
            base, controller, owner_prefix, connect_timeout, list(extra_args)
        ) as kernel_lab:
            yield kernel_lab

    return setup


def kernelspecs(lab: Lab) -> dict[str, Any]:
    specs: dict[str, Any] = lab.api("GET", "api/kernelspecs")["kernelspecs"]
    return specs


def kernel_progress(lab: Lab) -> dict[str, dict[str, Any]]:
    """The extension's progress entry of each kernel it starts or runs, by kernel id."""
    watch = lab.api("GET", "devboxes/api/watch?timeout=0")
    return {item["kernel_id"]: item for item in watch["kernels"]}


def wait_offered(lab: Lab, kernelspec: str) -> None:
    """Wait until the Lab offers ``kernelspec``: the extension writes the devbox ones once
    it has read the controller's catalog."""
    wait_for(lambda: kernelspec in kernelspecs(lab), timeout=60)


def made_cpu_box(kernel_lab: KernelLab, client: Client, cleanup: list[str]) -> tuple[Devbox, int]:
    """The person's CPU box, made before any kernel asks for it, once the Lab offers its
    kernel: the box, and its SSH port once it has one."""
    name = box_name(kernel_lab.owner, None)
    cleanup.append(name)
    box = client.create(name, ttl_hours=1)
    wait_offered(kernel_lab.lab, "devbox-cpu")
    return box, box_ssh_port(client, name)


def box_ssh_port(client: Client, name: str) -> int:
    """The SSH port the controller reports for the box, once it has one."""

    def reported() -> int | None:
        """the controller reports the box's SSH port"""
        with contextlib.suppress(NotFound):
            port = client.get(name).ssh_port
            # 22 stands for "no address yet": the box's Service has no node port so far.
            return port if port != 22 else None
        return None

    port: int = wait_for(reported, timeout=120)
    return port


def write_kernelspec(lab: Lab, name: str, argv0: str, config: dict[str, Any]) -> None:
    """A hand-written kernelspec that runs ``argv0`` through the devbox provisioner."""
    folder = lab.data / "kernels" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [argv0, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": name,
                "language": "python",
                "interrupt_mode": "message",
                "metadata": {
                    "kernel_provisioner": {"provisioner_name": "devboxes", "config": config}
                },
            }
        )
    )


def start_kernel(lab: Lab, name: str) -> requests.Response:
    return requests.post(
        f"{lab.url}/api/kernels",
        json={"name": name},
        headers={"Authorization": f"token {lab.token}"},
        timeout=KERNEL_START_TIMEOUT,
    )


def refused(response: requests.Response) -> str:
    """The one message of a kernel start the provisioner refused."""
    assert response.status_code == 503, response.text
    message: str = response.json()["message"]
    return message


def type_into_cell(page: Any, editor: Any, code: str) -> None:
    """Type ``code`` into a cell's editor once it takes input: a Lab still settling may
    take the click before its editor has the focus, and the keys would go nowhere."""
    from playwright.sync_api import expect

    content = editor.locator(".cm-content")
    for _ in range(3):
        editor.click()
        try:
            expect(content).to_be_focused(timeout=5_000)
        except AssertionError:
            continue
        break
    expect(content).to_be_focused()
    page.keyboard.press("Control+A")
    page.keyboard.type(code)
    expect(editor).to_contain_text(code)
