"""The `devbox` console script against the real controller on the testbed: what a user
sees when an argument is refused, a name is changed, or a wait runs out; errors as JSON
with --json; the operator's keys."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from devboxes_testbed import L4, L4_SHARED, MIG

from devboxes_sdk import Client

VENV = Path(os.environ.get("VIRTUAL_ENV", Path(__file__).resolve().parents[2] / ".venv"))
DEVBOX_SCRIPT = str(VENV / "bin" / "devbox")
# Nothing listens on the discard port: a command that exits 2 with this URL was refused
# before it sent any request.
UNREACHABLE_URL = "http://127.0.0.1:9"
SESSION_NAMESPACE = "devboxes-session"
PREFIX = "cli-"


def devbox(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEVBOX_")},
        "DEVBOX_CONFIG": "/nonexistent/devbox.toml",
        **env,
    }
    return subprocess.run(
        [DEVBOX_SCRIPT, *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=180,
        check=False,
    )


@pytest.fixture
def boxes(controller_client: Client) -> Iterator[Client]:
    """The session controller's client; every box this module made is purged afterwards."""
    yield controller_client
    for box in controller_client.list():
        if box.name.startswith(PREFIX):
            controller_client.delete(box.name, purge=True)


def usage_error(prog: str, message: str) -> str:
    return f"{prog}: error: {message}\nRun '{prog} --help' for usage.\n"


def test_server_refusals_name_the_flags_and_exit_2(
    boxes: Client, controller_env: dict[str, str]
) -> None:
    ttl = devbox(controller_env, "create", "cli-ttl", "--ttl", "1000", "--no-wait")
    assert (ttl.returncode, ttl.stdout) == (2, "")
    assert ttl.stderr == usage_error("devbox create", "--ttl must be at most 168 hours")

    profile = devbox(controller_env, "create", "cli-gpu", "--gpu-profile", "h100", "--no-wait")
    assert profile.returncode == 2
    first, hint = profile.stderr.splitlines()
    assert first.startswith(
        "devbox create: error: --gpu-profile: unknown GPU profile 'h100'; available profiles: "
    )
    assert L4 in first
    assert hint == "Run 'devbox create --help' for usage."
    assert [box.name for box in boxes.list() if box.name.startswith(PREFIX)] == []


@pytest.mark.parametrize(
    ("args", "prog", "message"),
    [
        (
            ["create", "cli-repo", "--repo", "not a repo"],
            "devbox create",
            "argument --repo: repository must be 'owner/repo' or an https://github.com/ URL, "
            "got 'not a repo'",
        ),
        (
            ["create", "cli-\N{KELVIN SIGN}ube"],
            "devbox create",
            "argument NAME: invalid name 'cli-\N{KELVIN SIGN}ube': it contains the non-ASCII "
            "character U+212A (KELVIN SIGN); use 1-40 characters of lowercase letters, digits "
            "and '-', starting and ending with a letter or digit",
        ),
    ],
)
def test_bad_arguments_exit_2_before_any_request(args: list[str], prog: str, message: str) -> None:
    refused = devbox({"DEVBOX_URL": UNREACHABLE_URL, "DEVBOX_TOKEN": "t" * 40}, *args)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == usage_error(prog, message)


def json_error(kind: str, message: str, status: int | None) -> dict[str, object]:
    return {"error": {"kind": kind, "message": message, "status": status}}


def test_with_json_every_error_is_one_object_on_stdout_and_the_exit_code_stays(
    boxes: Client, controller_env: dict[str, str]
) -> None:
    unreachable = {"DEVBOX_URL": UNREACHABLE_URL, "DEVBOX_TOKEN": "t" * 40}
    cases = [
        (
            controller_env,
            ["--json", "status", "cli-nothing"],
            1,
            json_error("not_found", "devbox 'cli-nothing' not found", 404),
        ),
        (
            controller_env,
            ["create", "cli-ttl", "--ttl", "1000", "--no-wait", "--json"],
            2,
            json_error("usage", "--ttl must be at most 168 hours", None),
        ),
        (
            unreachable,
            ["--json", "list", "-q"],
            2,
            json_error(
                "usage", "-q and --json cannot be combined (-q prints names, --json the JSON)", None
            ),
        ),
        # Refused by argparse, before the command line is understood.
        (
            unreachable,
            ["--json", "create"],
            2,
            json_error("usage", "the following arguments are required: NAME", None),
        ),
        (
            {"DEVBOX_URL": controller_env["DEVBOX_URL"]},
            ["keys", "--json"],
            1,
            json_error(
                "configuration",
                "no Devboxes token configured: run 'devbox login' or set DEVBOX_TOKEN",
                None,
            ),
        ),
    ]
    for env, args, code, error in cases:
        refused = devbox(env, *args)
        assert (refused.returncode, refused.stderr) == (code, ""), args
        assert json.loads(refused.stdout) == error, args
    assert [box.name for box in boxes.list() if box.name.startswith(PREFIX)] == []


def test_the_operator_is_told_where_its_keys_live_not_to_add_one(
    controller_env: dict[str, str], tmp_path: Path
) -> None:
    listed = devbox(controller_env, "keys")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == (
        "The operator token has no SSH keys of its own: the operator's boxes accept the "
        "keys of the Secret that the controller's ssh.authorizedKeysSecret names "
        "(devbox gpu doctor shows it). To keep keys of your own, log in as yourself: "
        "devbox login --oidc\n"
    )
    assert "devbox keys add" not in listed.stdout
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    refused = devbox(controller_env, "keys", "add", str(key.with_suffix(".pub")))
    assert refused.returncode == 1
    assert refused.stderr == (
        "Devboxes API returned 409: the operator token has no SSH keys of its own: put the "
        "public keys that may log in under the key authorized_keys of a Secret in namespace "
        f"{SESSION_NAMESPACE} (kubectl -n {SESSION_NAMESPACE} create secret generic "
        "devbox-ssh-keys --from-file=authorized_keys=KEYS_FILE) and set "
        "controller.ssh.authorizedKeysSecret to its name; to keep keys of your own, log in "
        "as yourself\n"
    )


def test_upper_case_name_is_lowered_with_a_note(
    boxes: Client, controller_env: dict[str, str]
) -> None:
    created = devbox(controller_env, "create", "CLI-Upper", "--no-wait")
    assert created.returncode == 0, created.stderr
    assert created.stderr == "note: using the name 'cli-upper' (box names are lower case)\n"
    assert created.stdout.splitlines()[1].split()[0] == "cli-upper"
    assert boxes.get("cli-upper").name == "cli-upper"


def test_missing_token_is_explained_in_cli_words(controller_env: dict[str, str]) -> None:
    missing = devbox({"DEVBOX_URL": controller_env["DEVBOX_URL"]}, "list")
    assert missing.returncode == 1
    assert missing.stderr == (
        "no Devboxes token configured: run 'devbox login' or set DEVBOX_TOKEN\n"
    )


def _wait_for_message(client: Client, name: str, fragment: str) -> None:
    deadline = time.monotonic() + 120
    while fragment not in (client.get(name).message or ""):
        if time.monotonic() > deadline:
            pytest.fail(f"{name} never reported {fragment!r}: {client.get(name).message!r}")
        time.sleep(1)


def test_timeout_shows_the_place_in_line_and_how_to_cancel(
    boxes: Client, controller_env: dict[str, str]
) -> None:
    # The testbed has two L4 GPUs: two ready L4 boxes leave none for a third.
    for name in ("cli-l4-a", "cli-l4-b"):
        ready = devbox(controller_env, "create", name, "--gpu", "--timeout", "120")
        assert ready.returncode == 0, ready.stderr

    waiting = devbox(controller_env, "create", "cli-l4-c", "--gpu", "--timeout", "3")
    assert waiting.returncode == 3, waiting.stderr
    assert "nodes are available" not in waiting.stderr
    assert "unbound immediate PersistentVolumeClaims" not in waiting.stderr
    assert waiting.stderr.splitlines()[-2:] == [
        "It keeps starting on the server, and takes a GPU as soon as one is free; "
        "full reason: devbox status cli-l4-c",
        "To cancel: devbox stop cli-l4-c (keeps the box) "
        "or devbox delete cli-l4-c (keeps its home volume)",
    ]

    _wait_for_message(boxes, "cli-l4-c", "in line for a device")
    again = devbox(controller_env, "start", "cli-l4-c", "--timeout", "1")
    assert again.returncode == 3, again.stderr
    # The controller's one line: the free count and the place in line.
    assert re.fullmatch(
        r"cli-l4-c was not ready within 1s \(starting — Waiting for a free NVIDIA L4: "
        r"0 of \d+ free, 1st in line\)",
        again.stderr.splitlines()[-3],
    ), again.stderr
    status = devbox(controller_env, "status", "cli-l4-c")
    assert "in line for a device" in status.stdout
    assert re.search(r"^Owner: +operator$", status.stdout, re.MULTILINE), status.stdout
    # Every box here is the operator's own: the list does not repeat the owner.
    listed = devbox(controller_env, "list").stdout.splitlines()
    assert listed[0].split()[:2] == ["NAME", "STATE"]

    cancelled = devbox(controller_env, "delete", "cli-l4-c")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cli-l4-c" not in devbox(controller_env, "list", "-q").stdout.split()


def test_image_profiles_are_listed_chosen_and_refused_in_cli_words(
    boxes: Client, controller_env: dict[str, str]
) -> None:
    catalog = boxes.capabilities().images
    assert catalog.enabled
    assert [(p.name, p.mode) for p in catalog.profiles] == [
        ("python", "workspace"),
        ("cuda", "workspace"),
        ("web-preview", "sidecar"),
    ]

    listed = devbox(controller_env, "image", "profiles")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["PROFILE", "NAME", "MODE", "PORTS", "DESCRIPTION"]
    assert [row.split()[0] for row in rows] == ["python", "cuda", "web-preview"]
    assert "http 8080/TCP" in rows[2]
    names = devbox(controller_env, "image", "profiles", "-q")
    assert names.stdout.split() == ["python", "cuda", "web-preview"]
    as_json = devbox(controller_env, "--json", "image", "profiles")
    assert json.loads(as_json.stdout) == catalog.model_dump(mode="json")

    # The SDK's create, with the profile as discovery gave it.
    box = boxes.create("cli-web", image=catalog.profiles[2])
    assert box.image is not None
    assert (box.image.profile, box.image.mode) == ("web-preview", "sidecar")
    created = devbox(controller_env, "create", "cli-python", "--image", "python", "--no-wait")
    assert created.returncode == 0, created.stderr
    status = devbox(controller_env, "status", "cli-python")
    assert "Image:" in status.stdout
    assert "Python workspace (python, workspace; ports notebook 8888/TCP)" in status.stdout

    refused = devbox(controller_env, "create", "cli-cuda", "--image", "cuda", "--no-wait")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.splitlines()[0] == (
        "devbox create: error: --image: image profile 'cuda' does not support a box without "
        f"a GPU; it runs with: {L4}, {MIG}, {L4_SHARED}"
    )
    empty = devbox(controller_env, "create", "cli-empty", "--image", " ", "--no-wait")
    assert empty.returncode == 2
    assert "--image: image profile name is empty" in empty.stderr
    assert "cli-cuda" not in devbox(controller_env, "list", "-q").stdout.split()
