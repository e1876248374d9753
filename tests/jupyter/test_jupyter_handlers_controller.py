"""The server extension's routes against the real controller on the testbed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tornado.httpclient import HTTPResponse

from devboxes_sdk.client import Client

pytest_plugins = ["pytest_jupyter.jupyter_server"]

Fetch = Callable[..., Awaitable[HTTPResponse]]
READY_TIMEOUT = 180


@pytest.fixture
def jp_server_config(controller_env: dict[str, str]) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"devboxes_jupyter": True}},
        "DevboxesJupyterApp": {
            "controller_url": controller_env["DEVBOX_URL"],
            "token": controller_env["DEVBOX_TOKEN"],
        },
    }


def _json(response: HTTPResponse) -> Any:
    return json.loads(response.body)


async def _create(fetch: Fetch, cleanup: list[str], **body: Any) -> HTTPResponse:
    name = body.setdefault("name", f"jh-{uuid.uuid4().hex[:8]}")
    cleanup.append(name)
    return await fetch(
        "devboxes", "api", "devboxes", method="POST", body=json.dumps(body), raise_error=False
    )


async def test_capabilities_match_the_controller(
    jp_fetch: Fetch, controller_client: Client
) -> None:
    response = await jp_fetch("devboxes", "api", "capabilities")
    body = _json(response)
    expected = controller_client.capabilities().gpu
    assert body["gpu"]["enabled"] == expected.enabled
    assert [p["name"] for p in body["gpu"]["profiles"]] == [p.name for p in expected.profiles]


async def test_gpu_box_lifecycle_through_the_extension(
    jp_fetch: Fetch, controller_client: Client, cleanup: list[str]
) -> None:
    catalog = controller_client.capabilities().gpu
    assert catalog.enabled, "the session's controller always has GPU acceleration on"
    assert catalog.default_profile is not None
    profile = catalog.default_profile

    created = await _create(jp_fetch, cleanup, gpu={"profile": profile}, preset="medium")
    assert created.code == 201, created.body
    box = _json(created)
    name = box["name"]
    assert box["gpu"]["profile"] == profile

    listed = _json(await jp_fetch("devboxes", "api", "devboxes"))
    assert name in [item["name"] for item in listed["items"]]

    state = box["state"]
    for _ in range(READY_TIMEOUT // 20):
        if state in ("ready", "degraded"):
            break
        waited = await jp_fetch(
            "devboxes",
            "api",
            "devboxes",
            name,
            params={"wait": "ready", "timeout": "20"},
            request_timeout=60,
        )
        state = _json(waited)["state"]
    assert state == "ready"
    assert controller_client.get(name).ssh_command

    stopped = _json(
        await jp_fetch("devboxes", "api", "devboxes", name, "stop", method="POST", body=b"")
    )
    assert stopped["state"] == "stopped"
    assert stopped["gpu"]["profile"] == profile

    started = _json(
        await jp_fetch("devboxes", "api", "devboxes", name, "start", method="POST", body=b"")
    )
    assert started["state"] != "stopped"

    deleted = _json(
        await jp_fetch(
            "devboxes", "api", "devboxes", name, method="DELETE", params={"purge": "true"}
        )
    )
    assert deleted["name"] == name
    assert deleted["purged"] is True
    missing = await jp_fetch("devboxes", "api", "devboxes", name, raise_error=False)
    assert missing.code == 404
    assert _json(missing)["detail"]


async def test_duplicate_name_is_409_from_the_controller(
    jp_fetch: Fetch, cleanup: list[str]
) -> None:
    first = await _create(jp_fetch, cleanup)
    assert first.code == 201, first.body
    again = await _create(jp_fetch, cleanup, name=_json(first)["name"])
    assert again.code == 409
    assert _json(again)["detail"]


async def test_unknown_profile_is_422_naming_the_available_ones(
    jp_fetch: Fetch, controller_client: Client, cleanup: list[str]
) -> None:
    catalog = controller_client.capabilities().gpu
    assert catalog.enabled, "the session's controller always has GPU acceleration on"
    response = await _create(jp_fetch, cleanup, gpu={"profile": "no-such-gpu"})
    assert response.code == 422
    [error] = _json(response)["detail"]
    assert error["loc"] == ["body", "gpu", "profile"]
    assert all(profile.name in error["msg"] for profile in catalog.profiles)


async def test_a_create_names_its_environment_and_one_that_does_not_fit_is_422_at_image(
    jp_fetch: Fetch, cleanup: list[str]
) -> None:
    # The example CUDA image runs on NVIDIA profiles only, so not on CPU only.
    refused = await _create(jp_fetch, cleanup, image="cuda")
    assert refused.code == 422
    [error] = _json(refused)["detail"]
    assert error["loc"] == ["body", "image"]
    assert "cuda" in error["msg"]

    created = await _create(jp_fetch, cleanup, image="web-preview")
    assert created.code == 201, created.body
    image = _json(created)["image"]
    assert (image["profile"], image["mode"]) == ("web-preview", "sidecar")
