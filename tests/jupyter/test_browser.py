"""The Devboxes sidebar, the launcher, devbox kernels and the widgets in headless Chromium.

JupyterLab is started as ``make up`` starts it (controller URL and token file on its
command line, no ``DEVBOX_*`` variables) with this checkout's prebuilt labextension,
against the real controller. Screenshots, in the light and the dark theme, land in
``test-artifacts/jupyter``; ``make screenshots`` copies them to ``docs/images``, which
docs/jupyter.md shows.

The devbox kernel test needs a box that runs an sshd; kwok pods run nothing, so a Debian
sshd on loopback at the box's reported SSH address stands in for it (see sshd.py).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devboxes_jupyter.provisioner import box_name
from devboxes_testbed import L4
from devboxes_testbed.controller import Controller
from labserver import LABEXTENSION, KernelLab, Lab, running_kernel_lab
from sshd import loopback_sshd, need_sshd
from support import CHROMIUM, CHROMIUM_ARGS, wait_for, wait_until_no_pod_requests

from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import BoxNotReady
from devboxes_sdk.labels import accelerator_label

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "test-artifacts" / "jupyter"
READY_TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def setup(controller: Controller, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelLab]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (make system-packages installs it)")
    if not (LABEXTENSION / "package.json").exists():
        pytest.skip("the labextension is not built (see jupyter_ext/README.md)")
    with running_kernel_lab(
        tmp_path_factory.mktemp("browser"),
        controller.url,
        controller.token,
        owner_prefix="b",
        connect_timeout=120,
        extra_args=[
            # The theme switch for the dark screenshots goes through the app's commands.
            "--LabApp.expose_app_in_browser=True",
            "--DevboxesJupyterApp.poll_interval=2",
        ],
    ) as kernel_lab:
        yield kernel_lab


@pytest.fixture
def lab(setup: KernelLab) -> Lab:
    return setup.lab


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    IMAGES.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1360, "height": 860})
        page = context.new_page()
        try:
            yield page
        finally:
            context.close()
            browser.close()


def _l4_profile(client: Client) -> models.GpuProfile:
    profile = client.capabilities().gpu.profile(L4)
    assert profile is not None, "the session's controller serves the example GPU profiles"
    return profile


class _Blocked(Exception):
    pass


def _wait_until_all_free(client: Client, kube: Any, profile: models.GpuProfile) -> None:
    wait_until_no_pod_requests(kube, profile.resource_name)

    def all_free() -> bool:
        """the controller sees every device of the profile free"""
        entry = client.gpu.availability().profile(profile.name)
        assert entry is not None
        return entry.capacity is not None and entry.available == entry.capacity

    wait_for(all_free, timeout=180)


def _leave_one_device(
    client: Client, kube: Any, profile: models.GpuProfile, cleanup: list[str]
) -> None:
    """Fill the profile's devices with boxes until one cannot be placed, then free one.

    The test then owns the cluster's last free device of this profile, however many
    the node pools have: its first box is placed, its second is not.
    """

    def stop_when_blocked(box: Devbox) -> None:
        if box.state is models.DevboxState.STARTING and (box.message or "").startswith(
            "Scheduling blocked"
        ):
            raise _Blocked

    # Earlier tests' boxes of the profile may still be giving their devices back: one
    # freed after the filling would let the test's second box start.
    _wait_until_all_free(client, kube, profile)
    fillers: list[str] = []
    for _ in range(32):
        name = f"fill-{secrets.token_hex(3)}"
        client.create(name, gpu=profile.name, ttl_hours=1)
        cleanup.append(name)
        try:
            client.wait_ready(name, 120, on_update=stop_when_blocked)
        except _Blocked:
            client.delete(name, purge=True)
            break
        except BoxNotReady as error:
            pytest.fail(f"filler box {name} did not become ready: {error}")
        fillers.append(name)
    else:
        pytest.fail(f"32 boxes of profile {profile.name} were all placed; cannot exhaust it")
    if fillers:
        client.delete(fillers[-1], purge=True)


def _open_lab(page: Any, lab: Lab, path: str = "lab", ready: str = ".jp-LauncherCard") -> None:
    # reset: start from an empty layout, not the one an earlier test left behind.
    page.goto(f"{lab.url}/{path}?reset&token={lab.token}")
    page.wait_for_selector(ready, timeout=60_000)


def _theme(page: Any, name: str) -> None:
    page.evaluate(
        "name => window.jupyterapp.commands.execute('apputils:change-theme', {theme: name})",
        name,
    )
    light = "true" if name == "JupyterLab Light" else "false"
    page.wait_for_selector(f"body[data-jp-theme-light='{light}']", state="attached")
    # A theme change shows JupyterLab's splash until the new theme has loaded.
    page.wait_for_selector("#jupyterlab-splash", state="detached")


def _open_sidebar(page: Any) -> Any:
    page.locator(".jp-SideBar [data-id='devboxes-sidebar']").click()
    sidebar = page.locator("#devboxes-sidebar")
    sidebar.wait_for(state="visible")
    return sidebar


def _devbox_cli(controller: Controller, *args: str) -> None:
    env = {**os.environ, "DEVBOX_URL": controller.url, "DEVBOX_TOKEN": controller.token}
    subprocess.run(
        [sys.executable, "-m", "devboxes_sdk.cli", *args],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )


def test_sidebar_lists_a_cli_box_and_follows_its_stop(
    page: Any, lab: Lab, controller: Controller, cleanup: list[str]
) -> None:
    from playwright.sync_api import expect

    name = f"cli-{secrets.token_hex(3)}"
    cleanup.append(name)
    _devbox_cli(controller, "create", name, "--gpu", "--ttl", "6")

    _open_lab(page, lab)
    sidebar = _open_sidebar(page)
    row = sidebar.get_by_test_id(f"devbox-row-{name}")
    expect(row).to_be_visible(timeout=60_000)
    expect(sidebar.get_by_test_id(f"devbox-state-{name}")).to_have_text("ready", timeout=120_000)
    expect(row).to_contain_text("NVIDIA L4")
    expect(row).to_contain_text("auto-stop in")
    expect(row.get_by_role("button", name="Copy SSH")).to_be_visible()
    row.get_by_role("button", name=f"Show details of {name}").click()
    expect(sidebar.get_by_test_id(f"devbox-detail-{name}")).to_contain_text("ssh: ssh -p")
    page.screenshot(path=str(IMAGES / "jupyter-sidebar-light.png"))

    # Stopped from the command line; the sidebar follows without a reload.
    _devbox_cli(controller, "stop", name)
    expect(sidebar.get_by_test_id(f"devbox-state-{name}")).to_have_text("stopped", timeout=60_000)
    expect(row.get_by_role("button", name="Start")).to_be_visible()

    _theme(page, "JupyterLab Dark")
    page.screenshot(path=str(IMAGES / "jupyter-sidebar-dark.png"))
    _theme(page, "JupyterLab Light")

    # 800 px wide: every action shows its whole label.
    page.set_viewport_size({"width": 800, "height": 700})
    for action in row.locator(".jp-Devboxes-action").all():
        assert action.evaluate("b => b.scrollWidth <= b.clientWidth"), action.inner_text()
    page.screenshot(path=str(IMAGES / "jupyter-sidebar-800.png"))

    # Start from the sidebar, then delete with a purge that asks for the typed name.
    row.get_by_role("button", name="Start").click()
    expect(sidebar.get_by_test_id(f"devbox-state-{name}")).not_to_have_text(
        "stopped", timeout=60_000
    )
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("button", name="Delete and purge the volume").click()
    page.locator(".jp-Dialog input").fill("not-the-name")
    page.locator(".jp-Dialog").get_by_role("button", name="Purge").click()
    expect(page.locator(".jp-Notification-Toast-warning, .Toastify__toast")).to_contain_text(
        "Not purged"
    )
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("button", name="Delete and purge the volume").click()
    page.locator(".jp-Dialog input").fill(name)
    page.locator(".jp-Dialog").get_by_role("button", name="Purge").click()
    expect(sidebar.get_by_test_id(f"devbox-row-{name}")).to_have_count(0, timeout=60_000)


def test_launcher_tile_opens_the_sidebar_and_its_picker_creates_gpu_boxes(
    page: Any,
    lab: Lab,
    controller_client: Client,
    controller: Controller,
    kube: Any,
    cleanup: list[str],
) -> None:
    from playwright.sync_api import expect

    profile = _l4_profile(controller_client)
    _leave_one_device(controller_client, kube, profile, cleanup)

    _open_lab(page, lab)
    tile = page.locator(".jp-LauncherCard", has_text="GPU Devbox")
    expect(tile).to_be_visible()
    expect(
        page.locator(
            ".jp-LauncherCard[data-category='Notebook']",
            has_text=f"Python 3 on {profile.display_name} (devbox)",
        )
    ).to_be_visible()
    page.screenshot(path=str(IMAGES / "jupyter-launcher.png"))
    tile.click()

    accelerator = page.get_by_test_id("devbox-accelerator")
    expect(accelerator).to_be_visible()
    # The presets are those of the API's description of a create.
    expect(page.get_by_test_id("devbox-preset").locator("option")).to_have_text(
        list(models.PRESETS)
    )
    expect(accelerator.locator("option").nth(1)).to_be_attached()
    expect(accelerator).to_have_value("")
    expect(accelerator.locator("option").first).to_have_text("CPU only")
    accelerator.select_option(profile.name)
    expect(page.get_by_test_id("devbox-accelerator-help")).not_to_be_empty()

    first, second = f"ui-a-{secrets.token_hex(3)}", f"ui-b-{secrets.token_hex(3)}"
    name_input = page.get_by_test_id("devbox-name")
    name_input.fill("Bad Name!")
    page.get_by_test_id("devbox-create").click()
    expect(page.get_by_test_id("devbox-error")).to_contain_text("invalid name")

    cleanup.extend([first, second])
    name_input.fill(first)
    page.get_by_test_id("devbox-create").click()
    expect(page.get_by_test_id(f"devbox-state-{first}")).to_have_text(
        "ready", timeout=READY_TIMEOUT_MS
    )
    expect(page.get_by_test_id("devbox-error")).to_be_empty()

    name_input.fill(second)
    page.get_by_test_id("devbox-create").click()
    reason = page.get_by_test_id(f"devbox-status-{second}")
    # The one-line summary the controller puts before the scheduler's words; the
    # scheduler may first name another reason (a volume still binding, say).
    expect(reason).to_contain_text(
        f"Waiting for a free {profile.display_name}", timeout=READY_TIMEOUT_MS
    )
    expect(page.get_by_test_id(f"devbox-state-{second}")).to_have_text("starting")
    page.screenshot(path=str(IMAGES / "jupyter-panel.png"))

    blocked = controller_client.get(second)
    assert blocked.state is models.DevboxState.STARTING
    assert blocked.gpu is not None

    # The controller token stays on the server: not in the page, not in the server log.
    assert controller.token not in page.content()
    assert controller.token not in lab.log_text()


def test_picker_shows_free_devices_and_follows_a_stop_without_reload(
    page: Any, lab: Lab, controller_client: Client, kube: Any, cleanup: list[str]
) -> None:
    from playwright.sync_api import expect

    profile = _l4_profile(controller_client)

    def l4() -> models.ProfileAvailability:
        entry = controller_client.gpu.availability().profile(profile.name)
        assert entry is not None
        return entry

    # The count is compared exactly, so no other box may take or free one meanwhile.
    _wait_until_all_free(controller_client, kube, profile)
    total = l4().capacity
    assert total
    name = f"ui-f-{secrets.token_hex(3)}"
    cleanup.append(name)
    controller_client.create(name, gpu=profile.name, ttl_hours=1)
    controller_client.wait_ready(name, 120)

    def label(free: int) -> re.Pattern[str]:
        # The picker's option: the accelerator label, an en dash, the free count.
        return re.compile(rf"^{re.escape(accelerator_label(profile))} — {free} of {total} free")

    _open_lab(page, lab)
    sidebar = _open_sidebar(page)
    sidebar.get_by_test_id("devbox-new").click()
    accelerator = sidebar.get_by_test_id("devbox-accelerator")
    option = accelerator.locator(f"option[value='{profile.name}']")
    expect(option).to_have_text(label(total - 1), timeout=60_000)
    accelerator.select_option(profile.name)
    sidebar.screenshot(path=str(IMAGES / "jupyter-picker-free.png"))

    # A mark only this page load carries: still there afterwards, so nothing reloaded.
    page.evaluate("window.devboxesNoReload = true")
    controller_client.stop(name)
    expect(option).to_have_text(label(total), timeout=120_000)
    assert page.evaluate("window.devboxesNoReload === true")
    # The choice survives the picker's refresh.
    expect(accelerator).to_have_value(profile.name)
    sidebar.screenshot(path=str(IMAGES / "jupyter-picker-free-after-stop.png"))


def test_devbox_kernel_from_the_launcher_runs_a_cell(
    page: Any, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    from playwright.sync_api import expect

    need_sshd()
    profile = _l4_profile(controller_client)
    name = box_name(setup.owner, profile.name)
    cleanup.append(name)
    lab = setup.lab
    _open_lab(page, lab)
    sidebar = _open_sidebar(page)
    card = page.locator(
        ".jp-LauncherCard[data-category='Notebook']",
        has_text=f"Python 3 on {profile.display_name} (devbox)",
    )
    expect(card).to_be_visible(timeout=60_000)
    card.click()

    # The start waits at the SSH step until the box's sshd exists; meanwhile the
    # sidebar shows what it is doing.
    progress = sidebar.get_by_test_id(f"devbox-kernel-{name}")
    expect(progress).to_contain_text("over SSH", timeout=READY_TIMEOUT_MS)
    # The sidebar and the toast name the kernel by the profile's display name.
    title = f"Python 3 on {profile.display_name} (devbox)"
    expect(progress).to_contain_text(title)
    expect(page.locator(".Toastify__toast", has_text=f"{title}:").first).to_be_visible()
    page.screenshot(path=str(IMAGES / "jupyter-kernel-progress.png"))

    port = controller_client.get(name).ssh_port
    with loopback_sshd(setup.base / "sshd", port, setup.key.with_suffix(".pub")):
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_be_attached(
            timeout=READY_TIMEOUT_MS
        )
        cell = page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first
        cell.click()
        page.keyboard.type("import os; print(1 + 1, 'SSH_CONNECTION' in os.environ)")
        page.keyboard.press("Shift+Enter")
        output = page.locator(".jp-Notebook .jp-OutputArea-output").first
        expect(output).to_contain_text("2 True", timeout=120_000)
        expect(page.locator(".jp-Notebook")).to_be_visible()
        page.screenshot(path=str(IMAGES / "jupyter-devbox-kernel.png"))
        _theme(page, "JupyterLab Dark")
        page.screenshot(path=str(IMAGES / "jupyter-devbox-kernel-dark.png"))
        _theme(page, "JupyterLab Light")
        for kernel in lab.api("GET", "api/kernels"):
            lab.api("DELETE", f"api/kernels/{kernel['id']}", timeout=60)


WIDGETS_NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": (
                "from devboxes_jupyter.widgets import AcceleratorPicker, DevboxTable\n"
                "from devboxes_sdk.client import Client\n"
                "client = Client()\n"
                "display(AcceleratorPicker.from_client(client))\n"
                "DevboxTable(client)"
            ),
        }
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def test_widgets_render_in_a_notebook(
    page: Any, lab: Lab, controller_client: Client, cleanup: list[str]
) -> None:
    from playwright.sync_api import expect

    name = f"ui-w-{secrets.token_hex(3)}"
    controller_client.create(name, ttl_hours=2)
    cleanup.append(name)
    lab.api("PUT", "api/contents/widgets.ipynb", {"type": "notebook", "content": WIDGETS_NOTEBOOK})

    _open_lab(page, lab, "lab/tree/widgets.ipynb", ready=".jp-Notebook .jp-Cell")
    # The notebook shows an empty cell before its content arrives; run the real one.
    expect(page.locator(".jp-Notebook .jp-Cell").first).to_contain_text(
        "DevboxTable(client)", timeout=60_000
    )
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_be_attached(
        timeout=60_000
    )
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
    # Run the cell as a person would: click into it, then Shift+Enter. Right after the
    # kernel connects, a run can be dropped without a trace; a person would run it again.
    first_prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first
    for _attempt in range(3):
        page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click()
        page.keyboard.press("Shift+Enter")
        try:
            expect(first_prompt).not_to_have_text("[ ]:", timeout=15_000)
            break
        except AssertionError:
            continue

    picker = page.locator(".devboxes-accelerator select")
    expect(picker).to_be_visible(timeout=120_000)
    expect(picker.locator("option").first).to_have_text("CPU only")
    expect(picker).to_have_value("CPU only")
    table = page.locator(".devboxes-table")
    expect(table).to_contain_text(name, timeout=60_000)
    expect(table).to_contain_text("CPU only")
    expect(table.get_by_role("button", name="Stop").first).to_be_visible()
    # The table's buttons show their whole label (they used to read "S… S… D…").
    for label in ("Start", "Stop", "Delete"):
        action = table.get_by_role("button", name=label).first
        assert action.evaluate("b => b.scrollWidth <= b.clientWidth"), label
    page.screenshot(path=str(IMAGES / "jupyter-widgets.png"), full_page=True)
