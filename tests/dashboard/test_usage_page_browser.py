"""The dashboard's usage page in a real headless Chromium against a controller on the
testbed, reading a usage record seeded with known seconds: the hours of each profile, one
bar per day of the span, the idle holders in order, an admin's choice of everyone's or
their own, a person who sees only their own, the empty state and the API's refusal.
Screenshots land in ``test-artifacts/dashboard/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from devboxes_controller.state.ended_sessions import EndedSessions
from devboxes_controller.web.identity.sessions import COOKIE, Person, SessionStore
from devboxes_testbed.controller import Controller, example_settings
from support import MemoryRecord, StartController, chromium_browser, wait_for
from usage_rows import row, seed

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
TODAY = datetime.now(UTC).date()
H = 3600
L4, A100 = "nvidia-l4", "nvidia-a100"
# Three people, two profiles, four boxes, over the last week; one row before it.
ROWS = [
    row("ann-train", "ann", L4, TODAY, busy=3 * H, idle=1 * H),
    row("ann-train", "ann", L4, TODAY - timedelta(days=2), busy=2 * H, idle=H // 2),
    row(
        "bob-notebook",
        "bob",
        L4,
        TODAY - timedelta(days=1),
        busy=H // 2,
        idle=6 * H,
        waiting=20 * 60,
    ),
    row(
        "cara-sweep",
        "cara",
        A100,
        TODAY - timedelta(days=3),
        count=2,
        busy=8 * H,
        idle=2 * H,
        unknown=1 * H,
    ),
    row("cara-sweep", "cara", A100, TODAY, busy=4 * H, idle=3 * H),
    row("ann-eval", "ann", A100, TODAY - timedelta(days=1), idle=4 * H),
    row("ann-train", "ann", L4, TODAY - timedelta(days=10), busy=5 * H),
]
WEEK_SECONDS = 35 * H + 20 * 60
# A profile whose node pool the testbed does not have: a box of it holds no GPU another
# test needs.
A100_PROFILE = {
    "name": A100,
    "displayName": "NVIDIA A100",
    "description": "One NVIDIA A100 (40 GB)",
    "resourceName": "nvidia.com/gpu",
    "count": 1,
    "workspaceImage": "devboxes/workspace-cuda:12.8",
    "runtimeClassName": "nvidia",
    "nodeSelector": {"accelerator": "nvidia-a100"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


@pytest.fixture
def chromium() -> Iterator[Any]:
    with chromium_browser() as browser:
        yield browser


def session_of(controller: Controller, person: Person) -> tuple[str, str]:
    """The cookie and CSRF value of a session of ``person``, as the issuer's sign-in makes
    them."""
    session = SessionStore(controller.token, EndedSessions(MemoryRecord())).create(person)
    return session.cookie, session.csrf


@pytest.fixture
def served(start_controller: StartController, kube: Any, namespace: str) -> Controller:
    settings = example_settings(namespace)
    settings["gpu"]["profiles"].append(A100_PROFILE)
    controller = start_controller(settings)
    seed(kube, namespace, ROWS)
    # One of the boxes still exists (stopped), so its owner and profile are known.
    cookie, csrf = session_of(controller, Person("cara"))
    cara = requests.Session()
    cara.cookies.set(COOKIE, cookie)
    cara.headers["X-Devboxes-CSRF"] = csrf
    made = cara.post(
        f"{controller.url}/api/v1/devboxes",
        json={"name": "cara-sweep", "gpu": {"profile": A100}},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    stopped = cara.post(f"{controller.url}/api/v1/devboxes/cara-sweep/stop", timeout=30)
    assert stopped.status_code == 200, stopped.text

    def loaded() -> bool:
        answer = requests.get(
            f"{controller.url}/api/v1/usage",
            params={"all": "true"},
            headers=controller.headers(),
            timeout=30,
        )
        total = answer.json()["total"]
        return bool(total["allocated_seconds"] + total["waiting_seconds"] == WEEK_SECONDS)

    wait_for(loaded, 30)
    return controller


def open_page(chromium: Any, width: int = 1400) -> tuple[Any, Any]:
    context = chromium.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    return context, page


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def cells(page: Any, selector: str) -> list[list[str]]:
    rows: list[list[str]] = page.locator(selector).evaluate_all(
        "rows => rows.map(r => [...r.children].map(c => c.textContent.trim()))"
    )
    return rows


def test_an_admin_reads_everyones_usage_per_profile_and_day(
    served: Controller, chromium: Any
) -> None:
    from playwright.sync_api import expect

    context, page = open_page(chromium)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    refused: list[str] = []
    page.on("response", lambda r: refused.append(r.url) if r.status >= 400 else None)
    try:
        # Signed out, the page sends the browser to the sign-in form and back.
        page.goto(f"{served.url}/dashboard/usage")
        expect(page).to_have_url(f"{served.url}/dashboard/login?next=/dashboard/usage")
        page.get_by_label("Operator token").fill(served.token)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(f"{served.url}/dashboard/usage")
        assert served.token not in page.content()

        coverage = page.locator("#usage-coverage")
        since = TODAY - timedelta(days=6)
        expect(coverage).to_have_text(
            f"Everyone's GPU usage over the whole UTC days {since} to {TODAY} (7 days); "
            "recorded until 23:59 UTC."
        )
        # Everyone's, the admin's default, or their own.
        expect(page.get_by_label("Whose")).to_have_value("all")

        # The per-profile table: hours of each, the busy share of the known hours.
        expect(page.locator("#usage-profile-rows tr")).to_have_count(2)
        assert cells(page, "#usage-profile-rows tr") == [
            [A100, "22.0", "12.0", "9.0", "1.0", "57%", "0"],
            [L4, "13.0", "5.5", "7.5", "0", "42%", "0.3"],
        ]
        assert cells(page, "#usage-profile-total tr") == [
            ["All profiles", "35.0", "17.5", "16.5", "1.0", "51%", "0.3"]
        ]

        # One chart per profile, one bar per day of the span, each read out in its title.
        charts = page.locator("figure.usage-chart")
        expect(charts).to_have_count(2)
        for chart in (charts.nth(0), charts.nth(1)):
            expect(chart.locator("rect.bar-allocated")).to_have_count(7)
            expect(chart.locator("rect.bar-busy")).to_have_count(7)
        a100 = page.locator(f'figure[data-profile="{A100}"]')
        expect(a100.locator("figcaption")).to_have_text(
            f"{A100} · 22.0 h allocated, 12.0 h busy (57%)"
        )
        days = [str(since + timedelta(days=n)) for n in range(7)]
        assert a100.locator("g.day").evaluate_all("gs => gs.map(g => g.dataset.day)") == days
        tallest = TODAY - timedelta(days=3)
        expect(a100.locator(f'g.day[data-day="{tallest}"] title')).to_have_text(
            f"{tallest}: 11.0 h allocated, 8.0 h busy (80% busy)"
        )
        heights = a100.locator("rect.bar-allocated").evaluate_all(
            "rs => rs.map(r => Number(r.getAttribute('height')))"
        )
        # 11 h is the most of a day, 7 h today, 4 h the day before, nothing on the others.
        assert heights.index(max(heights)) == 3
        assert heights[6] == pytest.approx(heights[3] * 7 / 11)
        assert heights[5] == pytest.approx(heights[3] * 4 / 11)
        assert [h for n, h in enumerate(heights) if n not in (3, 5, 6)] == [0, 0, 0, 0]
        shot(page, "dashboard-usage")
        # The numbers as text too, a row per day.
        a100.get_by_text("Per day").click()
        assert cells(page, f'figure[data-profile="{A100}"] tbody tr')[3] == [
            str(tallest),
            "11.0",
            "8.0",
            "2.0",
            "1.0",
            "80%",
            "0",
        ]

        # The idle holders, most idle first: the boxes, then the people.
        rows = page.locator("#usage-idle-rows tr")
        expect(rows).to_have_count(4)
        assert cells(page, "#usage-idle-rows tr") == [
            ["bob-notebook", "bob", L4, "6.0", "8%"],
            ["cara-sweep", "cara", A100, "5.0", "71%"],
            ["ann-eval", "ann", A100, "4.0", "0%"],
            ["ann-train", "ann", L4, "1.5", "77%"],
        ]
        page.get_by_label("Holders", exact=True).select_option("person")
        expect(rows.first).to_have_attribute("data-key", "bob")
        assert cells(page, "#usage-idle-rows tr") == [
            ["bob", "1", "6.0", "8%"],
            ["ann", "2", "5.5", "48%"],
            ["cara", "1", "5.0", "71%"],
        ]

        # Thirty days: thirty bars each, and the older row counted.
        page.get_by_label("Span").select_option("30d")
        expect(a100.locator("rect.bar-allocated")).to_have_count(30)
        expect(page.locator(f'#usage-profile-rows tr[data-profile="{L4}"] td').first).to_have_text(
            "18.0"
        )
        shot(page, "usage-30-days")

        # The operator's own: nothing recorded.
        page.get_by_label("Whose").select_option("mine")
        expect(page.locator("#usage-empty")).to_have_text("No GPU usage recorded in these days.")
        expect(page.locator("#usage-empty")).to_be_visible()
        expect(page.locator("#usage-report")).to_be_hidden()
        expect(page.get_by_label("Holders", exact=True)).to_be_hidden()
        shot(page, "dashboard-usage-empty")

        # The header links the two pages.
        page.get_by_role("navigation", name="Pages").get_by_role("link", name="Boxes").click()
        expect(page).to_have_url(f"{served.url}/dashboard")
        current = page.locator('.pages a[aria-current="page"]')
        expect(current).to_have_text("Boxes")
        page.get_by_role("navigation", name="Pages").get_by_role("link", name="Usage").click()
        expect(page).to_have_url(f"{served.url}/dashboard/usage")
        expect(page.locator("#usage-profile-rows tr")).to_have_count(2)
        # Everything the pages load is served; none breaks the Content Security Policy.
        assert [url for url in refused if not url.endswith("/favicon.ico")] == []
        assert not [p for p in problems if "Content Security Policy" in p], problems
    finally:
        context.close()


def signed_in_as(context: Any, controller: Controller, person: Person) -> None:
    """A session of ``person`` as the issuer's sign-in makes it, in the browser's cookies."""
    address = urlsplit(controller.url)
    context.add_cookies(
        [
            {
                "name": COOKIE,
                "value": session_of(controller, person)[0],
                "domain": address.hostname,
                "path": "/",
                "httpOnly": True,
                "sameSite": "Strict",
            }
        ]
    )


def test_a_person_sees_only_their_own_and_the_apis_refusal(
    served: Controller, chromium: Any
) -> None:
    from playwright.sync_api import expect

    context, page = open_page(chromium, width=800)
    try:
        signed_in_as(context, served, Person("bob", ("ml",)))
        page.goto(f"{served.url}/dashboard/usage")
        expect(page.locator("#signed-in")).to_have_text("Signed in as bob")
        expect(page.locator("#usage-coverage")).to_contain_text("GPU usage of bob over")
        # No choice of everyone's, which the API would refuse.
        expect(page.get_by_label("Whose")).to_be_hidden()
        expect(page.get_by_label("Holders", exact=True)).to_be_hidden()
        assert cells(page, "#usage-profile-rows tr") == [
            [L4, "6.5", "0.5", "6.0", "0", "8%", "0.3"]
        ]
        assert cells(page, "#usage-idle-rows tr") == [["bob-notebook", "bob", L4, "6.0", "8%"]]
        expect(page.locator("figure.usage-chart")).to_have_count(1)
        expect(page.locator("figure.usage-chart rect.bar-allocated")).to_have_count(7)
        scrolls: bool = page.evaluate(
            "() => { const e = document.scrollingElement; return e.scrollWidth > e.clientWidth; }"
        )
        assert not scrolls
        shot(page, "dashboard-usage-800px")

        # Were the page to ask for everyone's, it would show the API's own refusal.
        def everyones(route: Any) -> None:
            route.continue_(url=route.request.url + "&all=true")

        page.route(re.compile(r"/api/v1/usage\?"), everyones)
        page.get_by_label("Span").select_option("30d")
        expect(page.locator("#usage-error")).to_have_text(
            "Could not load the usage: only admins may see everyone's usage; "
            "leave out all for your own"
        )
        expect(page.locator("#usage-report")).to_be_hidden()
        shot(page, "usage-refused")
    finally:
        context.close()
