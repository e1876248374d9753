"""A devbox kernel gives its box back: a stop is final for the kernel, and a kernel that
shuts down has its box stopped after a grace unless another kernel uses the box.

As in test_devbox_kernel.py, the Lab, its provisioner and the controller on the testbed
are real, and a Debian sshd on loopback at the box's reported address stands in for the
box's inside, with one host key for every box of the person (its boxes come and go
under one name). A stopped box's sshd drops its connections: the test ends the processes of
every connection of the stand-in sshd when it stops the box.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devboxes_jupyter.provisioner import RESTART_HINT
from devboxes_testbed.controller import Controller
from labserver import (
    KernelLab,
    Lab,
    execute_once,
    kernel_progress,
    made_cpu_box,
    module_kernel_lab,
    start_kernel,
    type_into_cell,
)
from support import wait_for

from devboxes_sdk import models
from devboxes_sdk.client import Client

GRACE_SECONDS = 4


setup = module_kernel_lab("g", 20, f"--DevboxKernelProvisioner.stop_grace_seconds={GRACE_SECONDS}")


def _descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found: list[int] = []
    for child in map(int, children):
        found += [child, *_descendants(child)]
    return found


def _drop_connections(sshd_directory: Path) -> None:
    """End every connection of the stand-in sshd (and what runs in it), as the box's
    sshd ends them when the box stops; the sshd keeps listening."""
    listener = int((sshd_directory / "sshd.pid").read_text())
    for pid in _descendants(listener):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def _progress(lab: Lab, kernel_id: str) -> dict[str, Any] | None:
    return kernel_progress(lab).get(kernel_id)


def _running_kernel(lab: Lab, kernelspec: str) -> str:
    started = start_kernel(lab, kernelspec)
    assert started.status_code == 201, started.text
    kernel_id: str = started.json()["id"]
    assert execute_once(lab, kernel_id, "1+1").results == ["2"]
    return kernel_id


@contextlib.contextmanager
def _cpu_box_answering(
    setup: KernelLab, controller: Controller, client: Client, cleanup: list[str]
) -> Iterator[str]:
    """The person's CPU box, made before any kernel asks for it, with its stand-in sshd
    running in ``setup.base / "sshd"`` until the block ends: the box's name."""
    box, port = made_cpu_box(setup, client, cleanup)
    with setup.box_sshd(controller, box.name, port):
        yield box.name


def _wait_stopped(client: Client, name: str) -> None:
    """Wait until the box is stopped, which the provisioner does once the grace is over."""
    wait_for(
        lambda: client.get(name).state is models.DevboxState.STOPPED,
        timeout=GRACE_SECONDS + 60,
    )


def test_a_box_stopped_under_its_kernel_stays_stopped_until_the_kernel_is_restarted(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    sshd = setup.base / "sshd"
    with _cpu_box_answering(setup, controller, controller_client, cleanup) as name:
        kernel_id = _running_kernel(setup.lab, "devbox-cpu")
        stopped = controller_client.stop(name)
        _drop_connections(sshd)

        def restart_settled() -> bool:
            """Jupyter's restarter tried the dead kernel: it failed, or started the box"""
            progress = _progress(setup.lab, kernel_id)
            refused = progress is not None and progress["phase"] == "failed"
            return refused or controller_client.get(name).state is not models.DevboxState.STOPPED

        wait_for(restart_settled, timeout=120)
        box = controller_client.get(name)
        assert box.state is models.DevboxState.STOPPED, "the automatic restart started the box"
        # Not started again: a start would have renewed its time to live.
        assert box.expires_at == stopped.expires_at
        progress = _progress(setup.lab, kernel_id)
        assert progress is not None
        # The controller's message may add that the pod is still shutting down.
        assert progress["message"].endswith(RESTART_HINT)
        assert progress["message"].startswith(
            f"box {name} was stopped, so its kernel ended: Stopped; storage is kept."
        )

        # Restart Kernel, as Lab asks for it, starts the box and the kernel again.
        setup.lab.api("POST", f"api/kernels/{kernel_id}/restart", timeout=400)
        box = controller_client.get(name)
        assert box.state is models.DevboxState.READY
        assert box.expires_at != stopped.expires_at
        assert execute_once(setup.lab, kernel_id, "2+2").results == ["4"]
        progress = _progress(setup.lab, kernel_id)
        assert progress is not None
        assert progress["phase"] == "running"
        setup.lab.api("DELETE", f"api/kernels/{kernel_id}", timeout=60)


def test_a_shut_down_kernel_gives_its_box_back_after_the_grace(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    with _cpu_box_answering(setup, controller, controller_client, cleanup) as name:
        kernel_id = _running_kernel(setup.lab, "devbox-cpu")
        setup.lab.api("DELETE", f"api/kernels/{kernel_id}", timeout=60)
        closed = time.monotonic()
        _wait_stopped(controller_client, name)
        assert time.monotonic() - closed >= GRACE_SECONDS, "stopped before the grace was over"
    # The Lab says so once the controller has answered the stop, a moment after the box
    # reads as stopped.
    said = f"box {name} stopped, no kernel of this server uses it"
    wait_for(lambda: said in setup.lab.log_text(), timeout=30)


def test_a_box_two_kernels_use_is_kept_until_the_last_one_shuts_down(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    with _cpu_box_answering(setup, controller, controller_client, cleanup) as name:
        first = _running_kernel(setup.lab, "devbox-cpu")
        second = _running_kernel(setup.lab, "devbox-cpu")
        setup.lab.api("DELETE", f"api/kernels/{first}", timeout=60)
        kept = f"box {name} kept, another kernel of this server uses it"
        wait_for(lambda: kept in setup.lab.log_text(), timeout=GRACE_SECONDS + 60)
        assert controller_client.get(name).state is models.DevboxState.READY
        assert execute_once(setup.lab, second, "3+3").results == ["6"]

        setup.lab.api("DELETE", f"api/kernels/{second}", timeout=60)
        _wait_stopped(controller_client, name)


def _run_cell(page: Any, code: str, output: str) -> None:
    from playwright.sync_api import expect

    cell = page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").last
    type_into_cell(page, cell, code)
    page.keyboard.press("Shift+Enter")
    result = page.locator(".jp-Notebook .jp-OutputArea-output", has_text=output)
    expect(result.first).to_be_visible(timeout=180_000)


@pytest.mark.browser
def test_the_notebook_says_why_its_kernel_ended_and_restart_kernel_starts_the_box(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    from playwright.sync_api import expect
    from test_browser import IMAGES, _browser_page, _need_browser, _open_lab

    _need_browser()
    sshd = setup.base / "sshd"
    with (
        _cpu_box_answering(setup, controller, controller_client, cleanup) as name,
        _browser_page() as page,
    ):
        _open_lab(page, setup.lab)
        page.locator(
            ".jp-LauncherCard[data-category='Notebook']", has_text="Python 3 on CPU (devbox)"
        ).click()
        _run_cell(page, "print(6 * 7)", "42")
        stopped = controller_client.stop(name)
        _drop_connections(sshd)
        ended = f"box {name} was stopped, so its kernel ended: Stopped; storage is kept."
        # Lab first says the kernel died and will restart; then the kernel is dead, and
        # Lab shows why in its dialog, as a notification and in the Devboxes sidebar.
        toast = page.locator(".Toastify__toast", has_text=f"box {name} was stopped")
        expect(toast.first).to_be_visible(timeout=120_000)
        restarting = page.locator(".jp-Dialog", has_text="It will restart automatically")
        restarting.locator("button", has_text="Ok").click()
        dead = page.locator(".jp-Dialog", has_text="Error Starting Kernel")
        expect(dead).to_contain_text(ended, timeout=120_000)
        expect(page.locator(".jp-Dialog")).to_have_count(1)
        page.screenshot(path=str(IMAGES / "jupyter-kernel-box-stopped.png"))
        dead.locator("button", has_text="Ok").click()
        page.locator(".jp-SideBar [data-id='devboxes-sidebar']").click()
        failed = page.locator("#devboxes-sidebar").get_by_test_id(f"devbox-kernel-{name}")
        expect(failed).to_contain_text(ended)
        expect(failed).to_have_attribute("data-phase", "failed")
        box = controller_client.get(name)
        assert box.state is models.DevboxState.STOPPED
        assert box.expires_at == stopped.expires_at

        # Lab cannot restart a dead kernel; choosing the kernel again starts one.
        page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").click()
        page.locator(".lm-Menu-itemLabel", has_text="Change Kernel").first.click()
        page.locator(".jp-Dialog select").select_option(label="Python 3 on CPU (devbox)")
        page.locator(".jp-Dialog button", has_text="Select").click()
        idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        expect(idle).to_be_attached(timeout=180_000)
        _run_cell(page, "print(6 * 8)", "48")
        assert controller_client.get(name).state is models.DevboxState.READY
