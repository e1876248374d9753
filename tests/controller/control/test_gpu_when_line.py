"""``GET /api/v1/gpu/when`` and ``devbox gpu when`` on the testbed: a kwok node with two
devices of its own, boxes holding them and one waiting, and the answer following the
holders' stop times as they change."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from devboxes_testbed.controller import Controller
from support import DevicePool, StartController, wait_for

from devboxes_sdk import Client
from devboxes_sdk.errors import NotFound
from devboxes_sdk.models import DevboxState

PROFILE = DevicePool.PROFILE
# The pool fixture's node offers two devices.
POOL_DEVICES = 2


def _placed(client: Client, name: str) -> None:
    wait_for(lambda: client.get(name).state is DevboxState.READY, timeout=120)


def _devbox(controller: Controller, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "DEVBOX_URL": controller.url, "DEVBOX_TOKEN": controller.token}
    return subprocess.run(
        [sys.executable, "-m", "devboxes_sdk", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )


def test_when_follows_the_holders_stop_times_and_the_line(
    start_controller: StartController, pool: DevicePool, namespace: str
) -> None:
    controller = start_controller(pool.settings(namespace))
    client = Client(controller.url, controller.token)
    assert client.gpu.when(PROFILE).profiles[0].basis == "Now: 2 of 2 free."
    client.create("first", gpu=PROFILE, ttl_hours=1)
    client.create("second", gpu=PROFILE, ttl_hours=2)
    for name in ("first", "second"):
        _placed(client, name)
    first, second = client.get("first"), client.get("second")

    # Both devices held: the earlier stop frees the one a new box gets.
    answer = wait_for(
        lambda: (
            (found := client.gpu.when(PROFILE).profiles[0]).free_at == first.expires_at and found
        ),
        timeout=30,
    )
    assert answer.bound
    assert answer.basis.startswith("By ")
    assert "the 1st of the 2 boxes holding one" in answer.basis

    # One waits in line: it takes the first device back, a new box the second.
    client.create("third", gpu=PROFILE, ttl_hours=1)
    behind = wait_for(
        lambda: (
            (found := client.gpu.when(PROFILE).profiles[0]).free_at == second.expires_at and found
        ),
        timeout=30,
    )
    assert "(1 waiting ahead)" in behind.basis
    shown = _devbox(controller, "gpu", "when", PROFILE)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"{PROFILE}: {behind.basis}\n"

    # The owner of the box whose stop it counted extends it: the answer moves with it.
    extended = client.extend("second", 1)
    later = wait_for(
        lambda: (
            (found := client.gpu.when(PROFILE).profiles[0]).free_at == extended.expires_at and found
        ),
        timeout=30,
    )
    assert later.bound

    # A box ahead stops early: the waiting box gets its device before the time promised
    # for it, never after.
    promised = later.free_at
    assert promised is not None
    client.stop("first")
    wait_for(lambda: client.get("third").state is DevboxState.READY, timeout=120)
    handed_on = datetime.now(UTC)
    assert handed_on <= promised
    for name in ("first", "second", "third"):
        client.delete(name, purge=True)


def test_when_refuses_a_profile_the_catalog_does_not_offer(
    start_controller: StartController, pool: DevicePool, namespace: str
) -> None:
    controller = start_controller(pool.settings(namespace))
    client = Client(controller.url, controller.token)
    with pytest.raises(
        NotFound, match=f"no GPU profile 'nope' is offered; the profiles: {PROFILE}"
    ):
        client.gpu.when("nope")
    shown = _devbox(controller, "gpu", "when", "nope")
    malformed = _devbox(controller, "gpu", "when", "BAD/NAME")
    assert malformed.returncode == 2
    assert "PROFILE: invalid profile 'BAD/NAME'" in malformed.stderr
    assert shown.returncode != 0
    assert "no GPU profile 'nope' is offered" in shown.stderr
    assert "Traceback" not in shown.stderr
