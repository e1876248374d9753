"""The server extension serving every cluster of the SDK configuration file: two real
controllers on two testbeds (lab-a, whose one ``pool-gpu`` device a box holds, and the
conftest's lab-b, whose one is free), and a third one frozen. Reads of every cluster at once keep
each cluster's answer apart, a frozen cluster is one entry, box actions go to the box's
cluster, and a create with ``cluster=auto`` lands where the device is free."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from devboxes_testbed.controller import Controller
from labclusters import HOLDER, PROFILE, holding_cluster, write_config
from support import DevicePool, StartController
from tornado.httpclient import HTTPResponse

from devboxes_sdk import Client
from devboxes_sdk.errors import NotFound

pytest_plugins = ["pytest_jupyter.jupyter_server"]

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def lab_a(start_controller: StartController, pool: DevicePool, namespace: str) -> Controller:
    return holding_cluster(start_controller, pool, namespace)


@pytest.fixture
def clusters(lab_a: Controller, lab_b: Controller) -> dict[str, Controller]:
    """The clusters of the configuration file, in its order; a test may add more."""
    return {"lab-a": lab_a, "lab-b": lab_b}


@pytest.fixture
def jp_server_config(
    clusters: dict[str, Controller], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    # The server finds the clusters in the SDK configuration file, as `devbox` does;
    # nothing names one controller.
    for key in ("DEVBOX_URL", "DEVBOX_TOKEN", "DEVBOX_TOKEN_FILE", "DEVBOX_CLUSTER"):
        monkeypatch.delenv(key, raising=False)
    config = write_config(tmp_path / "devbox" / "config.toml", clusters)
    monkeypatch.setenv("DEVBOX_CONFIG", str(config))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return {
        "ServerApp": {"jpserver_extensions": {"devboxes_jupyter": True}},
        "DevboxesJupyterApp": {"devbox_kernels": False, "poll_interval": 2},
    }


def _json(response: HTTPResponse) -> Any:
    return json.loads(response.body)


async def _get(fetch: Fetch, *path: str, **params: str) -> Any:
    return _json(await fetch("devboxes", "api", *path, params=params or None))


def _tokens(clusters: dict[str, Controller]) -> list[str]:
    return [controller.token for controller in clusters.values()]


async def _watch_until(fetch: Fetch, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The watch view once ``done`` says it shows what the test waits for."""
    after, deadline = -1, time.monotonic() + 60
    while True:
        view = await _get(fetch, "watch", after=str(after), timeout="10")
        if done(view):
            return view
        assert time.monotonic() < deadline, f"the watch never showed it: {view['clusters']}"
        after = view["version"]


async def test_every_cluster_is_read_at_once_with_its_own_answer_and_counts(
    jp_fetch: Fetch, clusters: dict[str, Controller]
) -> None:
    with Client(clusters["lab-b"].url, clusters["lab-b"].token) as b:
        b.create("only-b")
    try:
        listed = await _get(jp_fetch, "devboxes", cluster="*")
        assert listed["errors"] == []
        assert listed["notes"] == []
        assert [
            (answer["cluster"], [box["name"] for box in answer["value"]["items"]])
            for answer in listed["answers"]
        ] == [("lab-a", [HOLDER]), ("lab-b", ["only-b"])]

        # Each cluster's own count of the same profile: never summed.
        counted = await _get(jp_fetch, "gpu", "availability", cluster="*")
        free = {
            answer["cluster"]: next(
                (p["available"], p["capacity"])
                for p in answer["value"]["profiles"]
                if p["name"] == PROFILE
            )
            for answer in counted["answers"]
        }
        assert free == {"lab-a": (0, 1), "lab-b": (1, 1)}
        one = await _get(jp_fetch, "gpu", "availability", cluster="lab-b", preset="small")
        assert [p["available"] for p in one["profiles"] if p["name"] == PROFILE] == [1]

        catalogs = await _get(jp_fetch, "capabilities", cluster="*")
        assert [(a["cluster"], a["value"]["cluster"]["name"]) for a in catalogs["answers"]] == [
            ("lab-a", "lab-a"),
            ("lab-b", "lab-b"),
        ]
        people = await _get(jp_fetch, "whoami", cluster="*")
        assert [(a["cluster"], a["value"]["user"]) for a in people["answers"]] == [
            ("lab-a", "operator"),
            ("lab-b", "operator"),
        ]
        # Without a cluster, the default one (the file's first), as Client() chooses it.
        assert [box["name"] for box in (await _get(jp_fetch, "devboxes"))["items"]] == [HOLDER]
        only = await _get(jp_fetch, "devboxes", cluster="lab-b")
        assert [box["name"] for box in only["items"]] == ["only-b"]

        # The watch carries every cluster, in the file's order; the rest is the default's.
        view = await _watch_until(
            jp_fetch, lambda v: all(c["items"] is not None for c in v["clusters"])
        )
        assert [(c["name"], c["default"], c["error"]) for c in view["clusters"]] == [
            ("lab-a", True, None),
            ("lab-b", False, None),
        ]
        by_name = {c["name"]: c for c in view["clusters"]}
        assert [box["name"] for box in by_name["lab-b"]["items"]] == ["only-b"]
        assert by_name["lab-b"]["capabilities"]["gpu"]["default_profile"] == PROFILE
        assert by_name["lab-b"]["dashboard_url"] == clusters["lab-b"].url
        assert [box["name"] for box in view["items"]] == [HOLDER]
        for body in (listed, counted, catalogs, people, view):
            assert not any(token in json.dumps(body) for token in _tokens(clusters))
    finally:
        with Client(clusters["lab-b"].url, clusters["lab-b"].token) as b:
            b.delete("only-b", purge=True)


async def test_box_actions_go_to_the_cluster_named_and_auto_goes_where_a_device_is_free(
    jp_fetch: Fetch, clusters: dict[str, Controller]
) -> None:
    a = Client(clusters["lab-a"].url, clusters["lab-a"].token)
    b = Client(clusters["lab-b"].url, clusters["lab-b"].token)

    async def post(*path: str, **params: str) -> HTTPResponse:
        return await jp_fetch(
            "devboxes",
            "api",
            *path,
            method="POST",
            body=json.dumps({"name": "twin"} if path == ("devboxes",) else {}),
            params=params,
            raise_error=False,
        )

    try:
        made = await post("devboxes", cluster="lab-b")
        assert made.code == 201, made.body
        body = _json(made)
        assert (body["cluster"], body["reason"], body["box"]["name"]) == (
            "lab-b",
            "lab-b: as asked",
            "twin",
        )
        a.create("twin")
        # The same name on two clusters: each action goes to the cluster it names.
        stopped = await post("devboxes", "twin", "stop", cluster="lab-b")
        assert stopped.code == 200, stopped.body
        assert b.get("twin").state == "stopped"
        assert a.get("twin").state != "stopped"
        read = await _get(jp_fetch, "devboxes", "twin", cluster="lab-b")
        assert read["state"] == "stopped"
        gone = await jp_fetch(
            "devboxes",
            "api",
            "devboxes",
            "twin",
            method="DELETE",
            params={"cluster": "lab-b", "purge": "true"},
        )
        assert _json(gone)["purged"] is True
        assert a.get("twin").name == "twin"

        # auto: lab-a's one device is held, lab-b's is free.
        placed = await jp_fetch(
            "devboxes",
            "api",
            "devboxes",
            method="POST",
            body=json.dumps({"name": "placed", "gpu": {"profile": PROFILE}}),
            params={"cluster": "auto"},
        )
        assert placed.code == 201
        where = _json(placed)
        assert (where["cluster"], where["reason"]) == ("lab-b", f"lab-b: {PROFILE} has 1 free now")
        box = b.get("placed")
        assert box.gpu is not None
        assert box.gpu.profile == PROFILE
        assert "placed" not in [box.name for box in a.list()]
    finally:
        for client, names in ((a, ["twin"]), (b, ["twin", "placed"])):
            for name in names:
                # Gone already, or never made.
                with contextlib.suppress(NotFound):
                    client.delete(name, purge=True)
        a.close()
        b.close()


@pytest.mark.parametrize(
    ("method", "path", "cluster", "message"),
    [
        ("GET", "devboxes", "nowhere", "no cluster 'nowhere' (configured: lab-a, lab-b)"),
        ("GET", "devboxes", "auto", "'auto' goes with a create; name one cluster"),
        ("POST", "devboxes/atlas/start", "*", "'*' (every cluster) is for reading; name one"),
        ("GET", "devboxes/atlas", "*", "'*' (every cluster) is for reading; name one cluster"),
        ("POST", "devboxes", "*", "'*' (every cluster) is for reading; name one cluster"),
    ],
)
async def test_a_cluster_the_route_cannot_take_is_refused_before_any_controller(
    jp_fetch: Fetch, method: str, path: str, cluster: str, message: str
) -> None:
    response = await jp_fetch(
        "devboxes",
        "api",
        *path.split("/"),
        method=method,
        body=json.dumps({"name": "atlas"}) if method == "POST" else None,
        params={"cluster": cluster},
        raise_error=False,
    )
    assert response.code == 422
    [error] = _json(response)["detail"]
    assert error["loc"] == ["query", "cluster"]
    assert error["msg"].startswith(message)


@pytest.fixture
def frozen(start_controller: StartController) -> Iterator[Controller]:
    """A third controller, frozen by the test (and thawed after it)."""
    controller: Controller = start_controller()
    yield controller
    os.kill(controller.pid, signal.SIGCONT)


class TestFrozen:
    @pytest.fixture
    def clusters(self, lab_a: Controller, lab_b: Controller, frozen: Controller) -> Any:
        return {"lab-a": lab_a, "lab-c": frozen, "lab-b": lab_b}

    async def test_a_frozen_cluster_is_one_entry_and_the_others_answer(
        self, jp_fetch: Fetch, clusters: dict[str, Controller]
    ) -> None:
        os.kill(clusters["lab-c"].pid, signal.SIGSTOP)
        listed = await _get(jp_fetch, "devboxes", cluster="*")
        assert [a["cluster"] for a in listed["answers"]] == ["lab-a", "lab-b"]
        assert listed["errors"] == [{"cluster": "lab-c", "message": "did not answer in 3 s"}]

        view = await _watch_until(
            jp_fetch,
            lambda v: all(c["items"] is not None or c["error"] for c in v["clusters"]),
        )
        by_name = {c["name"]: c for c in view["clusters"]}
        assert list(by_name) == ["lab-a", "lab-c", "lab-b"]
        assert by_name["lab-c"]["error"].startswith("did not answer in ")
        assert by_name["lab-c"]["items"] is None
        assert [box["name"] for box in by_name["lab-a"]["items"]] == [HOLDER]
        assert by_name["lab-b"]["error"] is None
        # The other clusters' boxes stay live meanwhile: the default cluster is not stale.
        assert view["error"] is None

        # Thawed, lab-c is the session's testbed again, lab-a's cluster: shown once.
        os.kill(clusters["lab-c"].pid, signal.SIGCONT)
        view = await _watch_until(jp_fetch, lambda v: len(v["clusters"]) == 2)
        assert [c["name"] for c in view["clusters"]] == ["lab-a", "lab-b"]
        assert view["notes"] == ["lab-c is the same cluster as lab-a: shown once, as lab-a"]
