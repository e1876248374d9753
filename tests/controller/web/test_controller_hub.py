"""The controller as an operator runs it, with ``auth.hub`` naming a real JupyterHub: the
hub's people are known by their own tokens, a token the hub does not know is a 401, and a
hub that is down is a 503 naming the hub, never a 500, for everyone but the people it
already named.

No cluster runs: the kubeconfig names an apiserver that refuses connections, which the
controller reports as not ready while it goes on authenticating requests.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from devboxes_testbed.controller import Controller
from devboxes_testbed.hub import ADMIN_GROUP, Hub
from devboxes_testbed.process import free_port


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "gone", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}
                ],
                "users": [{"name": "nobody", "user": {}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "nobody"}}],
                "current-context": "gone",
            }
        )
    )
    return path


def whoami(controller: Controller, token: str) -> tuple[int, dict[str, Any], requests.Response]:
    response = requests.get(
        f"{controller.url}/api/v1/whoami",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    return response.status_code, response.json(), response


def test_the_served_controller_asks_the_hub_it_is_given(tmp_path: Path, kubeconfig: Path) -> None:
    hub = Hub(tmp_path / "hub")
    hub.start(log=lambda message: None)
    try:
        alice, olivia, bob = (hub.token_for(name) for name in ("alice", "olivia", "bob"))
        settings = {
            "namespace": "devboxes",
            "auth": {
                "adminGroups": [ADMIN_GROUP],
                "hub": {"apiUrl": hub.api_url, "cacheSeconds": 1},
            },
        }
        controller = Controller(kubeconfig, settings, tmp_path / "controller")
        controller.start(until="/health")
        try:
            assert whoami(controller, alice)[:2] == (
                200,
                {"user": "alice", "mode": "hub", "groups": ["ml"], "admin": False},
            )
            assert whoami(controller, olivia)[1]["admin"] is True
            for unknown in ("0" * 32, "x" * 5000):
                status, body, response = whoami(controller, unknown)
                assert (status, body) == (401, {"detail": "invalid token"})
                assert response.headers["WWW-Authenticate"] == "Bearer"

            hub.stop()
            status, body, response = whoami(controller, bob)
            assert status == 503
            assert body["detail"].startswith(
                f"cannot check a JupyterHub token: the hub at {hub.api_url} "
            )
            assert bob not in body["detail"]
            assert response.headers["Retry-After"] == "5"
            # Past cacheSeconds, the answer the hub gave about alice before it went still
            # names her.
            time.sleep(1.5)
            assert whoami(controller, alice)[:2] == (
                200,
                {"user": "alice", "mode": "hub", "groups": ["ml"], "admin": False},
            )
            assert whoami(controller, controller.token)[1]["mode"] == "operator"
        finally:
            controller.stop()
        log = controller.log.read_text()
        assert all(token not in log for token in (alice, olivia, bob))
        assert "Traceback" not in log
    finally:
        hub.stop()
