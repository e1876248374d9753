"""The dashboard in a real headless Chromium against a controller on the testbed.

Login (with the operator token, and through the OIDC issuer), the accelerator selector,
live scheduling status pushed over the event stream in the CLI's words, stop, delete with
purge, the owner column and filter, who is signed in, and the layout of windows from 800 to
1920 px wide.
Screenshots land in ``test-artifacts/dashboard/``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from devboxes_testbed import L4
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from devboxes_testbed.process import free_port
from support import (
    Api,
    DevicePool,
    StartController,
    chromium_browser,
    wait_for,
    wait_until_no_pod_requests,
)

from devboxes_sdk import labels, models

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
READY_MS = 180_000
L4_SELECTOR = f"accelerator={L4}"
L4_RESOURCE = "nvidia.com/gpu"


def free_l4_gpus(kube: Any) -> int:
    """Whole L4 GPUs no pod holds, across the cluster: other tests share them."""
    from kubernetes import client

    core = client.CoreV1Api(kube)
    nodes = core.list_node(label_selector=L4_SELECTOR).items
    total = sum(int(node.status.allocatable.get(L4_RESOURCE, "0")) for node in nodes)
    names = {node.metadata.name for node in nodes}
    held = 0
    for pod in core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name not in names or pod.status.phase in ("Succeeded", "Failed"):
            continue
        for container in pod.spec.containers:
            requests_ = (container.resources and container.resources.requests) or {}
            held += int(requests_.get(L4_RESOURCE, "0"))
    return total - held


@pytest.fixture
def chromium() -> Iterator[Any]:
    with chromium_browser() as browser:
        yield browser


def open_page(chromium: Any, viewport: dict[str, int]) -> tuple[Any, Any]:
    """A browser context of its own, to close when done, and its page, whose waits allow
    for a loaded machine."""
    context = chromium.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(30_000)
    return context, page


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_dashboard_in_chromium(start_controller: StartController, kube: Any, chromium: Any) -> None:
    from playwright.sync_api import expect

    controller = start_controller()
    api = Api(controller)
    profiles = api.call("GET", "/capabilities")["gpu"]["profiles"]
    suffix = uuid.uuid4().hex[:6]
    occupier, first, second = f"hold-{suffix}", f"l4-first-{suffix}", f"l4-second-{suffix}"

    context, page = open_page(chromium, {"width": 1400, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    try:
        # Login: a wrong token first, then the right one.
        page.goto(f"{controller.url}/dashboard")
        expect(page).to_have_url(f"{controller.url}/dashboard/login?next=/dashboard")
        page.get_by_label("Operator token").fill("not-the-operator-token")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text("That token was not accepted.")
        shot(page, "01-login-refused")
        page.get_by_label("Operator token").fill(controller.token)
        page.get_by_label("Operator token").press("Enter")
        expect(page).to_have_url(f"{controller.url}/dashboard")
        expect(page.locator("#connection")).to_have_text("Live")
        # The session lives in an HttpOnly cookie: nothing for scripts to read or keep.
        assert page.evaluate("document.cookie") == ""
        assert page.evaluate("localStorage.length + sessionStorage.length") == 0
        assert controller.token not in page.content()

        # The presets are those the API describes, its default chosen.
        presets = page.locator("#box-preset option")
        expect(presets).to_have_text(list(models.PRESETS))
        default_preset = models.DevboxCreate.model_fields["preset"].default
        expect(page.locator("#box-preset")).to_have_value(default_preset)

        # The selector: CPU only first and chosen, then every profile with its description.
        radios = page.locator('input[name="accelerator"]')
        expect(radios).to_have_count(len(profiles) + 1)
        cpu = page.get_by_role("radio", name="CPU only")
        expect(cpu).to_be_checked()
        assert radios.first.get_attribute("value") == ""
        for profile in profiles:
            radio = page.locator(f'input[name="accelerator"][value="{profile["name"]}"]')
            expect(radio).not_to_be_checked()
            label = page.locator(f'label[for="{radio.get_attribute("id")}"]')
            expect(label).to_contain_text(profile["display_name"])
            expect(label).to_contain_text(profile["description"])
        shot(page, "dashboard-create-form")

        # A server-side validation error lands next to its field.
        page.get_by_label("Name", exact=True).fill("Not a valid name!")
        page.get_by_role("button", name="Create", exact=True).click()
        expect(page.locator("#box-name-error")).to_contain_text("invalid name")
        expect(page.get_by_label("Name", exact=True)).to_have_attribute("aria-invalid", "true")
        # So does a rule the controller checks itself: the operator's longest TTL.
        page.get_by_label("Name", exact=True).fill(f"ttl-{suffix}")
        page.get_by_label("Auto-stop after (hours)").fill("1000")
        page.get_by_role("button", name="Create", exact=True).click()
        expect(page.locator("#box-ttl-error")).to_have_text("must be at most 168")
        expect(page.locator("#box-name-error")).to_have_text("")
        expect(page.get_by_label("Auto-stop after (hours)")).to_have_attribute(
            "aria-invalid", "true"
        )
        page.get_by_label("Auto-stop after (hours)").fill("24")

        # Leave exactly one L4 free, so the second box of this test must wait for it.
        wait_until_no_pod_requests(kube, L4_RESOURCE)
        free = free_l4_gpus(kube)
        holders = [f"{occupier}-{i}" for i in range(free - 1)]
        for holder in holders:
            api.created(holder, gpu={"profile": L4})
            assert api.wait_ready(holder, timeout=180)["state"] == "ready"

        def create_l4(name: str) -> None:
            page.get_by_label("Name", exact=True).fill(name)
            page.locator(f'input[name="accelerator"][value="{L4}"]').check()
            page.get_by_role("button", name="Create", exact=True).click()
            expect(page.locator("#action-status")).to_have_text(f"Box {name} created.")

        create_l4(first)
        first_row = page.locator(f'tr[data-box="{first}"]')
        expect(first_row.locator(".col-accelerator")).to_have_text("NVIDIA L4 · 1 × nvidia.com/gpu")
        # A day's auto-stop, counted down in the words of the Jupyter sidebar and widgets.
        expect(first_row.locator(".col-autostop")).to_have_text(re.compile(r"^in 23 h \d+ min$"))
        expect(first_row.locator(".col-state")).to_have_text("ready", timeout=READY_MS)
        expect(first_row.locator(".col-ssh")).to_contain_text("ssh")
        # Each box names its owner: the operator's token made this one.
        expect(first_row.locator(".col-owner")).to_have_text("operator")

        create_l4(second)
        second_row = page.locator(f'tr[data-box="{second}"]')
        # Pushed by the event stream: the page is never reloaded in this test.
        expect(second_row.locator(".col-message")).to_contain_text(
            "Scheduling blocked:", timeout=READY_MS
        )
        expect(second_row.locator(".col-message")).to_contain_text("in line for a device")
        expect(second_row.locator(".col-state")).to_have_text("starting")
        shot(page, "dashboard-scheduling-blocked")

        first_row.get_by_role("button", name=f"Stop {first}").click()
        expect(first_row.locator(".col-state")).to_have_text("stopped")
        expect(first_row.get_by_role("button", name=f"Start {first}")).to_be_visible()
        expect(second_row.locator(".col-state")).to_have_text("ready", timeout=READY_MS)
        expect(second_row.locator(".col-message")).not_to_contain_text("Scheduling blocked")
        shot(page, "04-second-ready")

        # The dialog is reachable and dismissible from the keyboard.
        second_row.get_by_role("button", name=f"Delete {second}").focus()
        page.keyboard.press("Enter")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_be_visible()
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()
        expect(second_row).to_have_count(1)

        # Delete with purge: the button stays disabled until the name is typed.
        second_row.get_by_role("button", name=f"Delete {second}").click()
        expect(dialog).to_be_visible()
        expect(dialog.get_by_label("Type the box name to confirm the purge")).to_be_hidden()
        dialog.get_by_label("Also delete the home volume (purge)").check()
        confirm = dialog.get_by_role("button", name="Delete and purge")
        expect(confirm).to_be_disabled()
        dialog.get_by_label("Type the box name to confirm the purge").fill(second[:-1])
        expect(confirm).to_be_disabled()
        dialog.get_by_label("Type the box name to confirm the purge").fill(second)
        shot(page, "dashboard-purge")
        expect(confirm).to_be_enabled()
        confirm.click()
        expect(dialog).to_be_hidden()
        expect(second_row).to_have_count(0)
        expect(page.locator("#action-status")).to_contain_text("deleted with its home volume")
        shot(page, "06-after-purge")
        names = {box["name"] for box in api.call("GET", "/devboxes")["items"]}
        assert second not in names
        assert first in names

        # The operator is an admin and may narrow the list to one owner; the page opens its
        # stream again for that owner alone and keeps the owner's boxes live.
        owner_filter = page.get_by_label("Owner", exact=True)
        expect(owner_filter.locator("option")).to_have_text(["Everyone", "operator"])
        owner_filter.select_option("operator")
        expect(page.locator("#connection")).to_have_text("Live")
        expect(first_row.locator(".col-owner")).to_have_text("operator")
        first_row.get_by_role("button", name=f"Start {first}").click()
        expect(first_row.locator(".col-state")).not_to_have_text("stopped")
        shot(page, "dashboard-owner-filter")

        assert not [p for p in problems if "Content Security Policy" in p], problems
    finally:
        context.close()
        api.purge_all()


WIDTHS = (800, 1024, 1400, 1920)
# What does not fit a window of the given width, by the geometry of the page: the page
# scrolling sideways, an element reaching past either edge, and a button of a box or of
# the header cut by the edge or by a box that scrolls (a table may scroll in its own box,
# its buttons may not).
OUT_OF_VIEW = """
() => {
  const width = document.documentElement.clientWidth;
  const page = document.scrollingElement;
  const found = [];
  if (page.scrollWidth > page.clientWidth) found.push(`the page is ${page.scrollWidth} px wide`);
  const clips = (element) => getComputedStyle(element).overflowX !== 'visible';
  const name = (e) => e.getAttribute('aria-label') || e.id || e.tagName + ' ' + e.textContent;
  for (const element of document.querySelectorAll('body *')) {
    if (!element.checkVisibility()) continue;
    let clipped = false;
    for (let up = element.parentElement; up; up = up.parentElement) clipped ||= clips(up);
    const box = element.getBoundingClientRect();
    if (!clipped && (box.left < -0.5 || box.right > width + 0.5)) {
      found.push(`${name(element)} spans ${box.left}..${box.right}`);
    }
  }
  for (const button of document.querySelectorAll('#box-rows button, header button')) {
    if (!button.checkVisibility()) continue;
    const box = button.getBoundingClientRect();
    for (let up = button.parentElement; up; up = up.parentElement) {
      if (!clips(up)) continue;
      const left = up.getBoundingClientRect().left + up.clientLeft;
      if (box.left < left - 0.5 || box.right > left + up.clientWidth + 0.5) {
        found.push(`${name(button)} is cut by ${up.className || up.tagName}`);
      }
    }
    if (box.left < -0.5 || box.right > width + 0.5) {
      found.push(`${name(button)} spans ${box.left}..${box.right} of ${width}`);
    }
  }
  return found;
}
"""


def reads_as_the_cli(page: Any, api: Api, name: str) -> Callable[[], bool]:
    """Whether a box's row says why it is in its state in the CLI's words: the function
    the CLI and the Jupyter widgets use, on the box as the API answers now."""

    def agrees() -> bool:
        box = models.Devbox.model_validate(api.box(name))
        cell = page.locator(f'tr[data-box="{name}"] .col-message')
        # The whole cell, or the line shown above the folded rest of the message.
        shown = cell.evaluate("(cell) => (cell.querySelector('summary') || cell).textContent")
        return bool(shown == (labels.reason(box.summary, box.message) or ""))

    agrees.__doc__ = f"the row of {name} reads as the CLI's reason for it"
    return agrees


def test_every_width_shows_whole_rows_with_the_reason_the_cli_shows(
    start_controller: StartController, kube: Any, chromium: Any
) -> None:
    from playwright.sync_api import expect

    controller = start_controller()
    api = Api(controller)
    suffix = uuid.uuid4().hex[:6]
    # Long names, as people give them, so the name column is not the narrowest it can be.
    first, second = f"waiting-for-a-gpu-first-{suffix}", f"waiting-for-a-gpu-second-{suffix}"
    idle, running = f"stopped-cpu-box-{suffix}", f"running-cpu-box-{suffix}"
    # Every L4 taken, so both L4 boxes below wait, one after the other.
    wait_until_no_pod_requests(kube, L4_RESOURCE)
    holders = [f"hold-{suffix}-{i}" for i in range(free_l4_gpus(kube))]
    for holder in holders:
        api.created(holder, gpu={"profile": L4})
    for holder in holders:
        assert api.wait_ready(holder, timeout=180)["state"] == "ready"
    api.created(running)
    api.created(idle)
    api.call("POST", f"/devboxes/{idle}/stop")
    api.created(first, gpu={"profile": L4})
    api.created(second, gpu={"profile": L4})
    assert api.wait_ready(running, timeout=180)["state"] == "ready"

    def second_in_line() -> bool:
        """the second L4 box is second in line for the L4s"""
        return "2nd in line" in (api.box(second)["summary"] or "")

    wait_for(second_in_line, timeout=120)
    context, page = open_page(chromium, {"width": WIDTHS[0], "height": 900})
    try:
        sign_in(page, controller)
        header = page.locator("header")
        expect(header.locator("#signed-in")).to_have_text("Signed in as operator (admin)")
        expect(header.get_by_role("button", name="Sign out")).to_be_visible()
        capacity = api.free(L4)[1]
        for name, place in ((first, "1st"), (second, "2nd")):
            expect(page.locator(f'tr[data-box="{name}"] .col-message summary')).to_have_text(
                re.compile(rf"^Waiting for a free NVIDIA L4: 0 of {capacity} free, {place} in line")
            )
        expect(page.locator(f'tr[data-box="{idle}"] .col-message')).to_have_text(
            re.compile(r"^Stopped; storage is kept")
        )
        # The same words as the CLI's REASON column and the Lab's sidebar, whatever the
        # state: the function they use, on each box as the API answers now.
        for name in (first, second, idle, running, *holders):
            wait_for(reads_as_the_cli(page, api, name), timeout=30)

        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            shot(page, f"dashboard-{width}px-wide")
            out_of_view = page.evaluate(OUT_OF_VIEW)
            assert out_of_view == [], f"at {width} px: {out_of_view}"
            expect(page.locator("#signed-in")).to_be_visible()
    finally:
        context.close()
        api.purge_all()


def test_selector_is_replaced_by_a_notice_when_gpu_is_disabled(
    start_controller: StartController, namespace: str, chromium: Any
) -> None:
    from playwright.sync_api import expect

    settings = example_settings(namespace)
    settings["gpu"] = {"enabled": False}
    # The example image profiles name GPU profiles, which a controller without GPUs
    # refuses; without image profiles the environment choice is not shown either.
    settings["images"] = {"enabled": False}
    controller = start_controller(settings)
    page = chromium.new_page()
    try:
        page.goto(f"{controller.url}/dashboard/login")
        page.get_by_label("Operator token").fill(controller.token)
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#connection")).to_have_text("Live")
        expect(page.get_by_text("GPU acceleration is disabled by the operator")).to_be_visible()
        expect(page.get_by_role("group", name="Accelerator")).to_be_hidden()
        expect(page.locator('input[name="accelerator"]')).to_have_count(0)
        expect(page.get_by_label("Environment")).to_be_hidden()
        shot(page, "dashboard-gpu-disabled")
    finally:
        page.close()


# Whether the widest option of a select fits inside it, as its closed box shows it.
WIDEST_OPTION_FITS = """
(select) => {
  const context = document.createElement('canvas').getContext('2d');
  context.font = getComputedStyle(select).font;
  const widest = Math.max(...[...select.options].map(o => context.measureText(o.text).width));
  return widest <= select.clientWidth;
}
"""


def test_the_environment_is_chosen_beside_the_accelerator_and_shown_on_each_box(
    start_controller: StartController, chromium: Any
) -> None:
    from playwright.sync_api import expect

    controller = start_controller()
    api = Api(controller)
    images = api.call("GET", "/capabilities")["images"]
    assert images["enabled"], "the example settings publish image profiles"
    suffix = uuid.uuid4().hex[:6]
    refused, created = f"env-cuda-{suffix}", f"env-web-{suffix}"
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(30_000)
    try:
        sign_in(page, controller)
        environment = page.get_by_label("Environment")
        expect(environment).to_be_visible()
        # The operator's workspace image first and chosen; each profile says where it runs.
        expect(environment.locator("option")).to_have_text(
            [
                "Default workspace",
                *(
                    f"{p['display_name']} "
                    f"({'beside' if p['mode'] == 'sidecar' else 'as'} the workspace)"
                    for p in images["profiles"]
                ),
            ]
        )
        expect(environment).to_have_value("")
        # The select is as wide as its longest choice: no environment's name is cut.
        assert environment.evaluate(WIDEST_OPTION_FITS), "an environment's name is cut"

        # The CUDA image runs on NVIDIA profiles only; CPU only is the form's default.
        page.get_by_label("Name", exact=True).fill(refused)
        environment.select_option("cuda")
        expect(page.locator("#box-environment-help")).to_have_text(
            next(p["description"] for p in images["profiles"] if p["name"] == "cuda")
        )
        page.get_by_role("button", name="Create", exact=True).click()
        refusal = page.locator("#box-environment-error")
        expect(refusal).to_contain_text("image profile 'cuda' does not support")
        expect(environment).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#create-error")).to_have_text("")
        shot(page, "dashboard-environment-refused")

        # Choosing again clears the refusal; the box is created with the sidecar.
        environment.select_option("web-preview")
        expect(refusal).to_have_text("")
        page.get_by_label("Name", exact=True).fill(created)
        page.get_by_role("button", name="Create", exact=True).click()
        row = page.locator(f'#box-rows tr[data-box="{created}"]')
        expect(row.locator(".col-environment")).to_have_text("Web preview")
        expect(page.locator("#boxes thead")).to_contain_text("Environment")
        shot(page, "dashboard-environment")
        assert api.call("GET", f"/devboxes/{created}")["image"]["profile"] == "web-preview"
        assert api.request("GET", f"/devboxes/{refused}").status_code == 404

        # In a narrow window each row is a card whose environment is labelled.
        page.set_viewport_size({"width": 800, "height": 900})
        expect(row.locator(".col-environment")).to_be_visible()
        assert not scrolls_sideways(page)
        row.screenshot(path=str(ARTIFACTS / "dashboard-800px-environment.png"))
    finally:
        page.close()
        api.purge(refused, created)


def sign_in(page: Any, controller: Controller) -> None:
    from playwright.sync_api import expect

    # The bare controller address is where operators start.
    page.goto(f"{controller.url}/")
    expect(page).to_have_url(f"{controller.url}/dashboard/login?next=/dashboard")
    page.get_by_label("Operator token").fill(controller.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{controller.url}/dashboard")
    expect(page.locator("#connection")).to_have_text("Live")


def sign_in_from_the_login_page(page: Any, controller: Controller) -> None:
    """Sign in with the operator token, the form sent with Enter."""
    from playwright.sync_api import expect

    page.goto(f"{controller.url}/dashboard/login?next=/dashboard")
    page.get_by_label("Operator token").fill(controller.token)
    page.get_by_label("Operator token").press("Enter")
    expect(page.locator("#connection")).to_have_text("Live")


def scrolls_sideways(page: Any) -> bool:
    overflow: bool = page.evaluate(
        "() => { const e = document.scrollingElement; return e.scrollWidth > e.clientWidth; }"
    )
    return overflow


NARROW = {"width": 800, "height": 1000}
# A profile whose node pool the testbed does not have: its box waits with the scheduler's
# full explanation without holding a GPU another test needs.
H100 = {
    "name": "nvidia-h100",
    "displayName": "NVIDIA H100",
    "description": "One NVIDIA H100 (80 GB); the pool scales up on demand",
    "resourceName": "nvidia.com/gpu",
    "count": 1,
    "workspaceImage": "devboxes/workspace-cuda:12.8",
    "runtimeClassName": "nvidia",
    "nodeSelector": {"accelerator": "nvidia-h100"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


def test_dashboard_fits_an_800px_window(
    start_controller: StartController, namespace: str, chromium: Any
) -> None:
    from playwright.sync_api import expect

    settings = example_settings(namespace)
    settings["gpu"]["profiles"].append(H100)
    controller = start_controller(settings)
    api = Api(controller)
    default = api.call("GET", "/capabilities")["gpu"]["default_profile"]
    suffix = uuid.uuid4().hex[:6]
    ready, idle, waiting = f"cpu-{suffix}", f"idle-{suffix}", f"h100-{suffix}"
    api.created(ready)
    api.created(idle)
    api.call("POST", f"/devboxes/{idle}/stop")
    assert api.wait_ready(ready, timeout=180)["state"] == "ready"

    context, page = open_page(chromium, NARROW)
    try:
        sign_in(page, controller)
        expect(page.locator(f'tr[data-box="{ready}"] .col-state')).to_have_text("ready")
        expect(page.locator(f'tr[data-box="{idle}"] .col-state')).to_have_text("stopped")

        # The default profile is marked, and only that one.
        for radio in page.locator('input[name="accelerator"]').all():
            label = page.locator(f'label[for="{radio.get_attribute("id")}"] .option-title')
            if radio.get_attribute("value") == default:
                expect(label).to_have_text(re.compile(r"\(default\)$"))
            else:
                expect(label).not_to_contain_text("(default)")

        # A name error wraps under the name: no field moves sideways or changes width.
        fields = ["#box-name", "#box-preset", "#box-ttl"]
        before = [page.locator(f).bounding_box() for f in fields]
        page.get_by_label("Name", exact=True).fill("Not a valid name, and a long one!")
        page.get_by_role("button", name="Create", exact=True).click()
        expect(page.locator("#box-name-error")).to_contain_text("invalid name")
        after = [page.locator(f).bounding_box() for f in fields]
        assert [(b["x"], b["y"], b["width"]) for b in before] == [
            (a["x"], a["y"], a["width"]) for a in after
        ]
        assert not scrolls_sideways(page)
        shot(page, "08-800px-name-error")

        # The create's answer is held back until the stream has shown the box waiting for
        # the scheduler: an answer older than what the stream showed must not undo it.
        held: list[tuple[Any, Any]] = []

        def hold_the_create(route: Any) -> None:
            if route.request.method == "POST":
                held.append((route, route.fetch()))
            else:
                route.continue_()

        page.route("**/api/v1/devboxes", hold_the_create)
        page.get_by_label("Name", exact=True).fill(waiting)
        page.locator('input[name="accelerator"][value="nvidia-h100"]').check()
        page.get_by_role("button", name="Create", exact=True).click()
        row = page.locator(f'tr[data-box="{waiting}"]')
        expect(row.locator(".col-message")).to_contain_text("Scheduling blocked:", timeout=READY_MS)
        # The stream may show the box before the held answer has been read in full.
        for _ in range(300):
            if held:
                break
            page.wait_for_timeout(100)
        ((route, answer),) = held
        route.fulfill(response=answer)
        page.unroute("**/api/v1/devboxes")

        # A GPU create succeeds, and the selector returns to CPU only for the next box.
        expect(page.locator("#action-status")).to_have_text(f"Box {waiting} created.")
        # Read once, now that the page has taken the answer: a later stream event must not
        # be what puts the scheduler's words back.
        assert "Scheduling blocked:" in (row.locator(".col-message").text_content() or "")
        expect(page.get_by_role("radio", name="CPU only")).to_be_checked()
        expect(page.locator('input[name="accelerator"][value="nvidia-h100"]')).not_to_be_checked()

        # The scheduler's long explanation is folded under the box's reason until it is
        # expanded.
        affinity = "didn't match Pod's node affinity/selector"

        def placement_reason() -> str:
            """the scheduler's reason is the node selector (before the home volume is
            bound, its reason is the claim)"""
            text: str = api.call("GET", f"/devboxes/{waiting}")["message"]
            return text if affinity in text else ""

        message = wait_for(placement_reason, timeout=60)
        more = row.locator(".col-message .message-more")
        expect(more).to_have_text(message)
        expect(more).to_be_hidden()
        wait_for(reads_as_the_cli(page, api, waiting), timeout=30)
        # Written as text: the cell holds the disclosure and nothing parsed from the message.
        assert (
            row.locator(".col-message").evaluate(
                "(cell) => [...cell.querySelectorAll('*')].map((e) => e.tagName).join()"
            )
            == "DETAILS,SUMMARY,P"
        )
        assert not scrolls_sideways(page)
        for tr in page.locator("#box-rows tr").all():
            buttons = tr.locator(".col-actions button:visible")
            # Start and Delete when stopped; Stop, Extend and Delete otherwise.
            expect(buttons).to_have_count(2 if tr.get_attribute("data-state") == "stopped" else 3)
            for button in buttons.all():
                box = button.bounding_box()
                assert box is not None
                assert box["x"] >= 0, box
                assert box["x"] + box["width"] <= NARROW["width"], box
        shot(page, "dashboard-800px")

        row.locator(".col-message summary").click()
        expect(row.locator(".col-message details")).to_have_attribute("open", "")
        expect(more).to_be_visible()
        assert not scrolls_sideways(page)
        page.locator("#boxes").screenshot(path=str(ARTIFACTS / "dashboard-800px-message.png"))
    finally:
        context.close()
        api.purge_all()


def test_selector_shows_free_devices_and_updates_live_when_a_box_stops(
    start_controller: StartController, chromium: Any
) -> None:
    from playwright.sync_api import expect

    controller = start_controller()
    api = Api(controller)

    def l4() -> dict[str, Any]:
        body = api.call("GET", "/gpu/availability")
        entry: dict[str, Any] = next(p for p in body["profiles"] if p["name"] == L4)
        return entry

    def all_free() -> bool:
        """availability is known and earlier tests' L4 boxes are gone (their pods may
        still be terminating)"""
        entry = l4()
        return entry["available"] is not None and entry["available"] == entry["capacity"]

    # The count is compared exactly, so no other box may take or free an L4 meanwhile.
    wait_for(all_free, timeout=120)
    free, total = l4()["available"], l4()["capacity"]
    name = f"l4-free-{uuid.uuid4().hex[:6]}"
    page = chromium.new_page()
    page.set_default_timeout(30_000)
    try:
        api.created(name, gpu={"profile": L4})
        assert api.wait_ready(name, timeout=180)["state"] == "ready"
        sign_in(page, controller)
        option = page.locator(f"#accelerator-{L4}-free")
        # An en dash in the page: "NVIDIA L4 — 1 of 2 free".
        expect(option).to_have_text(re.compile(rf"^ \u2014 {free - 1} of {total} free"))
        full = page.locator(".option-full")
        expect(full).to_have_count(1 if free == 1 else 0)
        shot(page, "08-free-count")
        page.get_by_role("button", name=f"Stop {name}").click()
        # Pushed over the event stream: the page is not reloaded.
        expect(option).to_have_text(
            re.compile(rf"^ \u2014 {free} of {total} free"), timeout=READY_MS
        )
        expect(page.locator(f'.option-full input[value="{L4}"]')).to_have_count(0)
        shot(page, "09-free-count-after-stop")
    finally:
        page.close()
        api.purge_all()


def test_extend_and_purge_a_retained_volume_in_chromium(
    start_controller: StartController, chromium: Any
) -> None:
    from playwright.sync_api import expect

    controller = start_controller()
    api = Api(controller)
    suffix = uuid.uuid4().hex[:6]
    running, kept = f"run-{suffix}", f"kept-{suffix}"
    api.created(running)
    api.created(kept)
    api.delete(kept).raise_for_status()
    before = api.call("GET", f"/devboxes/{running}")["expires_at"]

    context, page = open_page(chromium, {"width": 1400, "height": 900})
    try:
        sign_in_from_the_login_page(page, controller)

        row = page.locator(f'tr[data-box="{running}"]')
        row.get_by_role("button", name=f"Extend {running}").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("Hours to add").fill("2")
        dialog.get_by_role("button", name="Extend").click()
        expect(dialog).to_be_hidden()
        expect(page.locator("#action-status")).to_contain_text(f"Box {running} now stops at")
        assert api.call("GET", f"/devboxes/{running}")["expires_at"] > before

        volume = page.locator(f'tr[data-volume="{kept}"]')
        expect(volume).to_contain_text("20Gi")
        expect(volume.locator("td").first).to_have_text("operator")
        volume.get_by_role("button", name=f"Purge {kept}").click()
        confirm = dialog.get_by_role("button", name="Purge")
        expect(confirm).to_be_disabled()
        dialog.get_by_label("Type the name to confirm").fill(kept)
        shot(page, "07-purge-volume")
        confirm.click()
        expect(volume).to_have_count(0)
        expect(page.locator("#action-status")).to_contain_text(f"devbox-{kept}-home")
        assert kept not in {v["name"] for v in api.call("GET", "/volumes")["items"]}
    finally:
        context.close()
        api.purge_all()


def test_a_stale_list_is_marked_on_top_with_actions_off_until_the_controller_is_back(
    start_controller: StartController, chromium: Any
) -> None:
    from playwright.sync_api import expect

    # On a port it gets back after a restart, as behind a Service.
    controller = start_controller(port=free_port())
    api = Api(controller)
    name = f"stale-{uuid.uuid4().hex[:6]}"
    api.created(name)

    context, page = open_page(chromium, {"width": 1400, "height": 900})
    try:
        sign_in_from_the_login_page(page, controller)
        row = page.locator(f'tr[data-box="{name}"]')
        actions = [
            row.get_by_role("button", name=f"Stop {name}"),
            row.get_by_role("button", name=f"Extend {name}"),
            row.get_by_role("button", name=f"Delete {name}"),
            page.get_by_role("button", name="Create", exact=True),
        ]
        for action in actions:
            expect(action).to_be_enabled()
        stale = page.locator("#stale")
        expect(stale).to_be_hidden()

        controller.stop()
        expect(stale).to_be_visible()
        expect(stale).to_have_text(
            re.compile(
                r"Controller unreachable\. The list below is (less than a minute|\d+ min) old; "
                r"actions are off until it answers again\."
            )
        )
        # Under the header, above the form and the boxes.
        assert stale.bounding_box()["y"] < page.locator("#create-heading").bounding_box()["y"]
        for action in actions:
            expect(action).to_be_disabled()
        shot(page, "dashboard-stale")

        page.evaluate("window.devboxesNoReload = true")
        controller.start()
        expect(stale).to_be_hidden(timeout=120_000)
        expect(page.locator("#connection")).to_have_text("Live")
        for action in actions:
            expect(action).to_be_enabled()
        assert page.evaluate("window.devboxesNoReload === true")
        # The actions work again: a stop goes through.
        actions[0].click()
        expect(row.locator(".col-state")).to_have_text("stopped")
    finally:
        context.close()
        if controller.process is None:
            controller.start()
        api.purge_all()


def test_a_person_signs_in_through_the_issuer_and_sees_only_their_boxes(
    start_controller: StartController, issuer: Issuer, namespace: str, chromium: Any
) -> None:
    from playwright.sync_api import expect

    settings = example_settings(namespace)
    settings["auth"] = {
        "adminGroups": ["gpu-admins"],
        "oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID, "cliClientId": CLI_CLIENT_ID},
    }
    controller = start_controller(settings)
    suffix = uuid.uuid4().hex[:6]
    boxes = {person: f"{person}-{suffix}" for person in ("alice", "bob")}
    try:
        for person, name in boxes.items():
            created = httpx.post(
                f"{controller.url}/api/v1/devboxes",
                json={"name": name},
                headers={"Authorization": f"Bearer {issuer.token_for(person)}"},
                timeout=30,
            )
            assert created.status_code == 201, created.text
        page = chromium.new_context().new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{controller.url}/dashboard")
        issuer_host = issuer.url.removeprefix("http://")
        page.get_by_role("link", name=f"Sign in with {issuer_host}").click()
        # The issuer's own login form.
        page.locator('input[name="username"]').fill("alice")
        page.locator('input[name="password"]').fill(issuer.passwords["alice"])
        page.locator('input[name="password"]').press("Enter")
        expect(page).to_have_url(f"{controller.url}/dashboard")
        expect(page.locator("#connection")).to_have_text("Live")
        expect(page.get_by_text(boxes["alice"], exact=True)).to_be_visible()
        expect(page.get_by_text(boxes["bob"], exact=True)).to_have_count(0)
        # Not an admin: no filter by owner, and no admin mark by the name.
        expect(page.locator("#owner-field")).to_be_hidden()
        expect(page.locator("#signed-in")).to_have_text("Signed in as alice")
        assert page.evaluate("document.cookie") == ""
        shot(page, "signed-in-through-the-issuer")
    finally:
        operator = {"Authorization": f"Bearer {controller.token}"}
        for name in boxes.values():
            httpx.delete(
                f"{controller.url}/api/v1/devboxes/{name}",
                params={"purge": "true"},
                headers=operator,
                timeout=60,
            )


def test_gpu_time_shows_each_device_s_next_hours_and_books_a_device_in_chromium(
    start_controller: StartController,
    issuer: Issuer,
    kube: Any,
    namespace: str,
    chromium: Any,
) -> None:
    from playwright.sync_api import expect

    pool = DevicePool(kube, devices=2)
    try:
        settings = pool.settings(namespace)
        settings["auth"] = {
            "oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID, "cliClientId": CLI_CLIENT_ID}
        }
        controller = start_controller(settings)
        bob = {"Authorization": f"Bearer {issuer.token_for('bob')}"}
        created = httpx.post(
            f"{controller.url}/api/v1/devboxes",
            json={"name": "bobs", "gpu": {"profile": DevicePool.PROFILE}, "ttl_hours": 3},
            headers=bob,
            timeout=30,
        )
        assert created.status_code == 201, created.text
        page = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{controller.url}/dashboard")
        page.get_by_role("link", name=f"Sign in with {issuer.url.removeprefix('http://')}").click()
        page.locator('input[name="username"]').fill("alice")
        page.locator('input[name="password"]').fill(issuer.passwords["alice"])
        page.locator('input[name="password"]').press("Enter")
        expect(page.locator("#connection")).to_have_text("Live")

        # The picker says when a device comes free: one is free now.
        expect(page.locator(f"#accelerator-{DevicePool.PROFILE}-next")).to_have_text(
            " · next free: now"
        )
        # bob's running box shows on one device, unnamed, until its time to live ends.
        figure = page.locator(f'figure[data-profile="{DevicePool.PROFILE}"]')
        expect(figure.get_by_role("list")).to_have_count(2)
        expect(figure.locator(".segment.box")).to_have_text(["a box"], timeout=READY_MS)

        # A booking two hours from now for three hours, then one that no longer fits.
        start = page.evaluate(
            "new Date(Math.ceil(Date.now() / 3600000) * 3600000 + 7200000)"
            ".toISOString().slice(0, 13)"
        )
        local = page.evaluate(
            f"(() => {{ const d = new Date('{start}:00:00Z'); const p = (n) => "
            "String(n).padStart(2, '0'); return `${d.getFullYear()}-${p(d.getMonth() + 1)}-"
            "${p(d.getDate())}T${p(d.getHours())}:00`; })()"
        )
        page.locator("#book-start").fill(local)
        page.locator("#book-hours").fill("3")
        page.get_by_role("button", name="Book", exact=True).click()
        expect(page.locator("#booking-rows tr")).to_have_count(1)
        expect(page.locator("#booking-rows tr td").nth(4)).to_have_text("booked")
        expect(figure.locator(".segment.booking.mine")).to_have_text(["your booking"])
        # bob's box and alice's booking take both devices from then: a second is refused.
        page.get_by_role("button", name="Book", exact=True).click()
        expect(page.locator("#book-error")).to_contain_text("no device left to promise")
        expect(page.locator("#book-error")).to_contain_text("the earliest window of 3 h that fits")
        expect(page.locator("#booking-rows tr")).to_have_count(1)
        shot(page, "gpu-time")

        # Cancelled, a booking keeps nothing: the same window fits again.
        page.locator("#booking-rows tr").first.get_by_role(
            "button", name=re.compile("^Cancel ")
        ).click()
        expect(page.locator("#no-bookings")).to_be_visible()
        expect(figure.locator(".segment.booking")).to_have_count(0)
        page.get_by_role("button", name="Book", exact=True).click()
        expect(page.locator("#booking-rows tr")).to_have_count(1)
    finally:
        pool.delete()


def test_the_dashboard_names_its_cluster_and_links_to_the_others_it_is_told_about(
    start_controller: StartController, namespace: str, chromium: Any
) -> None:
    from playwright.sync_api import expect

    other = start_controller({**example_settings(namespace), "cluster": {"name": "lab-b"}})
    settings = example_settings(namespace)
    settings["cluster"] = {"name": "lab-a", "peers": [{"name": "lab-b", "url": other.url}]}
    controller = start_controller(settings)
    context, page = open_page(chromium, {"width": 800, "height": 900})
    try:
        sign_in(page, controller)
        nav = page.get_by_role("navigation", name="Clusters")
        expect(nav).to_have_text("Cluster lab-a · other clusters: lab-b")
        link = page.get_by_test_id("cluster-peer-lab-b")
        expect(link).to_have_attribute("href", f"{other.url}/dashboard")
        shot(page, "dashboard-clusters-800")
        link.click()
        # The other cluster's own dashboard: its own sign-in, its own cluster's name.
        expect(page).to_have_url(f"{other.url}/dashboard/login?next=/dashboard")
        sign_in_from_the_login_page(page, other)
        expect(page.get_by_role("navigation", name="Clusters")).to_have_text("Cluster lab-b")
    finally:
        context.close()
