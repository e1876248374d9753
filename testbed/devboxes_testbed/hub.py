"""A real JupyterHub on loopback, with three people, for the tests and `make up`.

The hub runs from the ``jupyterhub`` package of the dev extra, its proxy from
testbed/hub (``make node-deps``). People log in with any password (the hub's dummy
authenticator): alice of group ``ml``, bob of group ``vision`` and olivia of group
``gpu-admins``. Their single-user servers run as local processes of the same user, with
this checkout's Jupyter extension, which presents the person's hub token to the
controller. The testbed itself acts through a hub service of its own, ``testbed``, whose
token may make tokens for people and start their servers; the controller needs no
service of its own, as every hub token may ask the hub whose it is.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import TestbedError
from .process import START_TIMEOUT, Component, free_port, reassigner, start_component

REPO = Path(__file__).resolve().parents[2]
PROXY = REPO / "testbed" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
# Each person's one group; gpu-admins is the group the example settings make admins.
PEOPLE = {"alice": "ml", "bob": "vision", "olivia": "gpu-admins"}
ADMIN_GROUP = "gpu-admins"
TESTBED_SERVICE = "testbed"
# What the testbed's own service may do in the hub, and nothing more; ``groups`` moves
# people in and out of groups, as an admin of the hub would.
TESTBED_SCOPES = [
    "admin:users",
    "admin:servers",
    "tokens",
    "read:users",
    "access:servers",
    "groups",
]


def _config(hub: Hub) -> str:
    """The hub's jupyterhub_config.py: plain assignments of literal values."""
    single_user_args = ["--DevboxesJupyterApp.hub_token=True", "--ServerApp.allow_root=True"]
    if hub.controller_url:
        single_user_args.append(f"--DevboxesJupyterApp.controller_url={hub.controller_url}")
    values: dict[str, Any] = {
        "JupyterHub.ip": "127.0.0.1",
        "JupyterHub.port": hub.ports["public"],
        "JupyterHub.hub_ip": "127.0.0.1",
        "JupyterHub.hub_port": hub.ports["hub"],
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{hub.ports['proxy_api']}",
        "ConfigurableHTTPProxy.command": [str(PROXY)],
        "ConfigurableHTTPProxy.auth_token": hub.proxy_token,
        # Its default is the working directory: hubs started side by side would share it.
        "ConfigurableHTTPProxy.pid_file": str(hub.workdir / "jupyterhub-proxy.pid"),
        "JupyterHub.db_url": f"sqlite:///{hub.workdir / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret": hub.cookie_secret,
        "JupyterHub.pid_file": str(hub.workdir / "jupyterhub.pid"),
        "JupyterHub.authenticator_class": "dummy",
        "Authenticator.allowed_users": sorted(PEOPLE),
        "JupyterHub.load_groups": {
            group: {"users": [name for name, own in PEOPLE.items() if own == group]}
            for group in sorted(set(PEOPLE.values()))
        },
        "JupyterHub.services": [{"name": TESTBED_SERVICE, "api_token": hub.service_token}],
        "JupyterHub.load_roles": [
            {"name": TESTBED_SERVICE, "scopes": TESTBED_SCOPES, "services": [TESTBED_SERVICE]}
        ],
        "JupyterHub.spawner_class": "simple",
        "SimpleLocalProcessSpawner.home_dir_template": str(hub.workdir / "home" / "{username}"),
        "Spawner.cmd": [str(Path(sys.executable).with_name("jupyterhub-singleuser"))],
        "Spawner.args": single_user_args,
        "Spawner.start_timeout": 120,
        "Spawner.http_timeout": 120,
    }
    lines = [f"c.{key} = {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(["# Written by devboxes_testbed.hub; every run writes it anew.", *lines, ""])


@dataclass
class Hub:
    """One JupyterHub (and its proxy) in ``workdir``, fresh at every start.

    ``controller_url``, when given, is the controller the people's Jupyter extension talks
    to. ``api_url`` is what the controller's ``auth.hub.apiUrl`` names.
    """

    workdir: Path
    controller_url: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    service_token: str = field(default_factory=lambda: secrets.token_hex(32))
    proxy_token: str = field(default_factory=lambda: secrets.token_hex(32))
    cookie_secret: str = field(default_factory=lambda: secrets.token_hex(32))
    component: Component | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['hub']}/hub/api"

    @property
    def url(self) -> str:
        """Where people log in, through the hub's proxy."""
        return f"http://127.0.0.1:{self.ports['public']}/hub/"

    @property
    def log(self) -> Path:
        return self.workdir / "jupyterhub.log"

    def pick_ports(self) -> None:
        """Choose the hub's ports now, so that ``api_url`` is known before it starts."""
        for name in ("hub", "public", "proxy_api"):
            self.ports.setdefault(name, free_port())

    def start(self, log: Callable[[str], None] = print) -> None:
        if not PROXY.exists():
            raise TestbedError(f"the hub's proxy is missing ({PROXY}); run 'make node-deps'")
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A fresh hub: no person keeps a token of an earlier run.
        (self.workdir / "jupyterhub.sqlite").unlink(missing_ok=True)
        self.pick_ports()
        config = self.workdir / "jupyterhub_config.py"

        def argv() -> list[str]:
            config.write_text(_config(self))
            config.chmod(0o600)
            return [sys.executable, "-m", "jupyterhub", "-f", str(config)]

        self.component = Component(
            "jupyterhub",
            argv,
            # Through the proxy, as people come: the proxy lives on when its public port
            # was taken, and only this hub knows the service's token.
            lambda: f"http://127.0.0.1:{self.ports['public']}/hub/api/user",
            self.log,
            reassigner(self.ports, "hub", "public", "proxy_api"),
            health_headers={"Authorization": f"token {self.service_token}"},
        )
        # The hub stops its proxy and the servers it spawned when it gets SIGTERM.
        start_component(self.component, log)

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()

    def request(self, method: str, path: str, body: Any = None, token: str = "") -> Any:
        """The JSON answer of the hub's API, as the testbed's service or as ``token``."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the URL is our hub's, on loopback
            f"{self.api_url}{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"token {token or self.service_token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                text = response.read()
        except urllib.error.HTTPError as err:
            raise TestbedError(
                f"the hub answered {method} {path} with {err.code}: {err.read()[:300]!r}"
            ) from None
        return json.loads(text) if text else None

    def token_for(self, username: str, note: str = "devboxes testbed") -> str:
        """A new API token of ``username``, made by the hub."""
        answer = self.request("POST", f"/users/{username}/tokens", {"note": note})
        return str(answer["token"])

    def start_server(self, username: str) -> dict[str, Any]:
        """Start ``username``'s single-user server and wait until the hub says it is ready;
        the hub's model of the server."""
        self.request("POST", f"/users/{username}/server")
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            server = self.request("GET", f"/users/{username}")["servers"].get("")
            if server and server["ready"]:
                return dict(server)
            time.sleep(0.5)
        raise TestbedError(f"{username}'s server was not ready within {START_TIMEOUT:.0f}s")

    def stop_server(self, username: str) -> None:
        self.request("DELETE", f"/users/{username}/server")


def hub_people(hub: Hub) -> dict[str, str]:
    """A new hub token of each person, by name: what each may present to the controller."""
    return {name: hub.token_for(name) for name in PEOPLE}
