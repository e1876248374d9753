"""The launcher tile, the panel and the widgets in a real headless Chromium.

JupyterLab runs as a subprocess on a free loopback port with this checkout's server
extension and prebuilt labextension, talking to the real controller. Screenshots land
in ``test-artifacts/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from support import CHROMIUM, CHROMIUM_ARGS

from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import BoxNotReady, NotFound

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
LABEXTENSION = REPO / "jupyter_ext" / "devboxes_jupyter" / "labextension"
ARTIFACTS = REPO / "test-artifacts"
READY_TIMEOUT_MS = 180_000
LAB_START_TIMEOUT = 120


@dataclass
class Lab:
    url: str
    token: str
    log: Path

    def api(self, method: str, path: str, body: Any = None) -> Any:
        response = requests.request(
            method,
            f"{self.url}/{path.lstrip('/')}",
            json=body,
            headers={"Authorization": f"token {self.token}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.json() if response.content else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def lab(controller_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (make browser installs it)")
    if not (LABEXTENSION / "package.json").exists():
        pytest.skip("the labextension is not built (see jupyter_ext/README.md)")
    base = tmp_path_factory.mktemp("lab")
    data = base / "data"
    (data / "labextensions").mkdir(parents=True)
    # First on JUPYTER_PATH, so this checkout's build wins over any installed copy.
    (data / "labextensions" / "devboxes-jupyter").symlink_to(LABEXTENSION)
    root = base / "root"
    root.mkdir()
    # No "get notified about news?" toast over the screenshots.
    labconfig = base / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )
    token = secrets.token_hex(24)
    port = _free_port()
    env = {
        **os.environ,
        **controller_env,
        "JUPYTER_PATH": str(data),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_DATA_DIR": str(base / "user-data"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    log = (base / "lab.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--port-retries=0",
            # CI runs as root; the server is on loopback with a random token.
            "--ServerApp.allow_root=True",
            f"--ServerApp.root_dir={root}",
            f"--IdentityProvider.token={token}",
            "--ServerApp.jpserver_extensions=devboxes_jupyter=True",
            f"--LabApp.workspaces_dir={base / 'workspaces'}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    lab = Lab(url=f"http://127.0.0.1:{port}", token=token, log=base / "lab.log")
    try:
        deadline = time.monotonic() + LAB_START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"JupyterLab exited with {process.returncode}; see {base / 'lab.log'}")
            try:
                lab.api("GET", "api/status")
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer on {lab.url}; see {base / 'lab.log'}")
                time.sleep(0.5)
        yield lab
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1360, "height": 860})
        page = context.new_page()
        try:
            yield page
        finally:
            context.close()
            browser.close()


@pytest.fixture
def cleanup(controller_client: Client) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in reversed(names):
        with contextlib.suppress(NotFound):
            controller_client.delete(name, purge=True)


def _l4_profile(client: Client) -> models.GpuProfile:
    catalog = client.capabilities().gpu
    for profile in catalog:
        if "l4" in profile.name.lower() or "L4" in profile.display_name:
            return profile
    pytest.skip(f"the controller offers no L4 profile (profiles: {catalog.names})")


class _Blocked(Exception):
    pass


def _leave_one_device(client: Client, profile: str, cleanup: list[str]) -> None:
    """Fill the profile's devices with boxes until one cannot be placed, then free one.

    The test then owns the cluster's last free device of this profile, however many
    the node pools have: its first box is placed, its second is not.
    """

    def stop_when_blocked(box: Devbox) -> None:
        if box.state is models.DevboxState.STARTING and (box.message or "").startswith(
            "Scheduling blocked"
        ):
            raise _Blocked

    fillers: list[str] = []
    for _ in range(32):
        name = f"fill-{secrets.token_hex(3)}"
        client.create(name, gpu=profile, ttl_hours=1)
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
        pytest.fail(f"32 boxes of profile {profile} were all placed; cannot exhaust it")
    if fillers:
        client.delete(fillers[-1], purge=True)


def _open_lab(page: Any, lab: Lab, path: str = "lab", ready: str = ".jp-LauncherCard") -> None:
    # reset: start from an empty layout, not the one an earlier test left behind.
    page.goto(f"{lab.url}/{path}?reset&token={lab.token}")
    page.wait_for_selector(ready, timeout=60_000)


def test_launcher_tile_creates_gpu_boxes_and_shows_the_scheduler(
    page: Any,
    lab: Lab,
    controller_client: Client,
    controller_env: dict[str, str],
    cleanup: list[str],
) -> None:
    from playwright.sync_api import expect

    profile = _l4_profile(controller_client)
    _leave_one_device(controller_client, profile.name, cleanup)

    _open_lab(page, lab)
    tile = page.locator(".jp-LauncherCard", has_text="GPU Devbox")
    expect(tile).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "jupyter-launcher.png"))
    tile.click()

    accelerator = page.get_by_test_id("devbox-accelerator")
    expect(accelerator.locator("option").nth(1)).to_be_attached()
    expect(accelerator).to_have_value("")
    expect(accelerator.locator("option:checked")).to_have_text("CPU only")
    expect(accelerator.locator("option").first).to_have_text("CPU only")
    expect(accelerator).to_be_enabled()

    accelerator.select_option(profile.name)
    expect(page.get_by_test_id("devbox-accelerator-help")).not_to_be_empty()

    first, second = f"ui-a-{secrets.token_hex(3)}", f"ui-b-{secrets.token_hex(3)}"
    name_input = page.get_by_test_id("devbox-name")

    # A bad name is refused next to the form without reaching the controller.
    name_input.fill("Bad Name!")
    page.get_by_test_id("devbox-create").click()
    expect(page.get_by_test_id("devbox-error")).to_contain_text("invalid name")

    cleanup.extend([first, second])
    name_input.fill(first)
    page.get_by_test_id("devbox-create").click()
    expect(page.get_by_test_id(f"devbox-status-{first}")).to_contain_text(
        "ready", timeout=READY_TIMEOUT_MS
    )
    expect(page.get_by_test_id(f"devbox-ssh-{first}")).not_to_be_empty()
    expect(page.get_by_test_id("devbox-error")).to_be_empty()

    name_input.fill(second)
    page.get_by_test_id("devbox-create").click()
    status = page.get_by_test_id(f"devbox-status-{second}")
    # The scheduler may first name another reason (a volume still binding, say);
    # the lasting one is the missing device.
    expect(status).to_contain_text(
        f"Insufficient {profile.resource_name}", timeout=READY_TIMEOUT_MS
    )
    expect(status).to_contain_text("starting — Scheduling blocked")
    page.screenshot(path=str(ARTIFACTS / "jupyter-panel.png"))

    assert controller_client.get(first).gpu is not None
    blocked = controller_client.get(second)
    assert blocked.state is models.DevboxState.STARTING
    assert blocked.message is not None
    assert blocked.message in status.inner_text()

    # The controller token stays on the server: not in the page, not in the server log.
    controller_token = controller_env["DEVBOX_TOKEN"]
    assert controller_token not in page.content()
    assert controller_token not in lab.log.read_text(errors="replace")


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
    page.screenshot(path=str(ARTIFACTS / "jupyter-widgets.png"), full_page=True)
