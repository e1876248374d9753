"""The usage page over HTTP: a session's page, the sign-in form without one, the same
strict Content Security Policy as the boxes page, everyone's usage offered to admins only,
and its scripts from the asset allowlist."""

from __future__ import annotations

import re

import pytest
import requests
from devboxes_controller.state.ended_sessions import EndedSessions
from devboxes_controller.web.identity.sessions import COOKIE, Person, SessionStore
from devboxes_testbed.controller import Controller
from support import MemoryRecord


def page_of(controller: Controller, person: Person | None) -> requests.Response:
    """The usage page for a session of ``person`` (None: the operator's)."""
    sessions = SessionStore(controller.token, EndedSessions(MemoryRecord()))
    browser = requests.Session()
    browser.cookies.set(COOKIE, sessions.create(person).cookie)
    return browser.get(f"{controller.url}/dashboard/usage", allow_redirects=False, timeout=10)


def test_without_a_session_it_is_the_sign_in_form_and_back(controller: Controller) -> None:
    response = requests.get(f"{controller.url}/dashboard/usage", allow_redirects=False, timeout=10)
    assert response.status_code == 303
    assert response.headers["location"] == "/dashboard/login?next=/dashboard/usage"


@pytest.mark.parametrize(
    ("person", "admin", "shown"),
    [
        (None, "true", "<strong>operator</strong> (admin)"),
        (Person("bob", ("staff",)), "false", "<strong>bob</strong>"),
    ],
)
def test_only_an_admins_page_offers_everyones_usage(
    controller: Controller, person: Person | None, admin: str, shown: str
) -> None:
    response = page_of(controller, person)
    assert response.status_code == 200
    assert f'<meta name="devboxes-admin" content="{admin}">' in response.text
    assert f"Signed in as {shown}</p>" in response.text
    assert '<a href="/dashboard/usage" aria-current="page">Usage</a>' in response.text


def test_the_page_has_the_strict_csp_and_no_inline_code(controller: Controller) -> None:
    response = page_of(controller, None)
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "style-src 'self'" in policy
    assert "unsafe" not in policy
    assert response.headers["cache-control"] == "no-store"
    page = response.text
    assert controller.token not in page
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
    assert scripts == [(' type="module" src="/dashboard/static/usage.js"', "")]
    assert not re.search(r"<style|\son[a-z]+=|\sstyle=", page)
    assert "https://" not in page


def test_its_scripts_are_served_as_modules(controller: Controller) -> None:
    page = requests.get(f"{controller.url}/dashboard/static/usage.js", timeout=10)
    assert page.headers["content-type"].startswith("text/javascript")
    assert 'from "./usage_view.js"' in page.text
    view = requests.get(f"{controller.url}/dashboard/static/usage_view.js", timeout=10)
    assert view.headers["content-type"].startswith("text/javascript")
    assert "export function dailySeries" in view.text
    refused = requests.get(f"{controller.url}/dashboard/static/usage.html", timeout=10)
    assert refused.status_code == 404
