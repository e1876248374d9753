"""Two people in two Labs competing for one device: each Lab acts as its person with a token
of the testbed's OpenID provider, sees only that person's box, and the one who waits is
told the exact place in line and gets the device when the other gives it back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from devboxes_testbed.controller import Controller
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from labserver import Lab, running_lab
from support import DevicePool, StartController, wait_for


@pytest.fixture
def controller_for_people(
    start_controller: StartController, issuer: Issuer, namespace: str, pool: DevicePool
) -> Controller:
    settings = pool.settings(namespace)
    settings["auth"] = {"oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID}}
    started: Controller = start_controller(settings)
    return started


def _boxes(lab: Lab) -> dict[str, dict[str, Any]]:
    return {box["name"]: box for box in lab.api("GET", "devboxes/api/devboxes")["items"]}


def test_two_people_in_two_labs_compete_for_one_device(
    controller_for_people: Controller, issuer: Issuer, tmp_path: Path
) -> None:
    url = controller_for_people.url
    with (
        running_lab(tmp_path / "alice", url, issuer.token_for("alice")) as alice,
        running_lab(tmp_path / "bob", url, issuer.token_for("bob")) as bob,
    ):
        assert alice.api("GET", "devboxes/api/whoami")["user"] == "alice"
        assert bob.api("GET", "devboxes/api/whoami")["user"] == "bob"
        gpu = {"profile": DevicePool.PROFILE}
        alice.api("POST", "devboxes/api/devboxes", {"name": "alice-l4", "gpu": gpu})
        wait_for(lambda: _boxes(alice)["alice-l4"]["state"] == "ready", timeout=120)
        bob.api("POST", "devboxes/api/devboxes", {"name": "bob-l4", "gpu": gpu})

        def bobs_reason() -> str | None:
            summary: str | None = _boxes(bob)["bob-l4"]["summary"]
            return summary if summary and "in line" in summary else None

        reason = wait_for(bobs_reason, timeout=120)
        assert reason == f"Waiting for a free {DevicePool.DISPLAY}: 0 of 1 free, 1st in line"
        # Each Lab lists its own person's box only.
        assert set(_boxes(alice)) == {"alice-l4"}
        assert set(_boxes(bob)) == {"bob-l4"}

        alice.api("POST", "devboxes/api/devboxes/alice-l4/stop")
        wait_for(lambda: _boxes(bob)["bob-l4"]["state"] == "ready", timeout=120)
        assert _boxes(alice)["alice-l4"]["state"] == "stopped"
