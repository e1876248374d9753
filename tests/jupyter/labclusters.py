"""Several clusters for the Lab's tests: a controller on the session's testbed whose one
``pool-gpu`` device a box holds (the conftest's ``lab_b`` is another, on a testbed of its
own, whose one device is free), and the SDK configuration file that lists them, as a
Jupyter server finds it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from devboxes_testbed.controller import Controller
from support import DevicePool, StartController, named_cluster, wait_for

from devboxes_sdk import Client

PROFILE = DevicePool.PROFILE
# The box that holds lab-a's one device.
HOLDER = "holder"


def holding_cluster(
    start_controller: StartController, pool: DevicePool, namespace: str, name: str = "lab-a"
) -> Controller:
    """A controller on the session's testbed whose one pool device a box holds."""
    controller = start_controller(named_cluster(pool.settings(namespace), name))
    with Client(controller.url, controller.token) as client:
        client.create(HOLDER, gpu=PROFILE)

        def taken() -> bool:
            """the cluster's only pool device is held by its box"""
            found = client.gpu.availability().profile(PROFILE)
            return found is not None and found.available == 0

        wait_for(taken)
    return controller


def config_text(clusters: Mapping[str, Controller]) -> str:
    """An SDK configuration file listing ``clusters`` (name: controller), in that order."""
    return "".join(
        f'[clusters.{name}]\nurl = "{controller.url}"\ntoken = "{controller.token}"\n\n'
        for name, controller in clusters.items()
    )


def write_config(path: Path, clusters: Mapping[str, Controller]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_text(clusters), encoding="utf-8")
    path.chmod(0o600)
    return path
