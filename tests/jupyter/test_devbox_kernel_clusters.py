"""A devbox kernel of a Lab whose SDK configuration names several clusters keeps to the
cluster of its box: pinned when the kernel starts, it is used for the restart and for
the stop that gives the box back, even after the configuration's default has changed.

As in test_devbox_kernel.py, the Lab, its provisioner and the controllers are real, and
a Debian sshd on loopback at the box's reported address stands in for the box's inside.
lab-a is the session's controller; lab-b a second controller on the same testbed, with
a box of the same name that no kernel of lab-a's box may ever take.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from devboxes_jupyter import box_start
from devboxes_jupyter.provisioner import DevboxKernelProvisioner, box_name
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.rig import Rig
from labserver import (
    KernelLab,
    execute_once,
    kernel_progress,
    made_cpu_box,
    running_kernel_lab,
    start_kernel,
)
from sshd import need_sshd
from support import wait_for

from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import NotFound

GRACE_SECONDS = 3
KERNEL_START_TIMEOUT = 400


def config_text(default: str, clusters: dict[str, Controller]) -> str:
    tables = "".join(
        f'[clusters.{name}]\nurl = "{c.url}"\ntoken = "{c.token}"\n\n'
        for name, c in clusters.items()
    )
    return f'default_cluster = "{default}"\n\n{tables}'


def write_config(path: Path, text: str) -> dict[str, str]:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return {"DEVBOX_CONFIG": str(path), "HOME": str(path.parent)}


def test_a_kernel_pins_the_cluster_the_configuration_gives_when_several_are_configured(
    tmp_path: Path,
) -> None:
    a = "https://devboxes.lab-a.example.com"
    b = "https://devboxes.lab-b.example.com"
    two = (
        'default_cluster = "lab-b"\n'
        f'[clusters.lab-a]\nurl = "{a}"\ntoken = "token-a-0123456789abcdef"\n'
        f'[clusters.lab-b]\nurl = "{b}"\ntoken = "token-b-0123456789abcdef"\n'
    )
    env = write_config(tmp_path / "two.toml", two)
    assert box_start.kernel_cluster(env) == "lab-b"
    assert box_start.kernel_cluster({**env, "DEVBOX_CLUSTER": "lab-a"}) == "lab-a"
    # DEVBOX_URL names one controller: nothing to pin, as with one cluster.
    assert box_start.kernel_cluster({**env, "DEVBOX_URL": a}) is None
    one = f'[clusters.lab-a]\nurl = "{a}"\ntoken = "token-a-0123456789abcdef"\n'
    assert box_start.kernel_cluster(write_config(tmp_path / "one.toml", one)) is None
    assert box_start.on_cluster("nb-ada-cpu", "lab-b") == "nb-ada-cpu on cluster lab-b"
    assert box_start.on_cluster("nb-ada-cpu", None) == "nb-ada-cpu"


def test_the_tunnel_of_a_pinned_kernel_is_told_its_cluster(tmp_path: Path) -> None:
    provisioner = DevboxKernelProvisioner(
        kernel_id="k-1", kernel_spec=None, connection_info={}, known_hosts_file=str(tmp_path)
    )
    provisioner._box = Devbox.model_validate(
        {"name": "nb-ada-cpu", "state": "ready", "preset": "small",
         "created_at": "2026-12-04T08:00:00Z", "ssh_user": "dev"}
    )  # fmt: skip
    provisioner._control_dir = tmp_path
    provisioner._host_key_alias = "devbox-nb-ada-cpu-0123456789abcdef"
    provisioner._key_path = tmp_path / "key"
    provisioner._through_tunnel = True

    def proxy() -> str:
        [option] = [o for o in provisioner._ssh() if o.startswith("ProxyCommand=")]
        return option

    assert "DEVBOX_CLUSTER" not in proxy()
    provisioner._cluster = "lab-b"
    assert " DEVBOX_CLUSTER=lab-b " in proxy()
    assert proxy().endswith(" -m devboxes_sdk ssh --stdio %n")


@pytest.fixture(scope="module")
def lab_b(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    """A second controller on the session's testbed, serving a namespace of its own."""
    with Rig(tmp_path_factory.mktemp("lab-b"), testbed) as rig:
        namespace = rig.create_namespace(f"k-{uuid.uuid4().hex[:10]}")
        yield rig.start_controller(example_settings(namespace))


@pytest.fixture(scope="module")
def setup(
    controller: Controller, lab_b: Controller, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KernelLab]:
    """A Lab given no controller, whose SDK configuration names lab-a (the default) and
    lab-b."""
    need_sshd()
    base = tmp_path_factory.mktemp("lab-k")
    text = config_text("lab-a", {"lab-a": controller, "lab-b": lab_b})
    args = [f"--DevboxKernelProvisioner.stop_grace_seconds={GRACE_SECONDS}"]
    with running_kernel_lab(base, controller, "k", 20, args, sdk_config=text) as kernel_lab:
        yield kernel_lab


def lab_config(setup: KernelLab) -> Path:
    """The SDK configuration file of the Lab (see ``running_lab``)."""
    return setup.base / "lab" / "home" / ".config" / "devbox" / "config.toml"


@contextlib.contextmanager
def purged(client: Client, name: str) -> Iterator[None]:
    try:
        yield
    finally:
        with contextlib.suppress(NotFound):
            client.delete(name, purge=True)


def test_the_kernel_restarts_and_gives_its_box_back_on_its_own_cluster_after_the_default_moved(
    controller: Controller,
    lab_b: Controller,
    setup: KernelLab,
    controller_client: Client,
    cleanup: list[str],
) -> None:
    config = lab_config(setup)
    before = config.read_text()
    box, port = made_cpu_box(setup, controller_client, cleanup)
    name = box.name
    assert name == box_name(setup.owner, None)
    with Client(lab_b.url, lab_b.token) as other, purged(other, name):
        # The same name on lab-b: had the kernel followed the default, it would take it.
        other.create(name, ttl_hours=1)
        try:
            with setup.box_sshd(controller, name, port):
                started = start_kernel(setup.lab, "devbox-cpu")
                assert started.status_code == 201, started.text
                kernel_id: str = started.json()["id"]
                assert execute_once(setup.lab, kernel_id, "1+1").results == ["2"]
                running = f"kernel running in box {name} on cluster lab-a"
                assert kernel_progress(setup.lab)[kernel_id]["message"] == running

                # The person makes lab-b the default: this kernel stays with its box.
                config.write_text(config_text("lab-b", {"lab-a": controller, "lab-b": lab_b}))
                setup.lab.api(
                    "POST", f"api/kernels/{kernel_id}/restart", timeout=KERNEL_START_TIMEOUT
                )
                assert execute_once(setup.lab, kernel_id, "2+2").results == ["4"]
                assert kernel_progress(setup.lab)[kernel_id]["message"] == running

                setup.lab.api("DELETE", f"api/kernels/{kernel_id}", timeout=60)

                def stopped() -> bool:
                    """the kernel's box on lab-a is stopped once the grace is over"""
                    return controller_client.get(name).state is models.DevboxState.STOPPED

                wait_for(stopped, timeout=GRACE_SECONDS + 60)
        finally:
            config.write_text(before)
        said = f"box {name} on cluster lab-a stopped, no kernel of this server uses it"
        wait_for(lambda: said in setup.lab.log_text(), timeout=30)
        assert other.get(name).state is not models.DevboxState.STOPPED
