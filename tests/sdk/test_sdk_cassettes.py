"""The SDK replayed from cassettes recorded from the real controller on the testbed.

`make cassettes` re-records them (the controller runs on a fresh testbed namespace and the
Authorization header is scrubbed); the normal suite replays them with no server at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import requests
import yaml
from devboxes_testbed import L4, ROCM
from devboxes_testbed.controller import Controller, example_settings
from pydantic import BaseModel

from devboxes_sdk import Client, _transport, models
from devboxes_sdk import client as sdk_client
from devboxes_sdk.errors import (
    ApiError,
    AuthenticationError,
    BoxStopped,
    Conflict,
    NotFound,
    PermissionDenied,
    StartTimeout,
    ValidationError,
)
from devboxes_sdk.models import DevboxState

pytestmark = pytest.mark.cassette

REPLAY_URL = "http://127.0.0.1:9"
REPLAY_TOKEN = "replayed-requests-carry-no-real-token-0000"


def _only_the_devboxes_api(request: Any) -> Any:
    """Record the SDK's calls to the controller, never the test's own calls to Kubernetes."""
    if request.scheme != "http" or not request.path.startswith("/api/v1/"):
        return None
    return request


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, Any]:
    return {
        "filter_headers": ["authorization"],
        "match_on": ["method", "path", "stable_query", "body"],
        "decode_compressed_response": True,
        "before_record_request": _only_the_devboxes_api,
    }


@pytest.fixture(scope="module")
def recording(request: pytest.FixtureRequest) -> bool:
    # pytest-recording leaves the option None unless it is given on the command line.
    return (request.config.getoption("--record-mode") or "none") != "none"


class ReplayClock:
    """The SDK's clock while answers are replayed: a sleep passes at once and moves the
    clock on, so a wait's deadline and backoff take the turns they took when recorded."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


@pytest.fixture(autouse=True)
def replay_clock(recording: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not recording:
        clock = ReplayClock()
        monkeypatch.setattr(sdk_client, "time", clock)
        monkeypatch.setattr(_transport, "time", clock)


@pytest.fixture(scope="module")
def server(
    request: pytest.FixtureRequest, recording: bool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Controller | None]:
    """The real controller while recording, started before any cassette opens; else nothing."""
    if not recording:
        yield None
        return
    from kubernetes import client

    testbed = request.getfixturevalue("testbed")
    namespace = "sdk-cassettes"
    client.CoreV1Api(request.getfixturevalue("kube")).create_namespace(
        {"metadata": {"name": namespace}}
    )
    process = Controller(
        testbed.kubeconfig, example_settings(namespace), tmp_path_factory.mktemp("cassettes")
    ).start()
    yield process
    process.stop()


@pytest.fixture
def sdk(server: Controller | None) -> Iterator[Client]:
    if server is None:
        yield Client(REPLAY_URL, REPLAY_TOKEN)
        return
    client = Client(server.url, server.token)
    yield client
    for box in client.list():
        client.delete(box.name, purge=True)


class ServerWithoutWait(requests.Session):
    """Makes the controller look like a Devboxes server that predates the server-side wait:
    such a server ignores the wait query and never sends the header that announces it."""

    def request(  # type: ignore[override]
        self, method: str, url: str, params: dict[str, Any] | None = None, **kwargs: Any
    ) -> requests.Response:
        if params:
            params = {k: v for k, v in params.items() if k not in ("wait", "timeout")}
        response = super().request(method, url, params=params, **kwargs)
        response.headers.pop("X-Devboxes-Wait", None)
        return response


@pytest.mark.vcr
def test_every_verb(sdk: Client) -> None:
    assert sdk.whoami().user == "operator"
    catalog = sdk.capabilities().gpu
    assert catalog.enabled
    assert catalog.default_profile == L4
    assert [p.name for p in catalog.profiles if p.default] == [L4]
    box = sdk.create("tape", preset="medium", ttl_hours=4, gpu=ROCM)
    assert box.gpu is not None
    assert box.gpu.resource_name == "amd.com/gpu"
    ready = box.wait_ready(timeout=90)
    assert ready.state is DevboxState.READY
    assert ready.ssh_command is not None
    assert ready.created_at.tzinfo is not None
    assert [b.name for b in sdk.list()] == ["tape"]
    assert sdk.get("tape").preset == "medium"
    stopped = ready.stop()
    assert stopped.state is DevboxState.STOPPED
    with pytest.raises(BoxStopped):
        stopped.wait_ready(timeout=5)
    assert stopped.start().state is not DevboxState.STOPPED
    deleted = sdk.delete("tape", purge=True)
    assert deleted.purged
    assert "tape" in deleted.message


@pytest.mark.vcr
def test_every_error_class(
    sdk: Client, server: Controller | None, request: pytest.FixtureRequest
) -> None:
    with pytest.raises(NotFound) as missing:
        sdk.get("nobody")
    assert missing.value.status == 404
    sdk.create("dup")
    with pytest.raises(Conflict):
        sdk.create("dup")
    with pytest.raises(ValidationError) as invalid:
        sdk.create("odd", gpu="no-such-profile")
    assert invalid.value.status == 422
    assert L4 in str(invalid.value)
    if server is not None:
        from kubernetes import client

        kube = request.getfixturevalue("kube")
        client.CoreV1Api(kube).create_namespaced_resource_quota(
            server.settings["namespace"],
            {
                "metadata": {"name": "one-box"},
                "spec": {"hard": {"count/deployments.apps": "1"}},
            },
        )
    with pytest.raises(PermissionDenied) as quota:
        sdk.create("over-quota")
    assert "exceeded quota" in str(quota.value.detail)
    if server is not None:
        client.CoreV1Api(kube).delete_namespaced_resource_quota(
            "one-box", server.settings["namespace"]
        )
    with pytest.raises(ApiError) as other:
        sdk.request_json("PUT", "/api/v1/devboxes/dup")
    assert other.value.status == 405
    wrong = Client(sdk.url if server is None else server.url, "w" * 40)
    with pytest.raises(AuthenticationError):
        wrong.list()


@pytest.mark.vcr(allow_playback_repeats=True)
def test_start_timeout_says_why_the_box_waits(sdk: Client) -> None:
    for name in ("l4-one", "l4-two"):
        sdk.create(name, gpu=True).wait_ready(timeout=90)
    blocked = sdk.create("l4-three", gpu=True)
    with pytest.raises(StartTimeout) as timeout:
        blocked.wait_ready(timeout=6)
    assert timeout.value.state is DevboxState.STARTING
    assert "in line for a device" in (timeout.value.message or "")
    assert timeout.value.reason == "Waiting for a free NVIDIA L4: 0 of 2 free, 1st in line"
    assert timeout.value.reason in str(timeout.value)


@pytest.mark.vcr
def test_waiting_falls_back_to_polling_on_servers_without_the_wait(
    server: Controller | None,
) -> None:
    session = ServerWithoutWait()
    if server is None:
        client = Client(REPLAY_URL, REPLAY_TOKEN, session=session)
    else:
        client = Client(server.url, server.token, session=session)
    seen: list[DevboxState] = []
    box = client.create("poller")
    ready = client.wait_ready("poller", timeout=90, on_update=lambda b: seen.append(b.state))
    assert ready.state is DevboxState.READY
    assert seen[0] is DevboxState.STARTING
    assert seen[-1] is DevboxState.READY
    assert box.name == "poller"
    client.delete("poller", purge=True)


CASSETTES = Path(__file__).parent / "cassettes" / "test_sdk_cassettes"


def _model_for(method: str, path: str, status: int) -> type[BaseModel]:
    """The wire model that a recorded response must still parse as."""
    if status >= 400:
        return models.ErrorBody
    route = path.removeprefix("/api/v1/").split("/")
    routes: dict[tuple[str, str, int], type[BaseModel]] = {
        ("GET", "whoami", 1): models.WhoAmI,
        ("GET", "capabilities", 1): models.Capabilities,
        ("GET", "devboxes", 1): models.DevboxList,
        ("POST", "devboxes", 1): models.Devbox,
        ("GET", "devboxes", 2): models.Devbox,
        ("POST", "devboxes", 3): models.Devbox,
        ("DELETE", "devboxes", 2): models.DeleteResult,
    }
    model = routes.get((method, route[0], len(route)))
    if model is None:
        pytest.fail(f"a cassette holds a route no model describes: {method} {path}")
    return model


def test_every_recorded_body_still_parses_with_the_current_models() -> None:
    interactions = [
        interaction
        for cassette in sorted(CASSETTES.glob("*.yaml"))
        for interaction in yaml.safe_load(cassette.read_text())["interactions"]
    ]
    assert len(interactions) >= 30, "the cassettes are missing: run `make cassettes`"
    for interaction in interactions:
        request, response = interaction["request"], interaction["response"]
        model = _model_for(
            request["method"], urlparse(request["uri"]).path, response["status"]["code"]
        )
        model.model_validate_json(response["body"]["string"])
