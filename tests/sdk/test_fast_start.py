"""The two commands ssh starts on every login stay lean: ``python -m devboxes_sdk ssh
--stdio HOST`` (the ``ProxyCommand``) and ``python -m devboxes_sdk known-hosts HOST`` (the
``KnownHostsCommand``). Each is a new interpreter per login, so ``devbox``'s entry must
not load the client, requests or pydantic before it knows it needs them; the tunnel needs
none of them at all. The command lines themselves answer as before: the same messages and
exit codes, whichever way they are read.

Every check runs a fresh interpreter, since this one has long loaded everything.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

from devboxes_sdk.cli import _lean

HEAVY = ("pydantic", "requests", "urllib3", "devboxes_sdk.client", "devboxes_sdk.models")
# What only the full command line loads: its grammar and every command.
PARSER = ("devboxes_sdk._cli_parser", "devboxes_sdk._cli_commands", "argparse")
TOKEN = "fast-start-token"
NAME_RULE = (
    "use 1-40 characters of lowercase letters, digits and '-', starting and ending with a "
    "letter or digit"
)

# Runs `python -m devboxes_sdk ARGS` in this interpreter, then writes the modules it had
# loaded to the file named by $LOADED (standard output may be the tunnel's).
_RUN_AND_LIST = """
import json, os, runpy, sys
sys.argv = ["devboxes_sdk", *json.loads(os.environ["ARGS"])]
try:
    runpy.run_module("devboxes_sdk", run_name="__main__", alter_sys=True)
except SystemExit as done:
    code = done.code
with open(os.environ["LOADED"], "w") as out:
    json.dump(sorted(sys.modules), out)
sys.exit(code)
"""


def _environment(**extra: str) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DEVBOX_", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"))
    }
    # No config file of the person running the tests is ever read.
    environment["DEVBOX_CONFIG"] = "/nonexistent/devbox-fast-start/config.toml"
    return {**environment, **extra}


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY)]


def _devbox(
    tmp_path: Path, *args: str, env: Mapping[str, str], stdin: bytes = b""
) -> tuple[subprocess.CompletedProcess[bytes], list[str]]:
    """``python -m devboxes_sdk ARGS``, and the modules it loaded by its end."""
    loaded = tmp_path / "loaded.json"
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST],
        input=stdin,
        capture_output=True,
        env={**env, "ARGS": json.dumps(list(args)), "LOADED": str(loaded)},
        timeout=60,
        check=False,
    )
    return done, json.loads(loaded.read_text())


def _python(code: str) -> str:
    """What ``python -c CODE`` prints, in an environment with no configuration; it must
    succeed."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_environment(),
        check=True,
    ).stdout


def _closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_importing_the_entry_loads_neither_the_client_nor_requests_nor_pydantic() -> None:
    listed = _python(
        "import sys, devboxes_sdk, devboxes_sdk.cli, devboxes_sdk.tunnel, "
        "devboxes_sdk._cli_base, devboxes_sdk.errors, devboxes_sdk.config; "
        "print('\\n'.join(sorted(sys.modules)))"
    ).split()
    assert _heavy(listed) == []
    assert [m for m in listed if m.startswith(PARSER)] == []


def test_the_package_still_offers_every_public_name() -> None:
    printed = _python(
        "import devboxes_sdk as sdk, devboxes_sdk.client, devboxes_sdk.errors, "
        "devboxes_sdk.models\n"
        "assert set(sdk._LAZY) == set(sdk.__all__), set(sdk._LAZY) ^ set(sdk.__all__)\n"
        "for name in sdk.__all__:\n"
        "    value = getattr(sdk, name)\n"
        "    home = sdk._LAZY[name]\n"
        "    assert value is getattr(__import__(home, fromlist=['x']), name), name\n"
        "assert set(sdk.__all__) <= set(dir(sdk))\n"
        "from devboxes_sdk import *\n"
        "assert Client is devboxes_sdk.client.Client\n"
        "try:\n"
        "    sdk.NoSuchName\n"
        "except AttributeError as error:\n"
        "    print(error)\n"
    )
    assert printed == "module 'devboxes_sdk' has no attribute 'NoSuchName'\n"


def test_a_package_import_still_reaches_the_submodules_it_used_to_load() -> None:
    printed = _python(
        "import devboxes_sdk\n"
        "print(devboxes_sdk.models.API_PREFIX, devboxes_sdk.errors.DevboxesError.__name__)"
    )
    assert printed == "/api/v1 DevboxesError\n"


@pytest.mark.parametrize(
    ("words", "lean"),
    [
        (["ssh", "--stdio", "atlas.devbox"], "devbox ssh"),
        (["ssh", "--stdio", "atlas"], "devbox ssh"),
        (["known-hosts", "atlas.devbox"], "devbox known-hosts"),
        # The name is checked by the same code either way; a usage error still.
        (["known-hosts", "Bad_Name!"], "devbox known-hosts"),
        # Everything else is the parser's to read and explain.
        (["ssh", "--stdio", "Bad_Name!"], None),
        (["ssh", "--stdio", "-x"], None),
        (["ssh", "--stdio", "atlas", "--", "-v"], None),
        (["ssh", "--stdio"], None),
        (["ssh", "atlas"], None),
        (["ssh", "atlas", "--stdio"], None),
        (["--json", "ssh", "--stdio", "atlas"], None),
        (["ssh", "--stdio", "--url", "https://x", "atlas"], None),
        (["known-hosts", "-h"], None),
        (["known-hosts", "--json", "atlas"], None),
        (["known-hosts", "a", "b"], None),
        (["known-hosts"], None),
        (["list"], None),
        ([], None),
    ],
)
def test_only_the_command_lines_ssh_gives_skip_the_parser(
    words: list[str], lean: str | None
) -> None:
    found = _lean(words)
    assert (found[0] if found is not None else None) == lean


@pytest.mark.parametrize(
    ("args", "code", "stderr"),
    [
        (
            ["known-hosts", "Bad_Name!"],
            2,
            f"devbox known-hosts: error: invalid name 'Bad_Name!': {NAME_RULE}\n"
            "Run 'devbox known-hosts --help' for usage.\n",
        ),
        (
            ["known-hosts"],
            2,
            "devbox known-hosts: error: the following arguments are required: HOST\n"
            "Run 'devbox known-hosts --help' for usage.\n",
        ),
        (
            ["known-hosts", "a", "b"],
            2,
            "devbox: error: unrecognized arguments: b\nRun 'devbox --help' for usage.\n",
        ),
        (
            ["ssh", "--stdio", "Bad_Name!"],
            2,
            f"devbox ssh: error: argument NAME: invalid name 'Bad_Name!': {NAME_RULE}\n"
            "Run 'devbox ssh --help' for usage.\n",
        ),
        (
            ["ssh", "--stdio", "atlas", "extra"],
            2,
            "devbox ssh: error: --stdio takes no ssh arguments: ssh runs it as a "
            "ProxyCommand\nRun 'devbox ssh --help' for usage.\n",
        ),
        (
            ["ssh", "--stdio"],
            2,
            "devbox ssh: error: the following arguments are required: NAME, -- ARGS\n"
            "Run 'devbox ssh --help' for usage.\n",
        ),
        (
            ["ssh", "--stdio", "atlas.devbox"],
            1,
            "no Devboxes URL configured: run 'devbox login --url URL' or set DEVBOX_URL\n",
        ),
        (
            ["known-hosts", "atlas.devbox"],
            1,
            "no Devboxes URL configured: run 'devbox login --url URL' or set DEVBOX_URL\n",
        ),
    ],
)
def test_bad_command_lines_get_the_same_message_and_exit_code(
    tmp_path: Path, args: list[str], code: int, stderr: str
) -> None:
    done, loaded = _devbox(tmp_path, *args, env=_environment())
    assert (done.returncode, done.stdout, done.stderr.decode()) == (code, b"", stderr)
    if args[0] == "known-hosts" and len(args) == 2:
        # Refused before there was anything to ask the controller.
        assert _heavy(loaded) == []


def test_a_token_that_cannot_travel_is_refused_by_the_lean_path(tmp_path: Path) -> None:
    env = _environment(DEVBOX_URL="http://127.0.0.1:9", DEVBOX_TOKEN="two words")
    done, loaded = _devbox(tmp_path, "ssh", "--stdio", "atlas.devbox", env=env)
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "the token from DEVBOX_TOKEN contains whitespace or non-printable characters\n"
    )
    assert _heavy(loaded) == []


def test_an_unreachable_controller_is_one_line_and_loads_nothing_heavy(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    env = _environment(DEVBOX_URL=url, DEVBOX_TOKEN=TOKEN)
    done, loaded = _devbox(tmp_path, "ssh", "--stdio", "atlas.devbox", env=env)
    assert done.returncode == 1
    assert done.stderr.decode().startswith(f"cannot open a tunnel to {url}: ")
    assert done.stderr.decode().count("\n") == 1
    assert _heavy(loaded) == []
    assert [m for m in loaded if m.startswith(PARSER)] == []


class FakeTunnel:
    """The controller's tunnel endpoint, as far as ``devbox ssh --stdio`` sees it: box
    ``atlas`` answers each chunk in upper case after one notice and closes with a reason
    when its input ends; box ``stopped`` is refused with the API's JSON 409."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.server: Server = serve(
            self._session, "127.0.0.1", 0, process_request=self._check, compression=None
        )
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        self.requests.append(request)
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _json_answer(401, {"detail": "invalid or expired token"})
        if request.path == "/api/v1/devboxes/stopped/ssh":
            detail = "devbox 'stopped' is stopped; start it with: devbox start stopped"
            return _json_answer(409, {"detail": detail})
        if request.path != "/api/v1/devboxes/atlas/ssh":
            return _json_answer(404, {"detail": "not found"})
        return None

    def _session(self, connection: ServerConnection) -> None:
        connection.send("Box atlas stops in 5 min")
        for message in connection:
            if message == b"":
                connection.close(1000, "the input\x1b[2J ended")
                return
            assert isinstance(message, bytes)
            connection.send(message.upper())


def _json_answer(status: int, body: object) -> Response:
    data = json.dumps(body).encode()
    headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return Response(status, "Refused", headers, data)


@pytest.fixture
def tunnel() -> Iterator[FakeTunnel]:
    fake = FakeTunnel()
    yield fake
    fake.server.shutdown()


def test_the_lean_proxy_command_carries_a_session_without_the_client(
    tmp_path: Path, tunnel: FakeTunnel
) -> None:
    env = _environment(DEVBOX_URL=tunnel.url, DEVBOX_TOKEN=TOKEN)
    done, loaded = _devbox(
        tmp_path, "ssh", "--stdio", "Atlas.devbox", env=env, stdin=b"hello box\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"HELLO BOX\n"
    assert done.stderr.decode() == (
        "\r\ndevbox: Box atlas stops in 5 min\r\n"
        "devbox: the controller closed the tunnel: the input?[2J ended\n"
    )
    assert [request.headers.get("Devboxes-Notices") for request in tunnel.requests] == ["text"]
    assert _heavy(loaded) == []
    assert [m for m in loaded if m.startswith(PARSER)] == []


def test_the_lean_proxy_command_says_the_controller_s_refusal_in_one_line(
    tmp_path: Path, tunnel: FakeTunnel
) -> None:
    env = _environment(DEVBOX_URL=tunnel.url, DEVBOX_TOKEN=TOKEN)
    done, loaded = _devbox(tmp_path, "ssh", "--stdio", "stopped", env=env)
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "Devboxes API returned 409: devbox 'stopped' is stopped; start it with: "
        "devbox start stopped\n"
    )
    env = _environment(DEVBOX_URL=tunnel.url, DEVBOX_TOKEN="wrong")
    done, _ = _devbox(tmp_path, "ssh", "--stdio", "atlas", env=env)
    assert (done.returncode, done.stderr) == (
        1,
        b"Devboxes API returned 401: invalid or expired token\n",
    )
    # The error classes for a refusal need no models.
    assert _heavy(loaded) == []


def test_the_parser_and_the_lean_path_run_the_same_stdio_command(
    tmp_path: Path, tunnel: FakeTunnel
) -> None:
    """With an option the parser reads the line; the session and its end are the same."""
    env = _environment(DEVBOX_TOKEN=TOKEN)
    done, loaded = _devbox(
        tmp_path, "ssh", "--url", tunnel.url, "--stdio", "atlas", env=env, stdin=b"hi\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"HI\n"
    assert done.stderr.decode().endswith(
        "devbox: the controller closed the tunnel: the input?[2J ended\n"
    )
    assert "devboxes_sdk._cli_parser" in loaded


def test_the_tunnel_trusts_the_ca_bundle_requests_trusts_by_default() -> None:
    from requests.utils import DEFAULT_CA_BUNDLE_PATH

    from devboxes_sdk import tunnel

    assert tunnel.DEFAULT_CA_BUNDLE == DEFAULT_CA_BUNDLE_PATH
