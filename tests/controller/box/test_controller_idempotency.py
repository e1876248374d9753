"""The record of an idempotent create: which retries it recognises, and the key's rule."""

from __future__ import annotations

from typing import Any

import pytest
from devboxes_controller.box.idempotency import (
    ANNOTATION_CREATE_REQUEST,
    MAX_KEY_LENGTH,
    CreateRequest,
    check_key,
)
from devboxes_controller.k8s.kube import Invalid

from devboxes_sdk.models import DevboxCreate

KEY = "0b6f1c9e-4a2d-4f7e-9c1a-3d5e7f9a1b2c"


def create(**fields: Any) -> DevboxCreate:
    return DevboxCreate.model_validate({"name": "alpha", **fields})


def made_by(request: CreateRequest) -> dict[str, Any]:
    return {"metadata": {"annotations": {ANNOTATION_CREATE_REQUEST: request.annotation()}}}


def test_the_same_request_spelled_otherwise_is_the_same() -> None:
    first = CreateRequest.of(KEY, create())
    assert CreateRequest.of(KEY, create(name=" ALPHA ", preset="small", ttl_hours=24)) == first
    assert CreateRequest.of(KEY, DevboxCreate.model_validate_json('{"name":"alpha"}')) == first


def test_a_retry_is_recognised_only_with_its_key_and_body() -> None:
    box = made_by(CreateRequest.of(KEY, create()))
    assert CreateRequest.of(KEY, create()).made(box)
    assert not CreateRequest.of("another-key", create()).made(box)
    with pytest.raises(Invalid) as refused:
        CreateRequest.of(KEY, create(ttl_hours=2)).made(box)
    assert refused.value.status == 422
    assert [e.loc for e in refused.value.errors] == [["header", "Idempotency-Key"]]
    assert "already used for a different create request" in refused.value.detail


@pytest.mark.parametrize(
    "annotations",
    [None, {}, {ANNOTATION_CREATE_REQUEST: "not json"}, {ANNOTATION_CREATE_REQUEST: "[1]"}],
)
def test_a_box_without_a_readable_record_was_made_by_another_request(
    annotations: dict[str, str] | None,
) -> None:
    box = {"metadata": {"annotations": annotations}}
    assert not CreateRequest.of(KEY, create()).made(box)


def test_the_record_keeps_digests_only() -> None:
    record = CreateRequest.of(KEY, create()).annotation()
    assert KEY not in record
    assert "alpha" not in record


@pytest.mark.parametrize("key", [KEY, "a", "2030-05-17T06:00:00Z.retry_1", "k" * MAX_KEY_LENGTH])
def test_keys_within_the_rule_are_taken_as_sent(key: str) -> None:
    assert check_key(key) == key


@pytest.mark.parametrize(
    "key", ["", "k" * (MAX_KEY_LENGTH + 1), '"quoted"', "with space", "é", "a/b", "a\tb"]
)
def test_keys_outside_the_rule_are_refused_without_being_echoed(key: str) -> None:
    with pytest.raises(Invalid) as refused:
        check_key(key)
    assert refused.value.status == 422
    assert refused.value.detail == (
        "must be 1-255 characters of letters, digits, '.', '_', ':' and '-'"
    )


def test_a_create_without_an_image_digests_as_before_creates_could_name_one() -> None:
    # sha256 of {"gpu":null,"name":"alpha","preset":"small","repository":null,"ttl_hours":24},
    # as releases without image profiles stored it.
    assert CreateRequest.of(KEY, create()).body == (
        "285d137a755d51fd5bc8d22075f53f4b7ce13518ce21a063ba1b910ed4ef8563"
    )
    assert CreateRequest.of(KEY, create(image="python")) != CreateRequest.of(KEY, create())
