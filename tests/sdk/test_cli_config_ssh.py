"""The block ``devbox config-ssh`` keeps in an SSH config: written first, replaced in place,
removed alone, and never a change to a line outside it; and the ``ssh`` command lines
``devbox ssh`` runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devboxes_sdk import _cli_ssh
from devboxes_sdk.client import Devbox
from devboxes_sdk.errors import DevboxesError

URL = "https://devboxes.example.org"
THEIRS = "Host github.com\n    User git\n\nHost *\n    ForwardAgent no\n"


def test_the_block_goes_first_so_that_a_later_catch_all_cannot_override_it() -> None:
    written = _cli_ssh.with_block(THEIRS, _cli_ssh.config_block(URL))
    assert written.startswith(f"{_cli_ssh.BEGIN} ({URL}) ---\n")
    assert written.endswith(THEIRS)
    assert "Host *.devbox\n" in written
    assert f"DEVBOX_URL={URL} {sys.executable} -m devboxes_sdk ssh --stdio %n" in written
    assert "StrictHostKeyChecking" not in written


def test_writing_again_replaces_the_block_where_it_stands_and_nothing_else() -> None:
    moved = "Host a\n    User b\n" + _cli_ssh.config_block("https://old.example.org") + THEIRS
    again = _cli_ssh.with_block(moved, _cli_ssh.config_block(URL))
    assert again == "Host a\n    User b\n" + _cli_ssh.config_block(URL) + THEIRS
    assert _cli_ssh.with_block(again, _cli_ssh.config_block(URL)) == again


def test_remove_takes_out_the_block_alone() -> None:
    written = _cli_ssh.with_block(THEIRS, _cli_ssh.config_block(URL))
    assert _cli_ssh.without_block(written) == THEIRS
    assert _cli_ssh.without_block(THEIRS) == THEIRS


def test_a_block_without_its_end_line_is_left_for_a_person_to_mend() -> None:
    broken = _cli_ssh.config_block(URL).replace(_cli_ssh.END + "\n", "") + THEIRS
    with pytest.raises(DevboxesError, match="has a begin line but no"):
        _cli_ssh.with_block(broken, _cli_ssh.config_block(URL))


def _box(**fields: object) -> Devbox:
    base: dict[str, object] = {
        "name": "atlas",
        "state": "ready",
        "preset": "small",
        "ttl_hours": 8,
        "expires_at": "2030-01-01T00:00:00Z",
        "created_at": "2029-12-31T00:00:00Z",
    }
    return Devbox.model_validate({**base, **fields})


def test_devbox_ssh_reaches_the_box_by_its_devbox_host_name_through_the_tunnel() -> None:
    argv = _cli_ssh.tunnel_argv(_box(ssh_user="dev"), ["--", "-L", "8888:localhost:8888"])
    assert argv[0] == "ssh"
    assert argv[argv.index("-o") + 1].startswith(f"ProxyCommand={sys.executable} -m devboxes_sdk")
    assert argv[-3:] == ["dev@atlas.devbox", "-L", "8888:localhost:8888"]
    with pytest.raises(DevboxesError, match="unusable SSH user"):
        _cli_ssh.tunnel_argv(_box(ssh_user="-oProxyCommand=x"), [])


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKkjqDdHrvbNz0BMqo9aYthg2EPqhEXqfGvE3oTSnGuu"


def _known_hosts(box: Devbox) -> list[str]:
    argv = _cli_ssh.tunnel_argv(box, [])
    return [
        argv[i + 1] for i, part in enumerate(argv) if part == "-o" and "KnownHosts" in argv[i + 1]
    ]


def test_the_one_published_host_key_goes_to_ssh_without_asking_the_controller_again() -> None:
    assert _known_hosts(_box(ssh_host_keys=[KEY])) == [f"KnownHostsCommand=/bin/echo %H {KEY}"]
    # Several keys, or one ssh's %-expansion would change, are asked for as editors ask.
    asked = f"KnownHostsCommand={sys.executable} -m devboxes_sdk known-hosts %H"
    assert _known_hosts(_box(ssh_host_keys=[KEY, KEY.replace("Gu", "Gv")])) == [asked]
    assert _known_hosts(_box(ssh_host_keys=[KEY + " %d"])) == [asked]
    assert _known_hosts(_box()) == []


def test_config_ssh_dry_run_and_remove_leave_other_lines_alone(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(THEIRS)
    removed = subprocess.run(
        [sys.executable, "-m", "devboxes_sdk", "config-ssh", "--remove", "--file", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.strip() == f"{config} has no devbox block"
    assert config.read_text() == THEIRS


def test_with_several_clusters_each_has_its_hosts_and_the_default_takes_the_rest() -> None:
    block = _cli_ssh.config_block(
        URL, [("lab-a", URL), ("lab-b", "https://devboxes.lab-b.example.org")]
    )
    hosts = [line for line in block.splitlines() if line.startswith("Host ")]
    assert hosts == ["Host *.lab-a.devbox", "Host *.lab-b.devbox", "Host *.devbox"]
    lab_b = block.split("Host *.lab-b.devbox\n", 1)[1].split("Host ", 1)[0]
    assert "DEVBOX_URL=https://devboxes.lab-b.example.org " in lab_b
    assert _cli_ssh.without_block("Host a\n" + block) == "Host a\n"
    argv = _cli_ssh.tunnel_argv(_box(ssh_user="dev"), [], "lab-b")
    assert argv[-1] == "dev@atlas.lab-b.devbox"


@pytest.mark.parametrize(
    ("host", "box"),
    [
        ("atlas.devbox", "atlas"),
        ("atlas.lab-b.devbox", "atlas"),
        ("atlas", "atlas"),
        ("atlas.example.com", "atlas.example.com"),
    ],
)
def test_a_host_name_names_its_box_with_or_without_its_cluster(host: str, box: str) -> None:
    from devboxes_sdk.tunnel import box_of_host, host_of_box

    assert box_of_host(host) == box
    assert box_of_host(host_of_box("atlas", "lab-b")) == "atlas"
