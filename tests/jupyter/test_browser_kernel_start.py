"""Cells run while a devbox kernel starts, in headless Chromium.

A notebook opened with a devbox kernel has no kernel until the box is ready and the
kernel runs in it; a cell run in that time is held with the start's progress and runs
once the kernel is there, or says why it did not run. The Lab and its setup are those of
``test_browser.py``; a Debian sshd on loopback stands in for the box's inside.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from devboxes_jupyter.provisioner import box_name
from devboxes_testbed import ROCM
from devboxes_testbed.controller import Controller
from labserver import KernelLab, box_ssh_port, module_kernel_lab, type_into_cell
from sshd import need_sshd
from support import fill_profile_until_blocked, served_profile, wait_for
from test_browser import (
    READY_TIMEOUT_MS,
    _browser_page,
    _need_browser,
    _open_lab,
    _start_notebook_from_the_launcher,
)

from devboxes_sdk import models
from devboxes_sdk.client import Client

pytestmark = pytest.mark.browser

WAITING = "Waiting for the kernel"


setup = module_kernel_lab(
    "e", 120, "--DevboxesJupyterApp.poll_interval=2", needs=(_need_browser, need_sshd)
)


@pytest.fixture
def page(setup: KernelLab) -> Iterator[Any]:
    with _browser_page() as page:
        yield page


def _open_notebook(page: Any, kernel_lab: KernelLab, title: str) -> None:
    _open_lab(page, kernel_lab.lab)
    _start_notebook_from_the_launcher(page, title)


def _run_first_cell(page: Any, code: str) -> None:
    cell = page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first
    type_into_cell(page, cell, code)
    page.keyboard.press("Shift+Enter")


def test_a_cell_run_while_the_kernel_starts_is_held_and_runs_when_it_is_up(
    controller: Controller,
    page: Any,
    setup: KernelLab,
    controller_client: Client,
    cleanup: list[str],
) -> None:
    from playwright.sync_api import expect

    name = box_name(setup.owner, None)
    cleanup.append(name)
    _open_notebook(page, setup, "Python 3 on CPU (devbox)")
    # Right away, long before the box's sshd exists: the start waits at the SSH step.
    _run_first_cell(page, "print(6 * 7)")
    first = page.locator(".jp-Notebook .jp-CodeCell").first
    held = first.locator(".jp-Devboxes-heldNote")
    expect(held).to_contain_text(f"{WAITING} Python 3 on CPU (devbox):")
    expect(first.locator(".jp-InputPrompt")).to_contain_text("[*]")
    expect(held).to_contain_text("over SSH", timeout=READY_TIMEOUT_MS)

    port = box_ssh_port(controller_client, name)
    with setup.box_sshd(controller, name, port, "sshd-early"):
        expect(first.locator(".jp-OutputArea-output")).to_have_text("42", timeout=READY_TIMEOUT_MS)
        expect(first.locator(".jp-InputPrompt")).to_contain_text("[1]")
        expect(held).to_have_count(0)
        for kernel in setup.lab.api("GET", "api/kernels"):
            setup.lab.api("DELETE", f"api/kernels/{kernel['id']}", timeout=60)


def test_interrupting_a_start_that_waits_for_a_device_cancels_it_and_says_so_in_the_cell(
    page: Any, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    from playwright.sync_api import expect

    profile = served_profile(controller_client, ROCM)

    fill_profile_until_blocked(controller_client, profile.name, cleanup, prefix="fill-b")

    name = box_name(setup.owner, profile.name)
    cleanup.append(name)
    title = f"Python 3 on {profile.display_name} (devbox)"
    _open_notebook(page, setup, title)
    _run_first_cell(page, "print(6 * 7)")
    first = page.locator(".jp-Notebook .jp-CodeCell").first
    held = first.locator(".jp-Devboxes-heldNote")
    # The box's progress, as the controller words it: the free count and place in line.
    expect(held).to_contain_text(
        f"{WAITING} {title}: box {name}: "
        f"starting — Waiting for a free {profile.display_name}: 0 of ",
        timeout=READY_TIMEOUT_MS,
    )
    expect(held).to_contain_text(" in line")

    page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:interrupt-kernel']").click()
    expect(held).to_contain_text(
        "Not run: the kernel did not start: the kernel start was cancelled; "
        f"box {name}, started for this kernel, is stopped again (home kept)",
        timeout=60_000,
    )
    expect(first.locator(".jp-InputPrompt")).not_to_contain_text("*")

    def stopped() -> bool:
        """the box the start created is stopped again"""
        return controller_client.get(name).state is models.DevboxState.STOPPED

    wait_for(stopped, timeout=60)
