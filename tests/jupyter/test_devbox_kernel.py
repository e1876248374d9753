"""Devbox kernels: "Python 3 on <profile> (devbox)" runs its kernel inside a box over SSH.

Everything is real except the box's inside: the Lab starts the kernel through its REST
API, the provisioner asks the real controller on the testbed for the box and waits with
its server-side wait, then logs in with a throwaway key. kwok pods run nothing, so a
Debian sshd on loopback, started by the test at the SSH host and port the controller
reports for the box, stands in for the box; the kernel is a real ipykernel behind it.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from devboxes_controller.box.naming import ANNOTATION_HOST_KEY
from devboxes_jupyter import hostkeys
from devboxes_jupyter.provisioner import box_name, running_message
from devboxes_testbed import L4, ROCM
from devboxes_testbed.controller import Controller
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from labserver import (
    KernelChannels,
    KernelLab,
    Lab,
    box_ssh_port,
    execute_once,
    kernel_progress,
    kernelspecs,
    made_cpu_box,
    module_kernel_lab,
    refused,
    running_kernel_lab,
    running_lab,
    start_kernel,
    wait_offered,
    write_kernelspec,
)
from support import StartController, fill_profile_until_blocked, served_profile, wait_for
from test_jupyter_logo import png_size

from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import Conflict, NotFound

KERNEL_START_TIMEOUT = 400


setup = module_kernel_lab("t", 20)


@contextlib.contextmanager
def _kernel_started_in_box(
    setup: KernelLab,
    controller: Controller,
    controller_client: Client,
    name: str,
    kernelspec: str,
    sshd_folder: str,
) -> Iterator[str]:
    """Start a ``kernelspec`` kernel, which gets box ``name``; its stand-in sshd comes up
    at the address the box reports. The kernel's id, while that sshd runs."""
    started: list[requests.Response] = []
    starter = threading.Thread(target=lambda: started.append(start_kernel(setup.lab, kernelspec)))
    starter.start()
    port = box_ssh_port(controller_client, name)
    with setup.box_sshd(controller, name, port, sshd_folder):
        starter.join(KERNEL_START_TIMEOUT)
        assert started, "the kernel start did not answer"
        assert started[0].status_code == 201, started[0].text
        kernel_id: str = started[0].json()["id"]
        yield kernel_id


def test_kernelspecs_offer_cpu_and_every_profile(
    setup: KernelLab, controller_client: Client
) -> None:
    catalog = controller_client.capabilities().gpu
    expected = {"devbox-cpu": "Python 3 on CPU (devbox)"}
    expected.update(
        {f"devbox-{p.name}": f"Python 3 on {p.display_name} (devbox)" for p in catalog.profiles}
    )

    def offered() -> bool:
        """the Lab offers a devbox kernelspec per profile"""
        return expected.keys() <= kernelspecs(setup.lab).keys()

    wait_for(offered, timeout=60)
    specs = kernelspecs(setup.lab)
    for name, display in expected.items():
        assert specs[name]["spec"]["display_name"] == display
        assert specs[name]["spec"]["interrupt_mode"] == "message"
        # The Launcher shows the logos the Lab serves from the kernelspec's folder.
        for size in (32, 64):
            logo = requests.get(
                f"{setup.lab.url}{specs[name]['resources'][f'logo-{size}x{size}']}",
                headers={"Authorization": f"token {setup.lab.token}"},
                timeout=10,
            )
            assert logo.status_code == 200
            assert logo.headers["Content-Type"] == "image/png"
            assert png_size(logo.content) == (size, size)


def test_kernel_runs_in_the_box_interrupts_restarts_and_shuts_down(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    profile = served_profile(controller_client, L4)
    name = box_name(setup.owner, profile.name)
    cleanup.append(name)
    wait_offered(setup.lab, f"devbox-{profile.name}")

    # The provisioner creates the box; its sshd comes up at the address the box reports.
    with _kernel_started_in_box(
        setup, controller, controller_client, name, f"devbox-{profile.name}", "sshd-gpu"
    ) as kernel_id:
        box = controller_client.get(name)
        assert box.state is models.DevboxState.READY
        assert box.gpu is not None
        assert box.gpu.profile == profile.name

        progress = kernel_progress(setup.lab)
        assert progress[kernel_id]["phase"] == "running"
        assert progress[kernel_id]["box"] == name
        # A box created by the kernel has the operator's workspace image: nothing more is said.
        assert box.image is None
        assert progress[kernel_id]["message"] == f"kernel running in box {name}"

        channels = KernelChannels(setup.lab, kernel_id)
        try:
            result = channels.execute("1+1")
            assert result.status == "ok"
            assert result.results == ["2"]
            # The kernel runs in the SSH session, not as a child of the Jupyter server.
            where = channels.execute("import os; print('SSH_CONNECTION' in os.environ)")
            assert where.stdout.strip() == "True"

            sleeping = channels.send_execute("import time; time.sleep(600)")
            channels.wait_busy(sleeping)
            setup.lab.api("POST", f"api/kernels/{kernel_id}/interrupt")
            interrupted = channels.collect(sleeping, timeout=60)
            assert interrupted.status == "error"
            assert interrupted.errors[0]["ename"] == "KeyboardInterrupt"

            assert channels.execute("marker = 41").status == "ok"
            setup.lab.api("POST", f"api/kernels/{kernel_id}/restart", timeout=KERNEL_START_TIMEOUT)
        finally:
            channels.close()
        fresh = execute_once(setup.lab, kernel_id, "'marker' in dir(), 1+1")
        assert fresh.results == ["(False, 2)"]

        setup.lab.api("DELETE", f"api/kernels/{kernel_id}", timeout=60)
        # The box outlives its kernel for the grace (see test_devbox_kernel_release.py).
        assert controller_client.get(name).state is models.DevboxState.READY
        kernels = [item["id"] for item in setup.lab.api("GET", "api/kernels")]
        assert kernel_id not in kernels

        def forgotten() -> bool:
            """the kernel's progress entry is gone"""
            return kernel_id not in kernel_progress(setup.lab)

        wait_for(forgotten, timeout=60)


def test_the_cpu_kernel_uses_the_box_whatever_its_environment_and_names_it(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    name = box_name(setup.owner, None)
    cleanup.append(name)
    # The person's CPU box, created with an image profile: no other kernel is needed.
    environment = controller_client.capabilities().images.profile("python")
    assert environment is not None, "the session's controller serves the example images"
    controller_client.create(name, ttl_hours=1, image=environment.name)
    wait_offered(setup.lab, "devbox-cpu")

    with _kernel_started_in_box(
        setup, controller, controller_client, name, "devbox-cpu", "sshd-env"
    ) as kernel_id:
        progress = kernel_progress(setup.lab)
        assert progress[kernel_id]["message"] == (
            f"kernel running in box {name} (environment: {environment.display_name})"
        )
        setup.lab.api("DELETE", f"api/kernels/{kernel_id}", timeout=60)


def test_the_running_message_names_the_environment_of_a_box_that_has_one() -> None:
    box = Devbox.model_validate(
        {"name": "nb-ada-cpu", "state": "ready", "preset": "small",
         "created_at": "2026-12-04T08:00:00Z",
         "image": {"profile": "python", "display_name": "Python", "mode": "workspace"}}
    )  # fmt: skip
    assert running_message(box) == "kernel running in box nb-ada-cpu (environment: Python)"
    without = box.model_copy(update={"image": None})
    assert running_message(without) == "kernel running in box nb-ada-cpu"


def test_failures_end_the_start_with_one_message(
    controller: Controller,
    setup: KernelLab,
    controller_client: Client,
    cleanup: list[str],
    tmp_path: Path,
) -> None:
    name = box_name(setup.owner, None)
    cleanup.append(name)

    # No sshd at the box's address: the refusal, once the connect grace is over.
    message = refused(start_kernel(setup.lab, "devbox-cpu"))
    # The box is stopped again by now, and a stopped box holds no Service to read its port
    # from; its next start asks for the same node port.
    assert message.startswith(f"SSH to box {name} (")
    refusal = re.search(r"127\.0\.0\.1 port (\d+): Connection refused", message)
    assert refusal is not None, message
    port = int(refusal.group(1))
    # The start created the box and never connected: it gives the box back.
    assert message.endswith(f"; box {name}, started for this kernel, is stopped again (home kept)")
    assert controller_client.get(name).state is models.DevboxState.STOPPED

    with setup.box_sshd(controller, name, port, "sshd-cpu"):
        # An image without ipykernel: a python with nothing installed.
        bare = tmp_path / "bare"
        import venv

        venv.EnvBuilder(with_pip=False).create(bare)
        write_kernelspec(setup.lab, "devbox-bare", str(bare / "bin" / "python"), {})
        message = refused(start_kernel(setup.lab, "devbox-bare"))
        assert "cannot import ipykernel" in message
        assert "needs python3 and ipykernel" in message

        # An image without the interpreter at all.
        write_kernelspec(setup.lab, "devbox-nopython", "/nonexistent/python3", {})
        message = refused(start_kernel(setup.lab, "devbox-nopython"))
        assert "/nonexistent/python3 is not installed there" in message

    assert list(setup.lab.api("GET", "api/kernels")) == []


def test_without_an_ssh_key_no_devbox_kernel_is_offered_and_one_fails_before_it_takes_a_box(
    controller: Controller, controller_client: Client, tmp_path: Path
) -> None:
    owner = f"nokey{secrets.token_hex(3)}"
    args = [f"--DevboxKernelProvisioner.owner={owner}"]
    with running_lab(tmp_path / "lab", controller.url, controller.token, args) as lab:
        # The Lab is up and the extension loaded: whatever it offers, it offers now.
        assert "no devbox kernels are offered: no SSH key configured" in lab.log_text()
        assert not [name for name in kernelspecs(lab) if name.startswith("devbox-")]
        # A kernelspec written by hand still reaches the provisioner, which says why not.
        write_kernelspec(lab, "devbox-handmade", sys.executable, {})
        message = refused(start_kernel(lab, "devbox-handmade"))
    assert message.startswith("no SSH key configured for devbox kernels")
    with pytest.raises(NotFound):
        controller_client.get(box_name(owner, None))


def test_a_box_with_another_accelerator_is_refused_in_display_names(
    setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    profile = served_profile(controller_client, L4)
    name = box_name(setup.owner, profile.name)
    cleanup.append(name)
    # A CPU box under the name the L4 kernel would use: never silently reused.
    controller_client.create(name, ttl_hours=1)
    wait_offered(setup.lab, f"devbox-{profile.name}")
    message = refused(start_kernel(setup.lab, f"devbox-{profile.name}"))
    assert message.startswith(
        f"box {name} exists with accelerator CPU only, not {profile.display_name}; "
    )


def test_no_free_device_before_the_timeout_is_the_message(
    setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    profile = served_profile(controller_client, ROCM)

    fill_profile_until_blocked(controller_client, profile.name, cleanup)

    cleanup.append(box_name(setup.owner, profile.name))
    write_kernelspec(
        setup.lab,
        "devbox-amd-short",
        sys.executable,
        {"profile": profile.name, "start_timeout": 60},
    )
    message = refused(start_kernel(setup.lab, "devbox-amd-short"))
    name = box_name(setup.owner, profile.name)
    assert message.startswith(f"box {name} is not ready:")
    # Why it waits, as the controller words it: the free count and the box's place in line.
    assert f"(starting — Waiting for a free {profile.display_name}: 0 of " in message
    assert " in line)" in message
    # The box it created waits no longer for a device nobody will use.
    assert message.endswith("is stopped again (home kept)")
    assert controller_client.get(name).state is models.DevboxState.STOPPED


def _kernel_starts(lab: Lab, kernelspec: str) -> None:
    """A kernel of ``kernelspec`` starts; it is shut down again."""
    started = start_kernel(lab, kernelspec)
    assert started.status_code == 201, started.text
    lab.api("DELETE", f"api/kernels/{started.json()['id']}", timeout=60)


def test_one_person_s_boxes_of_one_name_on_two_clusters_keep_their_own_host_keys(
    setup: KernelLab,
    controller: Controller,
    controller_client: Client,
    start_controller: StartController,
    cleanup: list[str],
    tmp_path: Path,
) -> None:
    name = box_name(setup.owner, None)
    cleanup.append(name)
    other = start_controller()
    other_client = Client(other.url, other.token)
    # Boxes the person made beforehand, so neither start makes a box of its own.
    controller_client.create(name, ttl_hours=1)
    other_client.create(name, ttl_hours=1)
    here, there = box_ssh_port(controller_client, name), box_ssh_port(other_client, name)
    with (
        running_kernel_lab(
            tmp_path / "second", other, "", connect_timeout=20, share_with=setup
        ) as second,
        setup.box_sshd(controller, name, here, "sshd-here"),
        second.box_sshd(other, name, there, "sshd-there"),
    ):
        wait_offered(setup.lab, "devbox-cpu")
        wait_offered(second.lab, "devbox-cpu")
        _kernel_starts(setup.lab, "devbox-cpu")
        _kernel_starts(second.lab, "devbox-cpu")
        # Each box's key is still the one recorded for it.
        _kernel_starts(setup.lab, "devbox-cpu")


def test_a_box_recreated_under_its_name_is_trusted_anew(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    first, port = made_cpu_box(setup, controller_client, cleanup)
    name = first.name
    with setup.box_sshd(controller, name, port, "sshd-before"):
        _kernel_starts(setup.lab, "devbox-cpu")
    # With its home volume goes the box's host key: the new box makes another.
    controller_client.delete(name, purge=True)

    def recreated() -> Devbox | None:
        """a box of the name can be created again, its old home volume gone"""
        with contextlib.suppress(Conflict):
            return controller_client.create(name, ttl_hours=1)
        return None

    again: Devbox = wait_for(recreated, timeout=120)
    # The controller tells the two boxes apart, which is what their host keys follow.
    assert first.uid is not None
    assert again.uid not in (None, first.uid)
    port = box_ssh_port(controller_client, name)
    with setup.box_sshd(controller, name, port, "sshd-after"):
        _kernel_starts(setup.lab, "devbox-cpu")


def test_a_box_answering_with_another_key_than_the_published_one_is_refused(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    box, port = made_cpu_box(setup, controller_client, cleanup)
    name = box.name
    assert len(box.ssh_host_keys) == 1
    # An sshd with a key of its own, not the one the controller made for the box.
    with setup.sshd("sshd-impostor", port):
        message = refused(start_kernel(setup.lab, "devbox-cpu"))
        assert message.startswith(
            f"box {name} answered SSH with another host key than the one the Devboxes "
            "controller published for it, so the connection was refused"
        ), message
        # The box was running before the start: it is left running.
        assert controller_client.get(name).state is models.DevboxState.READY
    with setup.box_sshd(controller, name, port, "sshd-genuine"):
        _kernel_starts(setup.lab, "devbox-cpu")
    # Nothing was trusted on first use: the file of recorded keys holds no entry for it.
    known_hosts = setup.base / "known_hosts"
    alias = hostkeys.alias(controller.url, controller_client.get(name))
    found = subprocess.run(
        ["ssh-keygen", "-F", alias, "-f", str(known_hosts)], capture_output=True, check=False
    )
    assert found.returncode != 0, found.stdout


def test_a_box_without_a_published_key_is_trusted_on_first_use_and_a_changed_key_refused(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    name = box_name(setup.owner, None)
    cleanup.append(name)
    controller_client.create(name, ttl_hours=1)
    # As a box made before the controller made host keys: it publishes none.
    api = kube_config.new_client_from_config(str(controller.kubeconfig))
    kube_client.AppsV1Api(api).patch_namespaced_deployment(
        f"devbox-{name}",
        controller.settings["namespace"],
        {"metadata": {"annotations": {ANNOTATION_HOST_KEY: None}}},
    )
    api.close()
    wait_for(lambda: controller_client.get(name).ssh_host_keys == [], timeout=30)
    wait_offered(setup.lab, "devbox-cpu")
    port = box_ssh_port(controller_client, name)
    with setup.sshd("sshd-kept", port):
        _kernel_starts(setup.lab, "devbox-cpu")
    # The same box answers with another key.
    with setup.sshd("sshd-replaced", port):
        message = refused(start_kernel(setup.lab, "devbox-cpu"))
        known_hosts = setup.base / "known_hosts"
        assert message.startswith(
            f"the SSH host key of box {name} changed since it was first seen: "
        ), message
        assert "someone with root in the box replaced them" in message
        assert "the connection may be intercepted" in message
        recovery = re.search(r"`(ssh-keygen -R \S+ -f (\S+))`", message)
        assert recovery is not None, message
        assert shlex.split(recovery.group(2)) == [str(known_hosts)]
        # The box was running before the start: it is left running, nothing is added.
        assert message.endswith("and start the kernel again"), message
        assert controller_client.get(name).state is models.DevboxState.READY

        # The command the message gives is all it takes.
        subprocess.run(shlex.split(recovery.group(1)), capture_output=True, check=True)
        _kernel_starts(setup.lab, "devbox-cpu")
