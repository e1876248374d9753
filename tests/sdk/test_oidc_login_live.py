"""`devbox login --oidc` against the real controller and the testbed's OpenID provider: the
browser's part (the controller's authorize route, the issuer's login form, the redirect to
the CLI's loopback) is driven over HTTP as a browser would, the CLI is the console script."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import stat
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from devboxes_controller.config.auth import OidcSettings
from devboxes_controller.web.identity.base import Identity
from devboxes_controller.web.identity.oidc import OidcVerifier
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from support import StartController, run_cli

DEVBOX = Path(os.environ.get("VIRTUAL_ENV", Path(__file__).resolve().parents[2] / ".venv"))
DEVBOX_SCRIPT = str(DEVBOX / "bin" / "devbox")


def _oidc_settings(issuer: Issuer, namespace: str, cli_client_id: str | None) -> dict[str, Any]:
    settings = example_settings(namespace)
    oidc: dict[str, Any] = {"issuer": issuer.url, "audience": CLI_CLIENT_ID}
    if cli_client_id is not None:
        oidc["cliClientId"] = cli_client_id
    settings["auth"] = {"adminGroups": ["gpu-admins"], "oidc": oidc}
    return settings


@pytest.fixture
def process(start_controller: StartController, issuer: Issuer, namespace: str) -> Controller:
    started: Controller = start_controller(_oidc_settings(issuer, namespace, CLI_CLIENT_ID))
    return started


def _without_devbox_variables(config: Path) -> dict[str, str]:
    """This environment with none of its DEVBOX_ variables, and the CLI's config at ``config``."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEVBOX_")},
        "DEVBOX_CONFIG": str(config),
    }


def _start_cli(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [DEVBOX_SCRIPT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _end_if_running(cli: subprocess.Popen[str]) -> None:
    if cli.poll() is None:
        cli.kill()
        cli.communicate()


@contextlib.contextmanager
def _running_cli(env: dict[str, str], *args: str) -> Iterator[subprocess.Popen[str]]:
    """The CLI started with ``args``; killed when the block ends if it still runs."""
    cli = _start_cli(env, *args)
    try:
        yield cli
    finally:
        _end_if_running(cli)


class Login:
    """`devbox login --oidc --no-browser` running, and the URL it asks the person to open."""

    def __init__(self, process: Controller, config: Path) -> None:
        self.cli = _start_cli(
            _without_devbox_variables(config),
            *("login", "--oidc", "--no-browser", "--url", process.url),
        )
        assert self.cli.stderr is not None
        assert self.cli.stderr.readline() == "Open this URL to log in:\n"
        self.url = self.cli.stderr.readline().strip()

    def finish(self) -> tuple[int, str, str]:
        out, err = self.cli.communicate(timeout=60)
        return self.cli.returncode, out, err


def _browse(issuer: Issuer, authorize_url: str, username: str) -> httpx.Response:
    """What a browser does from the printed URL to the CLI's loopback page."""
    with httpx.Client(follow_redirects=False, timeout=30) as browser:
        answer = browser.get(authorize_url)
        assert answer.status_code == 302, answer.text
        to_issuer = answer.headers["location"]
        assert to_issuer.startswith(issuer.url + "/auth?")
        answer = browser.get(to_issuer)
        login_page = httpx.URL(issuer.url).join(answer.headers["location"])
        request_id = login_page.params["authRequestID"]
        answer = browser.post(
            f"{issuer.url}/login/username",
            data={"id": request_id, "username": username, "password": issuer.passwords[username]},
        )
        answer = browser.get(httpx.URL(issuer.url).join(answer.headers["location"]))
        back = answer.headers["location"]
        assert back.startswith("http://127.0.0.1:")
        return browser.get(back)


@pytest.fixture
def login(process: Controller, tmp_path: Path) -> Iterator[Login]:
    started = Login(process, tmp_path / "devbox" / "config.toml")
    yield started
    _end_if_running(started.cli)


def test_login_saves_a_token_the_issuer_vouches_for(
    login: Login, issuer: Issuer, process: Controller, tmp_path: Path
) -> None:
    page = _browse(issuer, login.url, "olivia")
    assert page.status_code == 200
    assert "You are logged in to Devboxes." in page.text
    code, out, err = login.finish()
    assert (code, err) == (0, "")
    config = tmp_path / "devbox" / "config.toml"
    assert out == (
        f"Logged in to {process.url} as olivia (oidc; groups: gpu-admins).\n"
        f"Configuration saved to {config} (readable only by you).\n"
    )
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    saved = tomllib.loads(config.read_text())
    assert saved["url"] == process.url

    async def identify() -> Identity | None:
        settings = OidcSettings(issuer=issuer.url, audience=CLI_CLIENT_ID)
        verifier = OidcVerifier(settings, ["gpu-admins"])
        try:
            return await verifier.identify(saved["token"])
        finally:
            await verifier.aclose()

    assert asyncio.run(identify()) == Identity("olivia", "oidc", ("gpu-admins",), admin=True)
    # The token is not a thing to print.
    assert saved["token"] not in out + err


def test_a_refused_login_fails_the_cli_with_the_reason(login: Login, issuer: Issuer) -> None:
    with httpx.Client(follow_redirects=False, timeout=30) as browser:
        redirect = httpx.URL(login.url).params["redirect_uri"]
        state = httpx.URL(login.url).params["state"]
        # The person pressed "deny": the issuer sends the browser back with an error.
        page = browser.get(redirect, params={"state": state, "error": "access_denied"})
    assert page.status_code == 200
    code, out, err = login.finish()
    assert (code, out) == (1, "")
    assert err == "the issuer refused the login (access_denied)\n"


def test_the_loopback_ignores_answers_of_another_login(login: Login, issuer: Issuer) -> None:
    redirect = httpx.URL(login.url).params["redirect_uri"]
    forged = httpx.get(redirect, params={"state": "x" * 43, "code": "stolen"}, timeout=10)
    assert forged.status_code == 400
    assert login.cli.poll() is None
    assert _browse(issuer, login.url, "bob").status_code == 200
    code, out, _ = login.finish()
    assert code == 0
    assert "as bob (oidc; groups: vision)" in out


def test_the_routes_refuse_bad_requests_with_the_reason(process: Controller) -> None:
    good = {
        "response_type": "code",
        "client_id": "devbox-cli",
        "redirect_uri": "http://127.0.0.1:5000/callback",
        "state": "s" * 32,
        "code_challenge": "c" * 43,
        "code_challenge_method": "S256",
    }
    authorize = f"{process.url}/auth/cli/authorize"
    cases = [
        ({"redirect_uri": "http://evil.example.com:5000/callback"}, "redirect_uri must be"),
        ({"redirect_uri": "http://127.0.0.1/callback"}, "redirect_uri must be"),
        ({"code_challenge_method": "plain"}, "a PKCE code_challenge with"),
        ({"state": "short"}, "state must be 16 to 256"),
        ({"response_type": "token"}, "response_type must be code"),
    ]
    for change, message in cases:
        answer = httpx.get(authorize, params={**good, **change}, timeout=10)
        assert answer.status_code == 400, change
        assert answer.json()["detail"].startswith(message), answer.text
    token = f"{process.url}/api/v1/auth/cli/token"
    body = {
        "grant_type": "authorization_code",
        "code": "not-a-code-the-issuer-gave",
        "code_verifier": "v" * 43,
        "client_id": "devbox-cli",
        "redirect_uri": "http://127.0.0.1:5000/callback",
    }
    # No credential needed: the issuer judges the code and the verifier.
    answer = httpx.post(token, json=body, timeout=10)
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("the issuer refused the login: invalid_grant")
    answer = httpx.post(token, json={**body, "code_verifier": "short"}, timeout=10)
    assert answer.status_code == 400
    assert answer.json()["detail"] == "code_verifier must be 43 to 128 characters (RFC 7636)"
    assert httpx.post(token, json={"code": 1}, timeout=10).status_code == 422
    # Every other API route still wants a credential.
    assert httpx.get(f"{process.url}/api/v1/capabilities", timeout=10).status_code == 401


def test_without_a_cli_client_there_is_no_login(
    start_controller: StartController, issuer: Issuer, namespace: str
) -> None:
    process = start_controller(_oidc_settings(issuer, namespace, None))
    answer = httpx.get(f"{process.url}/auth/cli/authorize", timeout=10)
    assert answer.status_code == 404
    assert answer.json()["detail"] == (
        "this controller offers no OIDC login (auth.oidc.cliClientId is not set); "
        "use a token: devbox login --token"
    )


def test_an_issuer_that_is_down_is_a_503_naming_it(process: Controller, issuer: Issuer) -> None:
    issuer.stop()
    try:
        answer = httpx.get(
            f"{process.url}/auth/cli/authorize",
            params={
                "response_type": "code",
                "redirect_uri": "http://127.0.0.1:5000/callback",
                "state": "s" * 32,
                "code_challenge": "c" * 43,
                "code_challenge_method": "S256",
            },
            timeout=10,
        )
    finally:
        issuer.start()
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "5"
    assert answer.json()["detail"] == (
        f"the OIDC issuer {issuer.url} cannot be reached (ConnectError); try again later"
    )


DEVICE_PROMPT = re.compile(r"^Open (\S+) in a browser and enter the code (\S+)$")


def test_device_login_is_approved_from_a_browser_anywhere(
    process: Controller, issuer: Issuer, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    env = _without_devbox_variables(config)
    with _running_cli(env, "login", "--oidc", "--device", "--url", process.url) as cli:
        assert cli.stderr is not None
        prompt = DEVICE_PROMPT.match(cli.stderr.readline().rstrip("\n"))
        assert prompt is not None
        page, code = prompt.groups()
        assert page == f"{issuer.url}/device"
        assert cli.stderr.readline() == f"  (or open {page}?user_code={code})\n"
        assert cli.stderr.readline() == "Waiting for the login ...\n"
        issuer.approve_device(code, "bob")
        out, err = cli.communicate(timeout=60)
    assert (cli.returncode, err) == (0, "")
    assert out.splitlines()[0] == f"Logged in to {process.url} as bob (oidc; groups: vision)."
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_with_no_browser_to_open_the_login_takes_the_device_flow_at_once(
    process: Controller, issuer: Issuer, tmp_path: Path
) -> None:
    """As in an SSH session: no display, no $BROWSER and no text-mode browser on PATH."""
    config = tmp_path / "config.toml"
    env = {"DEVBOX_CONFIG": str(config), "PATH": str(DEVBOX / "bin"), "HOME": str(tmp_path)}
    with _running_cli(env, "login", "--oidc", "--url", process.url) as cli:
        assert cli.stderr is not None
        assert cli.stderr.readline() == (
            "No browser can be opened here: logging in with a one-time code instead (--device).\n"
        )
        prompt = DEVICE_PROMPT.match(cli.stderr.readline().rstrip("\n"))
        assert prompt is not None
        assert cli.stderr.readline().startswith("  (or open ")
        assert cli.stderr.readline() == "Waiting for the login ...\n"
        issuer.approve_device(prompt.group(2), "alice")
        out, err = cli.communicate(timeout=60)
    assert (cli.returncode, err) == (0, "")
    assert out.splitlines()[0] == f"Logged in to {process.url} as alice (oidc; groups: ml)."


def test_the_device_routes_say_pending_until_approved(process: Controller, issuer: Issuer) -> None:
    started = httpx.post(f"{process.url}/api/v1/auth/cli/device", timeout=10)
    assert started.status_code == 200, started.text
    device = started.json()
    assert set(device) >= {"device_code", "user_code", "verification_uri", "expires_in"}
    poll = {
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
        "device_code": device["device_code"],
    }
    token = f"{process.url}/api/v1/auth/cli/token"
    pending = httpx.post(token, json=poll, timeout=10)
    assert pending.status_code == 202
    assert pending.json()["status"] in ("authorization_pending", "slow_down")
    issuer.approve_device(device["user_code"], "alice")
    approved = httpx.post(token, json=poll, timeout=10)
    assert approved.status_code == 200, approved.text
    assert (approved.json()["user"], approved.json()["groups"]) == ("alice", ["ml"])
    unknown = httpx.post(token, json={**poll, "device_code": "no-such-code"}, timeout=10)
    assert unknown.status_code == 400
    assert unknown.json()["detail"].startswith("the issuer refused the login:")


def test_device_and_no_browser_go_with_oidc(tmp_path: Path) -> None:
    # Refused before any request: no server listens there.
    env = {"DEVBOX_CONFIG": str(tmp_path / "config.toml"), "PATH": os.environ["PATH"]}
    for flags, message in [
        (["--device"], "--device goes with --oidc"),
        (["--no-browser"], "--no-browser goes with --oidc"),
        (["--oidc", "--device", "--no-browser"], "--device opens no browser already"),
        (["--oidc", "--token", "x" * 40], "--oidc and --token cannot be combined"),
    ]:
        done = run_cli(DEVBOX_SCRIPT, env, "login", "--url", "http://127.0.0.1:9", *flags)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr


def _snapshot(browser: httpx.Client, url: str) -> dict[str, Any]:
    """The first event of the dashboard's stream, as the page reads it."""
    with browser.stream("GET", f"{url}/dashboard/events") as stream:
        assert stream.status_code == 200
        kind = ""
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line[len("event: ") :]
            elif line.startswith("data: ") and kind == "snapshot":
                snapshot: dict[str, Any] = json.loads(line[len("data: ") :])
                return snapshot
    raise AssertionError("the stream ended before its snapshot")


def test_the_dashboard_signs_a_person_in_through_the_issuer(
    process: Controller, issuer: Issuer
) -> None:
    api = f"{process.url}/api/v1/devboxes"
    boxes = {}
    try:
        for person in ("alice", "bob"):
            name = f"{person}-{secrets.token_hex(3)}"
            headers = {"Authorization": f"Bearer {issuer.token_for(person)}"}
            created = httpx.post(api, json={"name": name}, headers=headers, timeout=30)
            assert created.status_code == 201, created.text
            boxes[person] = name
        with httpx.Client(follow_redirects=False, timeout=30) as browser:
            form = browser.get(f"{process.url}/dashboard/login")
            assert f"Sign in with {httpx.URL(issuer.url).netloc.decode()}" in form.text
            answer = browser.get(
                f"{process.url}/dashboard/login/oidc", params={"next": "/dashboard"}
            )
            assert answer.status_code == 303
            to_issuer = httpx.URL(answer.headers["location"])
            assert str(to_issuer).startswith(issuer.url + "/auth?")
            assert (
                to_issuer.params["redirect_uri"] == f"{process.url}/dashboard/login/oidc/callback"
            )
            assert to_issuer.params["code_challenge_method"] == "S256"
            assert len(to_issuer.params["nonce"]) >= 43
            bound = browser.cookies["devboxes_login"]
            answer = browser.get(to_issuer)
            request_id = (
                httpx.URL(issuer.url).join(answer.headers["location"]).params["authRequestID"]
            )
            answer = browser.post(
                f"{issuer.url}/login/username",
                data={"id": request_id, "username": "alice", "password": issuer.passwords["alice"]},
            )
            answer = browser.get(httpx.URL(issuer.url).join(answer.headers["location"]))
            back = httpx.URL(answer.headers["location"])
            assert str(back).startswith(f"{process.url}/dashboard/login/oidc/callback?")

            # A changed state is another sign-in's answer, refused before the code is redeemed.
            with httpx.Client(timeout=30, cookies={"devboxes_login": bound}) as forger:
                forged = forger.get(back.copy_set_param("state", "x" * 43))
            assert forged.status_code == 400
            assert "belongs to another sign-in" in forged.text
            assert "devboxes_session" not in forged.cookies

            signed_in = browser.get(back)
            assert signed_in.status_code == 200, signed_in.text
            assert "Signed in as alice." in signed_in.text
            assert "devboxes_login" not in browser.cookies
            whoami = browser.get(f"{process.url}/api/v1/whoami").json()
            assert whoami == {
                "user": "alice",
                "mode": "browser-session",
                "groups": ["ml"],
                "admin": False,
            }
            snapshot = _snapshot(browser, process.url)
            assert {box["owner"] for box in snapshot["items"]} == {"alice"}
            assert boxes["alice"] in {box["name"] for box in snapshot["items"]}

            # The same code again, even with the sign-in's own cookie: the issuer refuses it.
            with httpx.Client(timeout=30, cookies={"devboxes_login": bound}) as replayer:
                replayed = replayer.get(back)
            assert replayed.status_code == 400
            assert "the issuer refused the login: invalid_grant" in replayed.text
            assert "devboxes_session" not in replayed.cookies
            # Without the cookie of the browser that started it, nothing is even tried.
            stray = httpx.get(back, timeout=30)
            assert stray.status_code == 400
            assert "was not started in this browser" in stray.text
    finally:
        operator = {"Authorization": f"Bearer {process.token}"}
        for name in boxes.values():
            httpx.delete(f"{api}/{name}", params={"purge": "true"}, headers=operator, timeout=60)


def test_one_login_serves_every_cluster_that_trusts_the_issuer(
    start_controller: StartController,
    issuer: Issuer,
    namespace: str,
    process: Controller,
    tmp_path: Path,
) -> None:
    other: Controller = start_controller(_oidc_settings(issuer, namespace, CLI_CLIENT_ID))
    config = tmp_path / "config.toml"
    config.write_text(
        f'[clusters.lab-a]\nurl = "{process.url}"\n\n'
        f'[clusters.lab-b]\nurl = "{other.url}"\ntoken_from = "lab-a"\n',
        encoding="utf-8",
    )
    env = _without_devbox_variables(config)
    cli = _start_cli(env, "login", "--oidc", "--no-browser", "--cluster", "lab-b")
    try:
        assert cli.stderr is not None
        assert cli.stderr.readline() == "Open this URL to log in:\n"
        page = _browse(issuer, cli.stderr.readline().strip(), "alice")
        assert page.status_code == 200
        out, err = cli.communicate(timeout=60)
    finally:
        _end_if_running(cli)
    assert (cli.returncode, err) == (0, "")
    assert out.startswith(f"Logged in to {other.url} as alice (oidc; groups: ml).\n")
    saved = tomllib.loads(config.read_text())
    # Saved where lab-b takes its token from; lab-b keeps saying so.
    assert set(saved["clusters"]["lab-a"]) == {"url", "token"}
    assert saved["clusters"]["lab-b"] == {"url": other.url, "token_from": "lab-a"}
    for name, controller in (("lab-a", process), ("lab-b", other)):
        whoami = run_cli(DEVBOX_SCRIPT, env, "whoami", "--cluster", name)
        assert (whoami.returncode, whoami.stderr) == (0, "")
        assert whoami.stdout.splitlines()[0] == f"alice (oidc) at {controller.url}"
