"""The /api/v1 contract over real HTTP: every route, status code and body shape.

Each body is checked twice: against the SDK models (the contract's single source) and
against the schema the controller itself publishes at /openapi.json, so the two cannot
drift apart unnoticed.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jsonschema
import pytest
import requests
from devboxes_testbed import L4, L4_SHARED, MIG, ROCM
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from pydantic import BaseModel
from support import Api, StartController, wait_for

from devboxes_sdk.models import (
    Capabilities,
    DeleteResult,
    Devbox,
    DevboxList,
    DevboxState,
    ErrorBody,
    GpuAvailability,
    Health,
    WhoAmI,
)

M = TypeVar("M", bound=BaseModel)
BOXES = "/api/v1/devboxes"
# Values from testbed/settings.yaml that discovery must never reveal.
HIDDEN_VALUES = (
    "devboxes/workspace-cuda",
    "devboxes/workspace-rocm",
    "runtime",
    "accelerator",
    "toleration",
    "nodeSelector",
    "node_selector",
    "supplemental",
    "NoSchedule",
    "44",
    "109",
    # Of the image profiles: references, pull policy, user, command and resources.
    "devboxes/workspace",
    "IfNotPresent",
    "65534",
    "http.server",
    "128Mi",
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class CheckedApi(Api):
    """The shared client, each answer also checked against the controller's OpenAPI document."""

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller)
        response = self.session.get(f"{controller.url}/openapi.json", timeout=10)
        assert response.status_code == 200, response.text
        self.openapi: dict[str, Any] = response.json()
        self.templates = {
            template: re.compile(re.sub(r"\{\w+\}", "[^/]+", template))
            for template in self.openapi["paths"]
        }

    def request(
        self, method: str, path: str, timeout: float = 90, **kwargs: Any
    ) -> requests.Response:
        response = super().request(method, path, timeout, **kwargs)
        self.check_schema(method, f"/api/v1{path}", response)
        return response

    def check_schema(self, method: str, path: str, response: requests.Response) -> None:
        (template,) = [t for t, pattern in self.templates.items() if pattern.fullmatch(path)]
        operation = self.openapi["paths"][template][method.lower()]
        documented = operation["responses"]
        code = str(response.status_code)
        assert code in documented, f"{method} {template} answered undocumented {code}"
        schema = documented[code]["content"]["application/json"]["schema"]
        jsonschema.validate(response.json(), {**schema, "components": self.openapi["components"]})


def parse(model: type[M], response: requests.Response, status: int) -> M:
    assert response.status_code == status, response.text
    return model.model_validate_json(response.content)


def field_errors(response: requests.Response) -> list[dict[str, Any]]:
    """The 422 ``detail`` list, each entry checked for exactly type, loc and msg."""
    body = parse(ErrorBody, response, 422)
    assert isinstance(body.detail, list), body
    entries: list[dict[str, Any]] = response.json()["detail"]
    for entry in entries:
        assert set(entry) == {"type", "loc", "msg"}, entry
    return entries


@pytest.fixture(scope="module")
def api(controller: Controller) -> CheckedApi:
    return CheckedApi(controller)


@pytest.fixture
def boxes(api: CheckedApi) -> Iterator[Callable[[dict[str, Any]], Devbox]]:
    """Create boxes through the API; every box created here is purged afterwards."""
    made: list[str] = []

    def create(body: dict[str, Any]) -> Devbox:
        box = parse(Devbox, api.create(body), 201)
        made.append(box.name)
        return box

    yield create
    api.purge(*made)


def test_health_and_ready_answer_without_a_token(controller: Controller) -> None:
    health = requests.get(f"{controller.url}/health", timeout=10)
    assert parse(Health, health, 200).status == "ok"
    ready = requests.get(f"{controller.url}/ready", timeout=10)
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"


def test_openapi_documents_every_route(api: CheckedApi) -> None:
    operations = {
        (method.upper(), path) for path, item in api.openapi["paths"].items() for method in item
    }
    assert operations == {
        ("GET", "/api/v1/whoami"),
        ("GET", "/api/v1/capabilities"),
        ("GET", "/api/v1/gpu/availability"),
        ("GET", "/api/v1/gpu/doctor"),
        ("GET", "/api/v1/gpu/when"),
        ("GET", "/api/v1/gpu/when/{profile}"),
        ("GET", "/api/v1/gpu/timeline"),
        ("GET", BOXES),
        ("POST", BOXES),
        ("GET", f"{BOXES}/{{name}}"),
        ("DELETE", f"{BOXES}/{{name}}"),
        ("POST", f"{BOXES}/{{name}}/start"),
        ("POST", f"{BOXES}/{{name}}/stop"),
        ("POST", f"{BOXES}/{{name}}/extend"),
        ("GET", "/api/v1/volumes"),
        ("DELETE", "/api/v1/volumes/{name}"),
        ("GET", "/api/v1/keys"),
        ("POST", "/api/v1/keys"),
        ("DELETE", "/api/v1/keys"),
        ("GET", "/api/v1/bookings"),
        ("GET", "/api/v1/usage"),
        ("POST", "/api/v1/bookings"),
        ("DELETE", "/api/v1/bookings/{name}"),
    }


def test_whoami(api: CheckedApi) -> None:
    who = parse(WhoAmI, api.request("GET", "/whoami"), 200)
    assert (who.user, who.mode, who.admin) == ("operator", "operator", True)


def test_capabilities_list_the_example_profiles(api: CheckedApi) -> None:
    response = api.request("GET", "/capabilities")
    caps = parse(Capabilities, response, 200)
    assert caps.gpu.enabled
    assert caps.gpu.default_profile == L4
    assert [p.name for p in caps.gpu.profiles] == [
        L4,
        MIG,
        ROCM,
        L4_SHARED,
    ]
    assert [p.name for p in caps.gpu.profiles if p.default] == [L4]
    l4 = caps.gpu.profiles[0]
    assert (l4.display_name, l4.resource_name, l4.count) == ("NVIDIA L4", "nvidia.com/gpu", 1)


def test_capabilities_hide_images_runtime_groups_and_scheduling(api: CheckedApi) -> None:
    text = api.request("GET", "/capabilities").text
    for value in HIDDEN_VALUES:
        assert value.lower() not in text.lower(), f"capabilities reveal {value!r}: {text}"
    assert '"nvidia"' not in text, "the RuntimeClass name leaks"
    for profile in json.loads(text)["gpu"]["profiles"]:
        assert set(profile) == {
            "name",
            "display_name",
            "description",
            "kind",
            "resource_name",
            "devices",
            "count",
            "default",
        }


def test_capabilities_list_the_image_profiles_by_what_they_are(api: CheckedApi) -> None:
    images = api.request("GET", "/capabilities").json()["images"]
    assert images == {
        "enabled": True,
        "profiles": [
            {
                "name": "python",
                "display_name": "Python workspace",
                "description": "The standard workspace image, pinned, for boxes without a GPU",
                "mode": "workspace",
                "ports": [{"name": "notebook", "container_port": 8888, "protocol": "TCP"}],
                "home_folder": None,
            },
            {
                "name": "cuda",
                "display_name": "CUDA 12.8 workspace",
                "description": "The workspace with CUDA 12.8, on NVIDIA GPUs only",
                "mode": "workspace",
                "ports": [],
                "home_folder": None,
            },
            {
                "name": "web-preview",
                "display_name": "Web preview",
                "description": "Serves the box's ~/public folder on port 8080, beside the "
                "workspace",
                "mode": "sidecar",
                "ports": [{"name": "http", "container_port": 8080, "protocol": "TCP"}],
                "home_folder": "public",
            },
        ],
    }


def test_a_box_with_an_image_profile_reports_and_runs_it(
    api: CheckedApi, boxes: Callable[[dict[str, Any]], Devbox], kube: Any
) -> None:
    sidecar = boxes({"name": unique("web"), "image": "web-preview"})
    assert sidecar.image is not None
    assert sidecar.gpu is None
    assert api.get(sidecar.name).json()["image"] == {
        "profile": "web-preview",
        "display_name": "Web preview",
        "mode": "sidecar",
        "ports": [{"name": "http", "container_port": 8080, "protocol": "TCP"}],
        "home_folder": "public",
    }
    cuda = boxes({"name": unique("cuda"), "gpu": {"profile": MIG}, "image": "cuda"})
    assert cuda.image is not None
    assert (cuda.image.profile, cuda.image.mode) == ("cuda", "workspace")
    plain = boxes({"name": unique("plain")})
    assert api.get(plain.name).json()["image"] is None

    apps = client.AppsV1Api(kube)
    namespace = api.controller.settings["namespace"]
    pod = apps.read_namespaced_deployment(f"devbox-{sidecar.name}", namespace).spec.template.spec
    assert [c.name for c in pod.containers] == ["devbox", "environment"]
    environment = pod.containers[1]
    assert (environment.image, environment.security_context.run_as_non_root) == (
        "devboxes/workspace:0.1.0",
        True,
    )
    assert environment.resources.limits == {"cpu": "250m", "memory": "128Mi"}
    # Of the box's volumes, the sidecar has the folder it serves, read-only.
    (served,) = environment.volume_mounts
    assert (served.name, served.sub_path, served.mount_path, served.read_only) == (
        "home",
        "public",
        "/srv",
        True,
    )
    main = apps.read_namespaced_deployment(f"devbox-{cuda.name}", namespace)
    assert main.spec.template.spec.containers[0].image == "devboxes/workspace-cuda:12.8"
    waited = parse(Devbox, api.get(sidecar.name, wait="ready", timeout=120), 200)
    assert waited.state == DevboxState.READY


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"image": "jupyter"},
            "unknown image profile 'jupyter'; available image profiles: python, cuda, web-preview",
        ),
        (
            {"image": "devboxes/workspace:0.1.0"},
            "unknown image profile 'devboxes/workspace:0.1.0'; available image profiles: "
            "python, cuda, web-preview",
        ),
        (
            {"image": "cuda"},
            "image profile 'cuda' does not support a box without a GPU; it runs with: "
            f"{L4}, {MIG}, {L4_SHARED}",
        ),
        (
            {"image": "cuda", "gpu": {"profile": ROCM}},
            f"image profile 'cuda' does not support GPU profile '{ROCM}'; it runs with: "
            f"{L4}, {MIG}, {L4_SHARED}",
        ),
        (
            {"image": "python", "gpu": {}},
            f"image profile 'python' does not support GPU profile '{L4}'; it runs with: cpu",
        ),
    ],
)
def test_an_image_profile_that_cannot_be_had_is_422_at_the_image_field(
    api: CheckedApi, body: dict[str, Any], message: str
) -> None:
    name = unique("img")
    assert field_errors(api.create({"name": name, **body})) == [
        {"type": "value_error", "loc": ["body", "image"], "msg": message}
    ]
    assert api.get(name).status_code == 404


@pytest.mark.parametrize("image", [{"profile": "python"}, 7, "x" * 513])
def test_a_malformed_image_is_422_at_the_image_field(api: CheckedApi, image: Any) -> None:
    errors = field_errors(api.create({"name": unique("img"), "image": image}))
    assert [e["loc"] for e in errors] == [["body", "image"]]


def test_image_profiles_disabled_or_removed_later(
    start_controller: StartController, namespace: str
) -> None:
    first = start_controller()
    api = CheckedApi(first)
    name = unique("kept")
    assert parse(Devbox, api.create({"name": name, "image": "web-preview"}), 201).image
    assert parse(Devbox, api.verb(name, "stop"), 200).state == DevboxState.STOPPED
    first.stop()

    # The operator disables image profiles and removes them from the catalog.
    settings = example_settings(namespace)
    settings["images"] = {"enabled": False}
    api = CheckedApi(start_controller(settings))
    assert api.request("GET", "/capabilities").json()["images"] == {
        "enabled": False,
        "profiles": [],
    }
    assert field_errors(api.create({"name": unique("new"), "image": "web-preview"})) == [
        {
            "type": "value_error",
            "loc": ["body", "image"],
            "msg": "image profiles are disabled by the operator",
        }
    ]
    # The earlier box keeps its pinned profile and still starts.
    started = parse(Devbox, api.verb(name, "start"), 200)
    assert started.image is not None
    assert started.image.profile == "web-preview"
    ready = parse(Devbox, api.get(name, wait="ready", timeout=120), 200)
    assert ready.state == DevboxState.READY
    assert not ready.restart_required


def test_availability_lists_every_profile_without_nodes_or_scheduling(api: CheckedApi) -> None:
    for params in ({}, {"preset": "medium"}):
        response = api.request("GET", "/gpu/availability", params=params)
        body = parse(GpuAvailability, response, 200)
        assert [p.name for p in body.profiles] == [
            L4,
            MIG,
            ROCM,
            L4_SHARED,
        ]
        data = response.json()
        assert set(data) == {"observed_at", "profiles"}
        # The time's digits may spell a hidden number by chance; only the profiles count.
        profiles = json.dumps(data["profiles"]).lower()
        for value in (*HIDDEN_VALUES, "nvidia-l4-0", "amd-rocm-0"):
            assert value.lower() not in profiles, (params, value)


def test_create_get_list_stop_start_delete(
    api: CheckedApi, boxes: Callable[[dict[str, Any]], Devbox]
) -> None:
    name = unique("life")
    created = boxes({"name": f"  {name.upper()} ", "preset": "small", "ttl_hours": 2})
    assert created.name == name
    assert created.gpu is None
    assert created.preset == "small"
    assert created.expires_at is not None

    fetched = parse(Devbox, api.get(name), 200)
    assert fetched.name == name
    assert api.get(name).json()["gpu"] is None
    assert parse(Devbox, api.get(f" {name.upper()}"), 200).name == name

    stopped = parse(Devbox, api.verb(name, "stop"), 200)
    assert stopped.state == DevboxState.STOPPED
    started = parse(Devbox, api.verb(name, "start"), 200)
    assert started.state != DevboxState.STOPPED

    result = parse(DeleteResult, api.delete(name, purge=False), 200)
    assert (result.name, result.purged) == (name, False)
    assert parse(ErrorBody, api.delete(name, purge=False), 404).detail == (
        f"devbox '{name}' not found"
    )
    # The home volume was kept, so purging it alone still finds something to delete.
    purged = parse(DeleteResult, api.delete(name, purge=True), 200)
    assert (purged.name, purged.purged) == (name, True)
    assert api.get(name).status_code == 404


def test_list_is_newest_first(api: CheckedApi, boxes: Callable[[dict[str, Any]], Devbox]) -> None:
    older = boxes({"name": unique("older")})
    time.sleep(1.1)  # creation timestamps have one-second resolution
    newer = boxes({"name": unique("newer")})
    listing = parse(DevboxList, api.request("GET", "/devboxes"), 200)
    names = [box.name for box in listing.items]
    assert names.index(newer.name) < names.index(older.name)
    stamps = [box.created_at for box in listing.items]
    assert stamps == sorted(stamps, reverse=True)
    assert set(api.request("GET", "/devboxes").json()) == {"items"}


def test_gpu_box_reports_its_allocation(
    api: CheckedApi, boxes: Callable[[dict[str, Any]], Devbox]
) -> None:
    box = boxes({"name": unique("mig"), "gpu": {"profile": MIG}})
    assert box.gpu is not None
    assert (box.gpu.profile, box.gpu.resource_name, box.gpu.count) == (
        MIG,
        "nvidia.com/mig-1g.10gb",
        1,
    )
    default = boxes({"name": unique("dflt"), "gpu": {}})
    assert default.gpu is not None
    assert default.gpu.profile == L4


def test_unknown_box_is_404(api: CheckedApi) -> None:
    name = unique("ghost")
    for response in (
        api.get(name),
        api.verb(name, "start"),
        api.verb(name, "stop"),
        api.delete(name, purge=True),
        api.get(name, wait="ready", timeout=1),
    ):
        body = parse(ErrorBody, response, 404)
        assert body.detail == f"devbox '{name}' not found"


def test_existing_name_is_409(api: CheckedApi, boxes: Callable[[dict[str, Any]], Devbox]) -> None:
    box = boxes({"name": unique("twice")})
    again = api.create({"name": box.name.upper()})
    assert parse(ErrorBody, again, 409).detail == f"devbox '{box.name}' already exists"


def test_a_create_retried_with_its_key_answers_the_box_it_made(api: CheckedApi, kube: Any) -> None:
    name, key = unique("again"), str(uuid.uuid4())
    body = {"name": name, "ttl_hours": 2}
    try:
        first = parse(Devbox, api.create(body, key=key), 201)
        # Spelled otherwise, the same request: answered with the box as it is now.
        retried = parse(Devbox, api.create({**body, "name": name.upper()}, key=key), 201)
        assert (retried.name, retried.created_at) == (first.name, first.created_at)
        deployments = client.AppsV1Api(kube).list_namespaced_deployment(
            "devboxes-session", label_selector=f"devboxes.io/box={name}"
        )
        assert len(deployments.items) == 1

        assert field_errors(api.create({**body, "ttl_hours": 3}, key=key)) == [
            {
                "type": "value_error",
                "loc": ["header", "Idempotency-Key"],
                "msg": "this key was already used for a different create request; send a "
                "new key with every new request",
            }
        ]
        exists = f"devbox '{name}' already exists"
        assert parse(ErrorBody, api.create(body, key=str(uuid.uuid4())), 409).detail == exists
        assert parse(ErrorBody, api.create(body), 409).detail == exists
    finally:
        api.purge(name)


def test_a_malformed_idempotency_key_is_422_before_anything_is_made(api: CheckedApi) -> None:
    name = unique("badkey")
    for key in ("with space", "k" * 256):
        assert field_errors(api.create({"name": name}, key=key)) == [
            {
                "type": "value_error",
                "loc": ["header", "Idempotency-Key"],
                "msg": "must be 1-255 characters of letters, digits, '.', '_', ':' and '-'",
            }
        ]
    assert api.get(name).status_code == 404


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"name": "x", "foo": 1}, ["body", "foo"]),
        ({"name": "x", "gpu": {"count": 2}}, ["body", "gpu", "count"]),
        (
            {"name": "x", "gpu": {"profile": L4, "resource_name": "amd.com/gpu"}},
            ["body", "gpu", "resource_name"],
        ),
    ],
)
def test_unknown_fields_are_422_at_every_level(
    api: CheckedApi, body: dict[str, Any], loc: list[str]
) -> None:
    errors = field_errors(api.create(body))
    assert [e["loc"] for e in errors] == [loc]
    assert errors[0]["type"] == "extra_forbidden"
    assert api.get("x").status_code == 404, "nothing may be written before validation"


@pytest.mark.parametrize(
    "name", ["", "-lead", "trail-", "under_score", "dot.ted", "a" * 41, "spa ce", "ünï"]
)
def test_bad_names_are_422(api: CheckedApi, name: str) -> None:
    errors = field_errors(api.create({"name": name}))
    assert [e["loc"] for e in errors] == [["body", "name"]]
    assert "lowercase letters, digits and '-'" in errors[0]["msg"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({}, ["body", "name"]),
        ({"name": "ok", "preset": "huge"}, ["body", "preset"]),
        ({"name": "ok", "ttl_hours": 0}, ["body", "ttl_hours"]),
        ({"name": "ok", "ttl_hours": True}, ["body", "ttl_hours"]),
        ({"name": "ok", "ttl_hours": "24"}, ["body", "ttl_hours"]),
        ({"name": "ok", "ttl_hours": 2.5}, ["body", "ttl_hours"]),
        ({"name": "ok", "repository": "not a repo"}, ["body", "repository"]),
        ({"name": "ok", "gpu": L4}, ["body", "gpu"]),
    ],
)
def test_invalid_bodies_are_422_with_the_field(
    api: CheckedApi, body: dict[str, Any], loc: list[str]
) -> None:
    assert [e["loc"] for e in field_errors(api.create(body))] == [loc]


def test_malformed_json_is_422(api: CheckedApi) -> None:
    response = api.request(
        "POST", "/devboxes", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert field_errors(response)


def test_bad_name_in_path_is_422(api: CheckedApi) -> None:
    errors = field_errors(api.get("Bad_Name"))
    assert [(e["type"], e["loc"]) for e in errors] == [("value_error", ["path", "name"])]
    assert "invalid name" in errors[0]["msg"]


def test_ttl_over_the_maximum_is_422(api: CheckedApi) -> None:
    name = unique("ttl")
    assert field_errors(api.create({"name": name, "ttl_hours": 169})) == [
        {"type": "less_than_equal", "loc": ["body", "ttl_hours"], "msg": "must be at most 168"}
    ]
    assert api.get(name).status_code == 404


def test_unknown_profile_is_422_naming_the_available_ones(api: CheckedApi) -> None:
    name = unique("prof")
    errors = field_errors(api.create({"name": name, "gpu": {"profile": "h100"}}))
    assert [(e["type"], e["loc"]) for e in errors] == [("value_error", ["body", "gpu", "profile"])]
    assert "'h100'" in errors[0]["msg"]
    for profile in (L4, MIG, ROCM, L4_SHARED):
        assert profile in errors[0]["msg"]
    assert api.get(name).status_code == 404


def test_wait_returns_once_ready_with_the_header(
    api: CheckedApi, boxes: Callable[[dict[str, Any]], Devbox]
) -> None:
    box = boxes({"name": unique("wait")})
    response = api.get(box.name, wait="ready", timeout=120)
    waited = parse(Devbox, response, 200)
    assert response.headers["X-Devboxes-Wait"] == "ready"
    assert waited.state == DevboxState.READY
    assert waited.pod_ready
    assert "X-Devboxes-Wait" not in api.get(box.name).headers


def test_wait_returns_the_current_state_at_the_timeout(
    api: CheckedApi, boxes: Callable[[dict[str, Any]], Devbox]
) -> None:
    # testbed/nodes.yaml has two L4 nodes with one GPU each: two boxes fill them.
    for _ in range(2):
        box = boxes({"name": unique("l4"), "gpu": {"profile": L4}})
        assert (
            parse(Devbox, api.get(box.name, wait="ready", timeout=120), 200).state
            == DevboxState.READY
        )
    blocked = boxes({"name": unique("l4"), "gpu": {"profile": L4}})

    def scheduler_has_spoken() -> bool:
        """the third L4 box is reported as blocked by the scheduler"""
        return "Scheduling blocked" in (api.get(blocked.name).json()["message"] or "")

    wait_for(scheduler_has_spoken, timeout=60)
    response = api.get(blocked.name, wait="ready", timeout=2)
    waited = parse(Devbox, response, 200)
    assert response.headers["X-Devboxes-Wait"] == "ready"
    assert waited.state == DevboxState.STARTING
    assert waited.message is not None
    assert "in line for a device" in waited.message


@pytest.mark.parametrize(
    "params",
    [{"wait": "ready", "timeout": 301}, {"wait": "ready", "timeout": -1}, {"wait": "forever"}],
)
def test_wait_arguments_out_of_range_are_422(api: CheckedApi, params: dict[str, Any]) -> None:
    errors = field_errors(api.get("anything", **params))
    assert errors[0]["loc"][0] == "query"


def test_cpu_box_when_gpu_is_disabled(start_controller: StartController, namespace: str) -> None:
    settings = example_settings(namespace)
    settings["gpu"]["enabled"] = False
    api = CheckedApi(start_controller(settings))
    caps = parse(Capabilities, api.request("GET", "/capabilities"), 200)
    assert (caps.gpu.enabled, caps.gpu.default_profile, caps.gpu.profiles) == (False, None, [])
    name = unique("nogpu")
    for gpu in ({}, {"profile": L4}):
        assert field_errors(api.create({"name": name, "gpu": gpu})) == [
            {
                "type": "value_error",
                "loc": ["body", "gpu"],
                "msg": "GPU acceleration is disabled by the operator",
            }
        ]
    assert api.get(name).status_code == 404
    box = parse(Devbox, api.create({"name": name}), 201)
    assert box.gpu is None


def test_quota_refusal_is_403_with_the_apiservers_reason(
    start_controller: StartController, namespace: str, kube: Any
) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_resource_quota(
        namespace,
        {
            "metadata": {"name": "no-deployments"},
            "spec": {"hard": {"count/deployments.apps": "0"}},
        },
    )

    def quota_counted() -> bool:
        """the quota controller has computed the quota's usage"""
        quota = core.read_namespaced_resource_quota("no-deployments", namespace)
        return bool(quota.status and quota.status.hard)

    wait_for(quota_counted, timeout=60)
    api = CheckedApi(start_controller())
    name = unique("quota")
    response = api.create({"name": name})
    body = parse(ErrorBody, response, 403)
    assert isinstance(body.detail, str)
    assert "exceeded quota: no-deployments" in body.detail
    assert api.get(name).status_code == 404
