"""Several clusters, one `devbox`: two controllers on two testbeds (the second kwok only),
each serving a GPU profile of the same name on devices of its own. Merged listings with
a CLUSTER column, a frozen controller as one line, one cluster under two URLs shown once,
names across clusters, and ``create --cluster auto`` landing where the device is free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from devboxes_testbed.controller import Controller
from support import DevicePool, named_cluster, wait_for

from devboxes_sdk import Client

VENV = Path(os.environ.get("VIRTUAL_ENV", Path(__file__).resolve().parents[2] / ".venv"))
DEVBOX_SCRIPT = str(VENV / "bin" / "devbox")
PROFILE = DevicePool.PROFILE


@pytest.fixture
def lab_a(start_controller: Any, pool: DevicePool, namespace: str) -> Controller:
    """A controller on the session's testbed whose one pool device is taken by a box."""
    controller: Controller = start_controller(named_cluster(pool.settings(namespace), "lab-a"))
    with Client(controller.url, controller.token) as client:
        client.create("holder", gpu=PROFILE)

        def taken() -> bool:
            """lab-a's only pool device is held by its box"""
            found = client.gpu.availability().profile(PROFILE)
            return found is not None and found.available == 0

        wait_for(taken)
    return controller


def write_config(home: Path, clusters: dict[str, tuple[str, str]]) -> dict[str, str]:
    """An environment whose configuration file lists ``clusters`` (name: url, token)."""
    text = "".join(
        f'[clusters.{name}]\nurl = "{url}"\ntoken = "{token}"\n\n'
        for name, (url, token) in clusters.items()
    )
    path = home / "config.toml"
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return {"DEVBOX_CONFIG": str(path), "HOME": str(home)}


def devbox(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEVBOX_")},
        **env,
    }
    return subprocess.run(
        [DEVBOX_SCRIPT, *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )


def lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_every_cluster_is_listed_with_its_own_rows_and_names_say_which(
    lab_a: Controller, lab_b: Controller, tmp_path: Path
) -> None:
    env = write_config(
        tmp_path, {"lab-a": (lab_a.url, lab_a.token), "lab-b": (lab_b.url, lab_b.token)}
    )
    with Client(lab_b.url, lab_b.token) as b:
        b.create("holder")
        b.create("only-b")
    try:
        listed = devbox(env, "list")
        assert listed.returncode == 0, listed.stderr
        rows = lines(listed.stdout)
        assert rows[0][:2] == ["CLUSTER", "NAME"]
        assert sorted((row[0], row[1]) for row in rows[1:]) == [
            ("lab-a", "holder"),
            ("lab-b", "holder"),
            ("lab-b", "only-b"),
        ]
        as_json = json.loads(devbox(env, "list", "--json").stdout)
        assert sorted((i["cluster"], i["name"]) for i in as_json["items"]) == [
            ("lab-a", "holder"),
            ("lab-b", "holder"),
            ("lab-b", "only-b"),
        ]
        assert as_json["errors"] == []
        quiet = devbox(env, "list", "-q").stdout.split()
        assert sorted(quiet) == ["holder@lab-a", "holder@lab-b", "only-b@lab-b"]

        # The same profile on both, each with its own count: never summed.
        profiles = json.loads(devbox(env, "gpu", "profiles", "--json").stdout)
        free = {
            c["cluster"]: next(p for p in c["availability"]["profiles"] if p["name"] == PROFILE)
            for c in profiles["clusters"]
        }
        assert {c: (f["available"], f["capacity"]) for c, f in free.items()} == {
            "lab-a": (0, 1),
            "lab-b": (1, 1),
        }
        table = lines(devbox(env, "gpu", "profiles").stdout)
        assert [row[:2] for row in table[1:]] == [
            ["lab-a", f"{PROFILE}"],
            ["lab-b", f"{PROFILE}"],
        ]

        ambiguous = devbox(env, "status", "holder")
        assert ambiguous.returncode == 2
        assert "holder is a box on 2 clusters: say holder@lab-a or holder@lab-b" in (
            ambiguous.stderr
        )
        only = devbox(env, "status", "only-b", "--json")
        assert only.returncode == 0, only.stderr
        assert json.loads(only.stdout)["name"] == "only-b"
        stopped = devbox(env, "stop", "holder@lab-b", "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["state"] == "stopped"
        with Client(lab_a.url, lab_a.token) as a:
            assert a.get("holder").state != "stopped"
        missing = devbox(env, "status", "nowhere")
        assert missing.returncode == 1
        assert "no box nowhere on any cluster that answered" in missing.stderr
        ssh_config = devbox(env, "config-ssh", "--dry-run", "--file", str(tmp_path / "ssh"))
        assert ssh_config.returncode == 0, ssh_config.stderr
        sections = ssh_config.stdout.split("Host ")[1:]
        assert [section.split("\n", 1)[0] for section in sections] == [
            "*.lab-a.devbox",
            "*.lab-b.devbox",
            "*.devbox",
        ]
        assert f"DEVBOX_URL={lab_b.url} " in sections[1]
        assert f"DEVBOX_URL={lab_a.url} " in sections[2]
        purge = devbox(env, "volumes", "purge", "holder", "--yes")
        assert purge.returncode == 2
        assert "say which holds the volume, holder@CLUSTER (lab-a, lab-b)" in purge.stderr
    finally:
        with Client(lab_b.url, lab_b.token) as b:
            for name in ("holder", "only-b"):
                b.delete(name, purge=True)


def test_a_frozen_cluster_is_one_line_and_the_others_still_answer(
    lab_a: Controller, lab_b: Controller, start_controller: Any, tmp_path: Path
) -> None:
    frozen: Controller = start_controller()
    env = write_config(
        tmp_path,
        {
            "lab-a": (lab_a.url, lab_a.token),
            "lab-c": (frozen.url, frozen.token),
            "lab-b": (lab_b.url, lab_b.token),
        },
    )
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        listed = devbox(env, "list")
        profiles = devbox(env, "gpu", "profiles", "--json")
        volumes = devbox(env, "volumes", "--json")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == "lab-c: did not answer in 3 s\n"
    assert {row[0] for row in lines(listed.stdout)[1:]} == {"lab-a"}
    # Silent a moment ago: the next commands give it a short time, and say so.
    assert profiles.returncode == 0, profiles.stderr
    answer = json.loads(profiles.stdout)
    assert [c["cluster"] for c in answer["clusters"]] == ["lab-a", "lab-b"]
    [error] = answer["errors"]
    assert error["cluster"] == "lab-c"
    assert error["error"].startswith("did not answer in 0.5 s (nor in 3 s at ")
    assert [e["cluster"] for e in json.loads(volumes.stdout)["errors"]] == ["lab-c"]
    # Answering again, it is asked in full; one testbed under two names is shown once.
    again = devbox(env, "list", "--json")
    assert json.loads(again.stdout)["errors"] == []
    assert again.stderr == "note: lab-c is the same cluster as lab-a: shown once, as lab-a\n"


def test_one_cluster_under_two_urls_is_shown_once(lab_a: Controller, tmp_path: Path) -> None:
    other_url = lab_a.url.replace("127.0.0.1", "localhost")
    assert other_url != lab_a.url
    env = write_config(
        tmp_path, {"lab-a": (lab_a.url, lab_a.token), "again": (other_url, lab_a.token)}
    )
    listed = devbox(env, "list", "-q")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["holder@lab-a"]
    assert listed.stderr == "note: again is the same cluster as lab-a: shown once, as lab-a\n"
    profiles = json.loads(devbox(env, "gpu", "profiles", "--json").stdout)
    assert [c["cluster"] for c in profiles["clusters"]] == ["lab-a"]


def test_create_auto_lands_where_the_device_is_free_on_the_first_try(
    lab_a: Controller, lab_b: Controller, tmp_path: Path
) -> None:
    env = write_config(
        tmp_path, {"lab-a": (lab_a.url, lab_a.token), "lab-b": (lab_b.url, lab_b.token)}
    )
    made = devbox(
        env, "create", "auto-box", "--gpu-profile", PROFILE, "--cluster", "auto", "--no-wait"
    )
    try:
        assert made.returncode == 0, made.stderr
        assert f"note: creating auto-box on lab-b: {PROFILE} has 1 free now" in made.stderr
        with Client(lab_b.url, lab_b.token) as b:
            box = b.get("auto-box")
            assert box.gpu is not None
            assert box.gpu.profile == PROFILE
        with Client(lab_a.url, lab_a.token) as a:
            assert [box.name for box in a.list()] == ["holder"]
        # Without --cluster a create goes to the default cluster, and says so.
        default = devbox(env, "create", "plain", "--no-wait")
        assert default.returncode == 0, default.stderr
        assert "note: creating plain on lab-a, the default cluster" in default.stderr
        refused = devbox(env, "start", "plain", "--cluster", "auto")
        assert refused.returncode == 2
        assert "--cluster auto goes with create; name a cluster" in refused.stderr
    finally:
        with Client(lab_b.url, lab_b.token) as b:
            b.delete("auto-box", purge=True)
