"""Paged and filtered box lists against a controller on the testbed."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import requests
from devboxes_testbed.boxes import write_stopped
from devboxes_testbed.controller import Controller, example_settings

from tests.support import wait_for

CPU_BOXES = [f"page-{i:02d}" for i in range(7)]
GPU_BOXES = ["page-gpu-a", "page-gpu-b"]


@pytest.fixture
def paged(start_controller: Any, kube: Any, namespace: str) -> Controller:
    """A controller over seven stopped CPU boxes and two stopped NVIDIA L4 boxes."""
    settings = example_settings(namespace)
    write_stopped(kube, settings, CPU_BOXES)
    write_stopped(kube, settings, GPU_BOXES, profile="nvidia-l4")
    controller = start_controller(settings)

    def all_listed() -> bool:
        """the controller lists every box written"""
        return len(_get(controller).json()["items"]) == len(CPU_BOXES) + len(GPU_BOXES)

    wait_for(all_listed, timeout=60)
    return controller


def _get(controller: Controller, **params: Any) -> requests.Response:
    return requests.get(
        f"{controller.url}/api/v1/devboxes", params=params, headers=controller.headers(), timeout=30
    )


def _walk(controller: Controller, token: str | None = None, **params: Any) -> tuple[list[str], int]:
    names: list[str] = []
    pages = 0
    while True:
        answer = _get(controller, **params, **({"continue": token} if token else {}))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        names += [box["name"] for box in body["items"]]
        pages += 1
        token = body["continue"]
        if token is None:
            return names, pages


def test_pages_hold_every_box_once_in_name_order(paged: Controller) -> None:
    names, pages = _walk(paged, limit=3)
    assert names == sorted(CPU_BOXES + GPU_BOXES)
    assert pages == 3
    first = _get(paged, limit=4).json()
    assert [box["name"] for box in first["items"]] == sorted(CPU_BOXES + GPU_BOXES)[:4]


def test_without_paging_parameters_the_body_is_the_plain_list(paged: Controller) -> None:
    body = _get(paged).json()
    assert list(body) == ["items"]
    assert len(body["items"]) == len(CPU_BOXES) + len(GPU_BOXES)


def test_an_empty_continue_is_no_continue_at_all(paged: Controller) -> None:
    plain = _get(paged, **{"continue": ""})
    assert plain.status_code == 200, plain.text
    assert list(plain.json()) == ["items"]
    assert len(plain.json()["items"]) == len(CPU_BOXES) + len(GPU_BOXES)
    first = _get(paged, limit=4, **{"continue": ""})
    assert first.status_code == 200, first.text
    assert [box["name"] for box in first.json()["items"]] == sorted(CPU_BOXES + GPU_BOXES)[:4]
    assert first.json()["continue"] is not None


def test_filters_answer_only_their_boxes_paged_or_not(paged: Controller) -> None:
    assert _walk(paged, limit=1, profile="nvidia-l4")[0] == GPU_BOXES
    assert _walk(paged, limit=5, state="stopped", profile="cpu")[0] == CPU_BOXES
    plain = _get(paged, profile="cpu").json()
    assert list(plain) == ["items"]
    assert {box["name"] for box in plain["items"]} == set(CPU_BOXES)
    assert _get(paged, state="ready").json() == {"items": []}


def test_a_box_created_or_deleted_between_pages_leaves_the_others_listed_once(
    paged: Controller, kube: Any, namespace: str
) -> None:
    from kubernetes import client

    first = _get(paged, limit=4).json()
    write_stopped(kube, example_settings(namespace), ["page-00a", "page-zz"])
    client.AppsV1Api(kube).delete_namespaced_deployment("devbox-page-05", namespace)

    def changed() -> bool:
        """the controller sees the new boxes and the deleted one gone"""
        names = {box["name"] for box in _get(paged).json()["items"]}
        return "page-zz" in names and "page-05" not in names

    wait_for(changed, timeout=60)
    rest, _ = _walk(paged, first["continue"], limit=4)
    seen = [box["name"] for box in first["items"]] + rest
    assert len(seen) == len(set(seen))
    lasting = set(CPU_BOXES + GPU_BOXES) - {"page-05"}
    assert lasting <= set(seen)
    # Created after the cursor's name: listed; before it: not.
    assert "page-zz" in seen
    assert "page-00a" not in seen


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"state": "running"}, "state"),
        ({"profile": "nvidia-h100"}, "profile"),
    ],
)
def test_bad_parameters_are_a_422_naming_the_parameter(
    paged: Controller, params: dict[str, Any], where: str
) -> None:
    answer = _get(paged, **params)
    assert answer.status_code == 422
    assert [error["loc"] for error in answer.json()["detail"]] == [["query", where]]


def test_a_tampered_token_is_a_400_and_a_token_of_other_filters_too(paged: Controller) -> None:
    token = _get(paged, limit=2).json()["continue"]
    payload, mac = token.split(".")
    forged = base64.urlsafe_b64encode(
        base64.urlsafe_b64decode(payload + "==").replace(b"page-01", b"page-04")
    ).rstrip(b"=")
    tampered = _get(paged, limit=2, **{"continue": f"{forged.decode()}.{mac}"})
    assert tampered.status_code == 400
    assert "signature" in tampered.json()["detail"]
    other = _get(paged, limit=2, state="stopped", **{"continue": token})
    assert other.status_code == 400
    assert "same filters" in other.json()["detail"]
    assert _get(paged, **{"continue": "nonsense"}).status_code == 400


def test_a_token_from_before_the_operator_token_changed_is_a_410(
    paged: Controller, start_controller: Any, namespace: str
) -> None:
    token = _get(paged, limit=2).json()["continue"]
    rotated = start_controller(example_settings(namespace), token="r" * 40)
    wait_for(lambda: _get(rotated).status_code == 200, timeout=60)
    answer = _get(rotated, limit=2, **{"continue": token})
    assert answer.status_code == 410
    assert "start the list again" in answer.json()["detail"]
    # The same operator token on another replica honours it.
    replica = start_controller(example_settings(namespace), token=paged.token)
    wait_for(lambda: len(_get(replica).json()["items"]) == 9, timeout=60)
    names = [box["name"] for box in _get(replica, limit=2, **{"continue": token}).json()["items"]]
    assert names == sorted(CPU_BOXES + GPU_BOXES)[2:4]
