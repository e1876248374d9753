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

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from devboxes_jupyter.provisioner import box_name
from devboxes_testbed import L4, MIG
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.process import free_port
from labclusters import HOLDER, PROFILE, config_text, holding_cluster
from labserver import (
    LABEXTENSION,
    KernelLab,
    Lab,
    module_kernel_lab,
    refused,
    running_kernel_lab,
    running_lab,
    start_kernel,
    type_into_cell,
    write_kernelspec,
)
from sshd import need_sshd
from support import (
    DevicePool,
    StartController,
    chromium_browser,
    need_chromium,
    served_profile,
    wait_for,
    wait_until_no_pod_requests,
)

from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import BoxNotReady, NotFound
from devboxes_sdk.labels import accelerator_label, environment_choice_label, environment_label

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "test-artifacts" / "jupyter"
READY_TIMEOUT_MS = 180_000
# The sidebar's width the narrow-panel checks use: about JupyterLab's default left area.
NARROW_PX = 280
# The node label of a profile that no node serves until a test puts it on one.
LATER_LABEL = "devboxes.test/later"


def _need_browser() -> None:
    need_chromium()
    if not (LABEXTENSION / "package.json").exists():
        pytest.skip("the labextension is not built (see jupyter_ext/README.md)")


@contextlib.contextmanager
def _browser_page() -> Iterator[Any]:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with chromium_browser() as browser:
        context = browser.new_context(viewport={"width": 1360, "height": 860})
        page = context.new_page()
        try:
            yield page
        finally:
            context.close()


setup = module_kernel_lab(
    "b",
    120,
    # The theme switch for the dark screenshots goes through the app's commands.
    "--LabApp.expose_app_in_browser=True",
    "--DevboxesJupyterApp.poll_interval=2",
    needs=(_need_browser,),
)


@pytest.fixture
def lab(setup: KernelLab) -> Lab:
    return setup.lab


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with _browser_page() as page:
        yield page


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


def _start_notebook_from_the_launcher(page: Any, title: str) -> None:
    from playwright.sync_api import expect

    card = page.locator(".jp-LauncherCard[data-category='Notebook']", has_text=title)
    expect(card).to_be_visible(timeout=60_000)
    card.click()


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


def _narrow_sidebar(page: Any, sidebar: Any, width: int = NARROW_PX) -> None:
    """Drag the left area's edge until the sidebar is ``width`` pixels wide."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    for _attempt in range(4):
        now = sidebar.bounding_box()["width"]
        if abs(now - width) <= 2:
            return
        box = handle.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + width - now, y, steps=5)
        page.mouse.up()
    pytest.fail(f"the sidebar is {sidebar.bounding_box()['width']} px wide, not {width}")


# Where the text of an element wraps inside a word ("…0 of 2 fr|ee…"), and whether any of
# it lies beyond the element's or its area's right edge (cut off or hidden): the sidebar,
# a dialog.
_TEXT_FIT = r"""
(node, within) => {
  const area = node.closest(within).getBoundingClientRect();
  const own = node.getBoundingClientRect();
  const right = Math.min(area.right, own.right) + 0.5;
  const cuts = [];
  let beyond = node.scrollWidth > node.clientWidth;
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  for (let text = walker.nextNode(); text; text = walker.nextNode()) {
    const data = text.data;
    const range = document.createRange();
    let lastTop = null;
    for (let i = 0; i < data.length; i++) {
      range.setStart(text, i);
      range.setEnd(text, i + 1);
      const rect = range.getClientRects()[0];
      if (!rect) continue;
      if (/\S/.test(data[i]) && rect.right > right) beyond = true;
      if (lastTop !== null && rect.top > lastTop + 1
          && /\w/.test(data[i - 1]) && /\w/.test(data[i])) {
        cuts.push(data.slice(Math.max(0, i - 12), i) + '|' + data.slice(i, i + 12));
      }
      lastTop = rect.top;
    }
  }
  return {cuts, beyond};
}
"""


def _assert_fits(locator: Any, whole_words: bool = True, within: str = "#devboxes-sidebar") -> None:
    fit = locator.evaluate(_TEXT_FIT, within)
    text = locator.inner_text()
    assert not fit["beyond"], f"cut off at the panel's edge: {text!r}"
    if whole_words:
        assert fit["cuts"] == [], f"wrapped inside a word: {fit['cuts']} in {text!r}"


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

    profile = served_profile(controller_client, L4)
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
    expect(page.get_by_test_id(f"devbox-accelerator-{profile.name}")).to_be_visible()
    expect(page.get_by_test_id("devbox-accelerator-cpu")).to_be_checked()
    expect(page.get_by_test_id("devbox-accelerator-cpu-label")).to_have_text("CPU only")
    page.get_by_test_id(f"devbox-accelerator-{profile.name}").check()
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

    # In a sidebar as narrow as JupyterLab's default the whole reason shows, the place in line
    # included, wrapped between words; so does each accelerator's free count.
    sidebar = page.locator("#devboxes-sidebar")
    _narrow_sidebar(page, sidebar)

    def summary() -> str | None:
        """the controller gives the waiting box its place in line"""
        box = controller_client.get(second)
        return box.summary if box.summary and " in line" in box.summary else None

    expect(reason).to_have_text(wait_for(summary, timeout=120), timeout=60_000)
    expect(reason).to_contain_text(re.compile(r"\d+(st|nd|rd|th) in line"))
    _assert_fits(reason)
    choice = page.get_by_test_id(f"devbox-accelerator-{profile.name}-label")
    expect(choice).to_contain_text(re.compile(r"\d+ of \d+ free"))
    # And when a new box of it would get a device, beside the count.
    expect(choice).to_contain_text(
        re.compile(r" · next free: (now|within \d+[smhd]|about \d+[smhd]|\?)")
    )
    _assert_fits(choice)
    assert sidebar.evaluate("s => s.scrollWidth <= s.clientWidth"), "the sidebar scrolls sideways"
    sidebar.screenshot(path=str(IMAGES / "jupyter-sidebar-280.png"))

    # The controller token stays on the server: not in the page, not in the server log.
    assert controller.token not in page.content()
    assert controller.token not in lab.log_text()


def test_the_environment_is_chosen_beside_the_accelerator_and_a_refusal_shows_under_it(
    page: Any, lab: Lab, controller_client: Client, cleanup: list[str]
) -> None:
    from playwright.sync_api import expect

    images = controller_client.capabilities().images
    assert images.enabled, "the session's controller serves the example image profiles"
    preview = images.profile("web-preview")
    assert preview is not None
    assert images.profile("cuda") is not None

    _open_lab(page, lab)
    sidebar = _open_sidebar(page)
    sidebar.get_by_test_id("devbox-new").click()
    environment = sidebar.get_by_test_id("devbox-environment")
    expect(environment).to_be_visible()
    # The operator's workspace image is the default; each profile says where it runs.
    expect(sidebar.get_by_test_id("devbox-environment-default")).to_be_checked()
    expect(environment.locator(".jp-Devboxes-choiceLabel")).to_have_text(
        [
            environment_label(None),
            *(environment_choice_label(profile) for profile in images.profiles),
        ]
    )
    expect(sidebar.get_by_test_id("devbox-environment-web-preview-label")).to_have_text(
        "Web preview (beside the workspace)"
    )

    # The CUDA image runs on NVIDIA profiles only; CPU only is the form's default.
    refused, created = f"ui-e-{secrets.token_hex(3)}", f"ui-w-{secrets.token_hex(3)}"
    cleanup.extend([refused, created])
    sidebar.get_by_test_id("devbox-name").fill(refused)
    sidebar.get_by_test_id("devbox-environment-cuda").check()
    sidebar.get_by_test_id("devbox-create").click()
    refusal = sidebar.get_by_test_id("devbox-environment-error")
    expect(refusal).to_contain_text("image profile 'cuda' does not support")
    expect(sidebar.get_by_test_id("devbox-error")).to_be_empty()

    # As narrow as JupyterLab's default left area, every choice and the refusal wrap
    # between words.
    _narrow_sidebar(page, sidebar)
    for label in environment.locator(".jp-Devboxes-choiceLabel").all():
        _assert_fits(label)
    _assert_fits(refusal)
    assert sidebar.evaluate("s => s.scrollWidth <= s.clientWidth"), "the sidebar scrolls sideways"
    sidebar.screenshot(path=str(IMAGES / "jupyter-environment-280.png"))

    # Choosing again clears the refusal; the box is created with the sidecar.
    sidebar.get_by_test_id("devbox-environment-web-preview").check()
    expect(refusal).to_be_empty()
    sidebar.get_by_test_id("devbox-name").fill(created)
    sidebar.get_by_test_id("devbox-create").click()
    row = sidebar.get_by_test_id(f"devbox-row-{created}")
    expect(row).to_be_visible(timeout=60_000)
    expect(sidebar.get_by_test_id(f"devbox-row-environment-{created}")).to_have_text(
        preview.display_name
    )
    row.get_by_role("button", name=f"Show details of {created}").click()
    expect(sidebar.get_by_test_id(f"devbox-detail-{created}")).to_contain_text(
        f"environment: {preview.display_name}"
    )
    box = controller_client.get(created)
    assert box.image is not None
    assert (box.image.profile, box.image.mode) == ("web-preview", "sidecar")
    with pytest.raises(NotFound):
        controller_client.get(refused)

    # Once ready, its declared port links to the dashboard, which opens the preview.
    controller_client.wait_ready(created, timeout=120)
    link = sidebar.get_by_test_id(f"devbox-preview-{created}-8080")
    expect(link).to_have_text("Open http (8080)", timeout=60_000)
    assert link.get_attribute("href") == (
        f"{controller_client.url}/dashboard/devboxes/{created}/ports/8080/"
    )
    assert link.get_attribute("rel") == "noopener noreferrer"
    assert link.get_attribute("target") == "_blank"


def test_picker_shows_free_devices_and_follows_a_stop_without_reload(
    page: Any, lab: Lab, controller_client: Client, kube: Any, cleanup: list[str]
) -> None:
    from playwright.sync_api import expect

    profile = served_profile(controller_client, L4)

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
    option = sidebar.get_by_test_id(f"devbox-accelerator-{profile.name}-label")
    expect(option).to_have_text(label(total - 1), timeout=60_000)
    sidebar.get_by_test_id(f"devbox-accelerator-{profile.name}").check()
    sidebar.screenshot(path=str(IMAGES / "jupyter-picker-free.png"))

    # A mark only this page load carries: still there afterwards, so nothing reloaded.
    page.evaluate("window.devboxesNoReload = true")
    controller_client.stop(name)
    expect(option).to_have_text(label(total), timeout=120_000)
    assert page.evaluate("window.devboxesNoReload === true")
    # The choice survives the picker's refresh.
    expect(sidebar.get_by_test_id(f"devbox-accelerator-{profile.name}")).to_be_checked()
    sidebar.screenshot(path=str(IMAGES / "jupyter-picker-free-after-stop.png"))


def test_devbox_kernel_from_the_launcher_runs_a_cell(
    controller: Controller,
    page: Any,
    setup: KernelLab,
    controller_client: Client,
    cleanup: list[str],
) -> None:
    from playwright.sync_api import expect

    need_sshd()
    profile = served_profile(controller_client, L4)
    name = box_name(setup.owner, profile.name)
    cleanup.append(name)
    lab = setup.lab
    _open_lab(page, lab)
    sidebar = _open_sidebar(page)
    _start_notebook_from_the_launcher(page, f"Python 3 on {profile.display_name} (devbox)")

    # The start waits at the SSH step until the box's sshd exists; meanwhile the
    # sidebar shows what it is doing.
    progress = sidebar.get_by_test_id(f"devbox-kernel-{name}")
    expect(progress).to_contain_text("over SSH", timeout=READY_TIMEOUT_MS)
    # The sidebar and the toast name the kernel by the profile's display name.
    title = f"Python 3 on {profile.display_name} (devbox)"
    expect(progress).to_contain_text(title)
    expect(page.locator(".Toastify__toast", has_text=f"{title}:").first).to_be_visible()
    # The seconds of the step it waits at and of the whole start count on in the page.
    elapsed = sidebar.get_by_test_id(f"devbox-kernel-elapsed-{name}")
    expect(elapsed).to_have_text(re.compile(r"\(\d+ s(; \d+ s in all)?\)"))
    first = elapsed.text_content()
    expect(elapsed).not_to_have_text(first or "", timeout=5_000)
    page.screenshot(path=str(IMAGES / "jupyter-kernel-progress.png"))

    port = controller_client.get(name).ssh_port
    with setup.box_sshd(controller, name, port):
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_be_attached(
            timeout=READY_TIMEOUT_MS
        )
        cell = page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first
        type_into_cell(page, cell, "import os; print(1 + 1, 'SSH_CONNECTION' in os.environ)")
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


def test_a_profile_no_node_serves_gets_no_tile_until_a_node_serves_it(
    start_controller: StartController, pool: DevicePool, namespace: str, kube: Any, tmp_path: Path
) -> None:
    from kubernetes import client
    from playwright.sync_api import expect

    _need_browser()
    # A second profile whose nodes carry a label no node has yet.
    settings = pool.settings(namespace)
    served = settings["gpu"]["profiles"][0]
    later = {**served, "name": "later-gpu", "displayName": "Later GPU"}
    later["nodeSelector"] = {LATER_LABEL: "yes"}
    settings["gpu"]["profiles"].append(later)
    controller = start_controller(settings)
    args = ["--LabApp.expose_app_in_browser=True", "--DevboxesJupyterApp.poll_interval=2"]
    with (
        running_kernel_lab(
            tmp_path, controller, "o", connect_timeout=5, extra_args=args
        ) as kernel_lab,
        _browser_page() as page,
    ):
        lab = kernel_lab.lab
        _open_lab(page, lab)
        _open_sidebar(page)
        tile = page.locator(".jp-LauncherCard[data-category='Notebook']", has_text="(devbox)")
        expect(tile.filter(has_text=f"Python 3 on {pool.DISPLAY} (devbox)")).to_be_visible(
            timeout=60_000
        )
        expect(tile.filter(has_text="Python 3 on CPU (devbox)")).to_be_visible()
        # The catalog has been read, and the profile no node serves has no tile.
        expect(tile).to_have_count(2)
        assert "devbox-later-gpu" not in lab.api("GET", "api/kernelspecs")["kernelspecs"]
        page.screenshot(path=str(IMAGES / "jupyter-launcher-unservable.png"))

        # A node comes to serve it: its tile follows, with no reload and no server restart.
        page.evaluate("window.devboxesNoReload = true")
        client.CoreV1Api(kube).patch_node(pool.node, {"metadata": {"labels": {LATER_LABEL: "yes"}}})
        expect(tile.filter(has_text="Python 3 on Later GPU (devbox)")).to_be_visible(timeout=60_000)
        assert page.evaluate("window.devboxesNoReload === true")
        page.screenshot(path=str(IMAGES / "jupyter-launcher-servable.png"))


def test_sidebar_marks_a_stale_list_at_the_top_and_recovers_when_the_controller_is_back(
    start_controller: StartController, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    _need_browser()
    # A controller of this test alone, on a port it gets back after a restart.
    controller = start_controller(port=free_port())
    client = Client(controller.url, controller.token)
    name = f"st-{secrets.token_hex(3)}"
    client.create(name, ttl_hours=1)
    args = ["--DevboxesJupyterApp.poll_interval=2"]
    with (
        running_lab(tmp_path / "lab", controller.url, controller.token, args) as lab,
        _browser_page() as page,
    ):
        _open_lab(page, lab)
        sidebar = _open_sidebar(page)
        status = sidebar.get_by_test_id("devbox-watch-status")
        row = sidebar.get_by_test_id(f"devbox-row-{name}")
        stop = row.get_by_role("button", name="Stop")
        expect(stop).to_be_enabled(timeout=60_000)
        expect(status).to_have_attribute("data-stale", "false")
        expect(status).to_contain_text("Updated")

        controller.stop()
        expect(status).to_have_attribute("data-stale", "true", timeout=60_000)
        expect(status).to_contain_text("Controller unreachable. The list below is")
        expect(status).to_contain_text("actions are off until it answers again")
        expect(sidebar.get_by_test_id("devbox-stale-detail")).not_to_be_empty()
        # On top, above the form and every box, where the eye lands first.
        assert status.bounding_box()["y"] < row.bounding_box()["y"]
        assert status.bounding_box()["y"] < sidebar.bounding_box()["y"] + 80
        for action in ("Stop", "Delete"):
            expect(row.get_by_role("button", name=action)).to_be_disabled()
        sidebar.get_by_test_id("devbox-new").click()
        expect(sidebar.get_by_test_id("devbox-create")).to_be_disabled()
        _narrow_sidebar(page, sidebar)
        _assert_fits(status)
        sidebar.screenshot(path=str(IMAGES / "jupyter-sidebar-stale.png"))

        # Back on the same address: the sidebar picks it up by itself, no reload.
        page.evaluate("window.devboxesNoReload = true")
        controller.start()
        expect(status).to_have_attribute("data-stale", "false", timeout=120_000)
        expect(status).to_contain_text("Updated")
        expect(stop).to_be_enabled()
        expect(sidebar.get_by_test_id("devbox-create")).to_be_enabled()
        assert page.evaluate("window.devboxesNoReload === true")
    client.delete(name, purge=True)


def test_failed_kernel_starts_fit_are_dismissed_for_good_and_unusable_tiles_are_missing(
    controller: Controller, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    _need_browser()
    owner = f"fk{secrets.token_hex(3)}"
    cpu, l4, mig = box_name(owner, None), box_name(owner, L4), box_name(owner, MIG)
    # No SSH key: no devbox kernel could start here.
    args = [f"--DevboxKernelProvisioner.owner={owner}"]
    with (
        running_lab(tmp_path / "lab", controller.url, controller.token, args) as lab,
        _browser_page() as page,
    ):
        # Starts from before the page loaded, through kernelspecs written by hand.
        for kernel, profile in (("handmade", ""), ("handmade-l4", L4), ("handmade-mig", MIG)):
            write_kernelspec(lab, kernel, sys.executable, {"profile": profile})
        message = refused(start_kernel(lab, "handmade"))
        assert message.startswith("no SSH key configured")
        for kernel in ("handmade-l4", "handmade-mig"):
            assert refused(start_kernel(lab, kernel)) == message

        _open_lab(page, lab)
        expect(page.locator(".jp-LauncherCard", has_text="handmade").first).to_be_visible()
        expect(page.locator(".jp-LauncherCard", has_text="(devbox)")).to_have_count(0)
        sidebar = _open_sidebar(page)
        _narrow_sidebar(page, sidebar)
        failed = sidebar.get_by_test_id(f"devbox-kernel-{cpu}")
        expect(failed).to_contain_text(message, timeout=60_000)
        expect(failed).to_have_attribute("data-phase", "failed")
        # The key's setting is one long word: it may break, but stays inside the panel.
        _assert_fits(failed, whole_words=False)
        assert sidebar.evaluate("s => s.scrollWidth <= s.clientWidth"), "the panel scrolls"
        # Shown in place, not popped up again for a failure the page did not see happen.
        expect(page.locator(".Toastify__toast", has_text="no SSH key")).to_have_count(0)
        clear = sidebar.get_by_test_id("devbox-kernels-clear")
        expect(clear).to_be_visible()
        sidebar.screenshot(path=str(IMAGES / "jupyter-kernel-failed.png"))

        sidebar.get_by_test_id(f"devbox-kernel-dismiss-{cpu}").click()
        expect(failed).to_have_count(0, timeout=30_000)
        # Loaded afresh (with a reset layout, so the sidebar is opened as before).
        _open_lab(page, lab)
        sidebar = _open_sidebar(page)
        expect(sidebar.get_by_test_id("devbox-watch-status")).to_contain_text("Updated")
        expect(sidebar.get_by_test_id(f"devbox-kernel-{cpu}")).to_have_count(0)
        expect(page.locator(".Toastify__toast", has_text="no SSH key")).to_have_count(0)

        # The other failures go at once, with one control, for every page of the server.
        # Each is titled as its profile's tile would be, with the catalog's display name.
        catalog = Client(controller.url, controller.token).capabilities().gpu
        for box, profile in ((l4, L4), (mig, MIG)):
            entry = catalog.profile(profile)
            assert entry is not None
            failure = sidebar.get_by_test_id(f"devbox-kernel-{box}")
            expect(failure).to_contain_text(message)
            expect(failure).to_contain_text(f"Python 3 on {entry.display_name} (devbox)")
        sidebar.get_by_test_id("devbox-kernels-clear").click()
        expect(sidebar.locator(".jp-Devboxes-kernel")).to_have_count(0, timeout=30_000)
        expect(sidebar.get_by_test_id("devbox-kernels-clear")).to_be_hidden()
        assert lab.api("GET", "devboxes/api/watch?after=-1&timeout=0")["kernels"] == []

        # Started from its tile, the failure's whole sentence shows in JupyterLab's
        # dialog, wrapped inside it.
        page.locator(".jp-LauncherCard", has_text="handmade").first.click()
        dialog = page.locator(".jp-Dialog-content", has_text="Error Starting Kernel")
        expect(dialog).to_be_visible(timeout=120_000)
        body = dialog.locator(".jp-Dialog-body")
        expect(body).to_contain_text(message)
        _assert_fits(body, whole_words=False, within=".jp-Dialog-content")
        page.screenshot(path=str(IMAGES / "jupyter-kernel-error-dialog.png"))


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


def test_a_stop_warning_pops_up_in_the_lab_and_its_extend_keeps_the_box(
    start_controller: StartController, namespace: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    _need_browser()
    settings = example_settings(namespace)
    # Longer than the box's hour to live: it is warned of as soon as its time to live runs.
    settings["stopWarnings"] = {"leadMinutes": 61}
    controller = start_controller(settings)
    client = Client(controller.url, controller.token)
    name = f"sw-{secrets.token_hex(3)}"
    client.create(name, ttl_hours=1)
    wait_for(lambda: client.get(name).stop_warning is not None, timeout=60)
    args = ["--DevboxesJupyterApp.poll_interval=2"]
    with (
        running_kernel_lab(tmp_path, controller, "w", connect_timeout=5, extra_args=args) as lab,
        _browser_page() as page,
    ):
        # The sidebar closed: the notification comes wherever the person is.
        _open_lab(page, lab.lab)
        toast = page.locator(".Toastify__toast", has_text=f"Box {name} stops at")
        expect(toast).to_be_visible(timeout=60_000)
        expect(toast).to_contain_text("its time to live ends")
        page.screenshot(path=str(IMAGES / "jupyter-stop-warning.png"))
        before = client.get(name).expires_at
        assert before is not None
        toast.get_by_role("button", name="Extend 1 h").click()
        # Two hours ahead now, out of the warning time: the notification goes by itself.
        expect(toast).to_have_count(0, timeout=60_000)
        after = client.get(name)
        assert after.expires_at == before + timedelta(hours=1)
        assert after.stop_warning is None
        sidebar = _open_sidebar(page)
        row = sidebar.locator(f"[data-testid='devbox-row-{name}']")
        # No reason named: the stop is not within the warning time any more.
        expect(row).to_contain_text(re.compile(r"auto-stop in 1 h 5\d min(?! \()"))
    client.delete(name, purge=True)


def test_the_sidebar_of_several_clusters_shows_each_ones_free_count_boxes_and_silence(
    start_controller: StartController,
    pool: DevicePool,
    namespace: str,
    lab_b: Controller,
    tmp_path: Path,
) -> None:
    _need_browser()
    # lab-a's one device is held, lab-b's (on a testbed of its own) is free, and lab-c
    # is frozen: it accepts connections and never answers.
    lab_a = holding_cluster(start_controller, pool, namespace)
    lab_c = start_controller()
    with Client(lab_b.url, lab_b.token) as b:
        b.create("notes", ttl_hours=2)
        config = config_text({"lab-a": lab_a, "lab-c": lab_c, "lab-b": lab_b})
        args = ["--DevboxesJupyterApp.poll_interval=2", "--DevboxesJupyterApp.devbox_kernels=False"]
        os.kill(lab_c.pid, signal.SIGSTOP)
        try:
            with (
                running_lab(
                    tmp_path / "lab", lab_a.url, lab_a.token, args, sdk_config=config
                ) as lab,
                _browser_page() as page,
            ):
                _several_clusters_in_the_sidebar(page, lab, pool, b)
                # The controllers' tokens stay on the server.
                for controller in (lab_a, lab_b, lab_c):
                    assert controller.token not in page.content()
                    assert controller.token not in lab.log_text()
        finally:
            os.kill(lab_c.pid, signal.SIGCONT)
            b.delete("notes", purge=True)


def _several_clusters_in_the_sidebar(page: Any, lab: Lab, pool: DevicePool, b: Client) -> None:
    from playwright.sync_api import expect

    _open_lab(page, lab)
    sidebar = _open_sidebar(page)
    clusters = sidebar.get_by_test_id("devbox-cluster")
    expect(clusters.locator("option")).to_have_text(
        ["All clusters", "lab-a (default)", "lab-c", "lab-b"]
    )
    expect(clusters).to_have_value("*")
    # The frozen cluster is one line; the others' boxes are live, each with its cluster.
    silent = sidebar.get_by_test_id("devbox-cluster-error-lab-c")
    expect(silent).to_have_text(re.compile(r"^lab-c: did not answer in (3|0\.5) s"))
    status = sidebar.get_by_test_id("devbox-watch-status")
    expect(status).to_have_attribute("data-stale", "false")
    expect(status).to_contain_text("Updated")
    expect(sidebar.get_by_test_id(f"devbox-cluster-{HOLDER}@lab-a")).to_have_text("lab-a")
    expect(sidebar.get_by_test_id("devbox-cluster-notes@lab-b")).to_have_text("lab-b")
    expect(
        sidebar.get_by_test_id("devbox-row-notes@lab-b").get_by_role("button", name="Stop")
    ).to_be_enabled()

    # Each cluster's own free count of the profile, never summed.
    sidebar.get_by_test_id("devbox-new").click()
    choice = sidebar.get_by_test_id(f"devbox-accelerator-{PROFILE}-label")
    units = f"{pool.DISPLAY} · 1 × {pool.resource}"
    expect(choice).to_have_text(f"{units} — lab-a: 0 of 1 free · lab-b: 1 of 1 free (default)")
    sidebar.get_by_test_id(f"devbox-accelerator-{PROFILE}").check()
    page.screenshot(path=str(IMAGES / "jupyter-clusters.png"))

    # With every cluster shown, a create goes where the profile has a device free.
    name = f"ui-c-{secrets.token_hex(3)}"
    sidebar.get_by_test_id("devbox-name").fill(name)
    sidebar.get_by_test_id("devbox-create").click()
    created = sidebar.get_by_test_id("devbox-created")
    expect(created).to_have_text(f"Created {name} on lab-b: {PROFILE} has 1 free now")
    expect(sidebar.get_by_test_id(f"devbox-cluster-{name}@lab-b")).to_have_text("lab-b")
    placed = b.get(name)
    assert placed.gpu is not None
    assert placed.gpu.profile == PROFILE
    expect(choice).to_have_text(f"{units} — lab-a: 0 of 1 free · lab-b: 0 of 1 free (default)")

    _narrow_sidebar(page, sidebar)
    for part in (silent, choice, created, sidebar.get_by_test_id(f"devbox-row-{name}@lab-b")):
        _assert_fits(part)
    assert sidebar.evaluate("s => s.scrollWidth <= s.clientWidth"), "the sidebar scrolls sideways"
    sidebar.screenshot(path=str(IMAGES / "jupyter-clusters-280.png"))

    # One cluster chosen: its boxes and its catalog alone, read as with one controller.
    clusters.select_option("lab-b")
    expect(sidebar.get_by_test_id(f"devbox-row-{HOLDER}@lab-a")).to_have_count(0)
    expect(sidebar.get_by_test_id(f"devbox-row-{name}@lab-b")).to_be_visible()
    expect(choice).to_have_text(re.compile(rf"^{re.escape(pool.DISPLAY)} · 1 × \S+ — 0 of 1 free"))
    expect(silent).to_have_count(0)
    # The frozen one chosen: its list is out of date, said at the top as for one controller.
    clusters.select_option("lab-c")
    expect(status).to_have_attribute("data-stale", "true")
    expect(sidebar.get_by_test_id("devbox-stale-detail")).to_contain_text(
        "lab-c: did not answer in"
    )
    expect(sidebar.get_by_test_id("devbox-create")).to_be_disabled()
    sidebar.screenshot(path=str(IMAGES / "jupyter-clusters-silent-280.png"))
    clusters.select_option("*")
    expect(status).to_have_attribute("data-stale", "false")
    # The accelerator chosen stays chosen where a cluster shown offers it.
    expect(sidebar.get_by_test_id(f"devbox-accelerator-{PROFILE}")).to_be_checked()

    page.set_viewport_size({"width": 800, "height": 700})
    page.screenshot(path=str(IMAGES / "jupyter-clusters-800.png"))
    b.delete(name, purge=True)
