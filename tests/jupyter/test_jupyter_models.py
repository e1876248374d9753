"""What the server extension accepts from the browser and how SDK errors reach it."""

from __future__ import annotations

import json

import pytest
from devboxes_jupyter.models import (
    MAX_WAIT_SECONDS,
    RequestRejected,
    devbox_json,
    error_body,
    parse_create,
    parse_name,
    parse_purge,
    parse_wait,
)

from devboxes_sdk import models
from devboxes_sdk.errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    Conflict,
    NotADevboxesServer,
    Unavailable,
    ValidationError,
)


def q(**values: str | list[str]) -> dict[str, list[bytes]]:
    return {
        key: [v.encode() for v in (value if isinstance(value, list) else [value])]
        for key, value in values.items()
    }


def test_plain_get_has_no_wait() -> None:
    assert parse_wait({}) is None


def test_wait_passes_through_with_timeout() -> None:
    wait = parse_wait(q(wait="ready", timeout="20"))
    assert wait is not None
    assert (wait.wait, wait.timeout) == ("ready", 20)


def test_wait_ignores_unrelated_parameters() -> None:
    wait = parse_wait(q(wait="ready", _="1700000000"))
    assert wait is not None
    assert wait.timeout == 30


@pytest.mark.parametrize(
    ("query", "field"),
    [
        (q(wait="stopped"), "wait"),
        (q(timeout="10"), "wait"),
        (q(wait="ready", timeout="0"), "timeout"),
        (q(wait="ready", timeout=str(MAX_WAIT_SECONDS + 1)), "timeout"),
        (q(wait="ready", timeout="soon"), "timeout"),
        (q(wait=["ready", "ready"]), "wait"),
    ],
)
def test_bad_wait_is_422_naming_the_parameter(query: dict[str, list[bytes]], field: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        parse_wait(query)
    assert caught.value.status == 422
    body = caught.value.body()
    assert [item["loc"] for item in body["detail"]] == [["query", field]]


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("false", False)])
def test_purge_values(value: str, expected: bool) -> None:
    assert parse_purge(q(purge=value)) is expected


def test_purge_defaults_to_keeping_storage_and_refuses_guesses() -> None:
    assert parse_purge({}) is False
    with pytest.raises(RequestRejected, match="purge"):
        parse_purge(q(purge="yes please"))


def test_name_is_normalized_or_refused_with_the_rule() -> None:
    assert parse_name(" Atlas ") == "atlas"
    with pytest.raises(RequestRejected) as caught:
        parse_name("-bad-")
    detail = caught.value.body()["detail"]
    assert detail[0]["loc"] == ["path", "name"]
    assert "lowercase letters" in detail[0]["msg"]


def test_create_body_uses_the_wire_model() -> None:
    body = json.dumps({"name": "gpu-1", "preset": "medium", "gpu": {"profile": "nvidia-l4"}})
    request = parse_create(body.encode())
    assert request == models.DevboxCreate(
        name="gpu-1", preset="medium", gpu=models.GpuRequest(profile="nvidia-l4")
    )


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"name": "Bad_Name"}, ["body", "name"]),
        ({"name": "ok", "preset": "huge"}, ["body", "preset"]),
        ({"name": "ok", "ttl_hours": 0}, ["body", "ttl_hours"]),
        ({"name": "ok", "command": "x"}, ["body", "command"]),
        ({"name": "ok", "image": ["x"]}, ["body", "image"]),
        ({"name": "ok", "gpu": {"profile": "a", "count": 2}}, ["body", "gpu", "count"]),
    ],
)
def test_create_body_errors_name_the_field(body: dict[str, object], loc: list[str]) -> None:
    with pytest.raises(RequestRejected) as caught:
        parse_create(json.dumps(body).encode())
    assert caught.value.status == 422
    assert [item["loc"] for item in caught.value.body()["detail"]] == [loc]


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b"\xff"])
def test_create_body_must_be_a_json_object(raw: bytes) -> None:
    with pytest.raises(RequestRejected) as caught:
        parse_create(raw)
    assert caught.value.body() == {"detail": "the request body must be a JSON object"}


def test_devbox_json_refuses_a_body_that_is_not_a_box() -> None:
    with pytest.raises(ApiError) as caught:
        devbox_json({"name": "x"})
    assert caught.value.status == 502


def test_controller_status_and_detail_pass_through() -> None:
    assert error_body(Conflict(409, "devbox 'a' already exists")) == (
        409,
        {"detail": "devbox 'a' already exists"},
    )


def test_validation_errors_keep_their_list_shape() -> None:
    error = ValidationError(
        [models.FieldError(loc=["body", "gpu", "profile"], msg="unknown profile 'h100'")]
    )
    status, body = error_body(error)
    assert status == 422
    assert body == {
        "detail": [
            {
                "type": "value_error",
                "loc": ["body", "gpu", "profile"],
                "msg": "unknown profile 'h100'",
            }
        ]
    }


def test_unreachable_controller_is_503() -> None:
    status, body = error_body(Unavailable(None, "cannot reach the Devboxes API at http://x"))
    assert status == 503
    assert "cannot reach" in body["detail"]


def test_no_cluster_answering_is_503_with_each_clusters_reason() -> None:
    from devboxes_sdk.clusters import NoClusterAnswered

    why = "no cluster answered (lab-a: did not answer in 3 s; lab-b: did not answer in 3 s)"
    assert error_body(NoClusterAnswered(why)) == (503, {"detail": why})


@pytest.mark.parametrize("answered", [200, 302, 404])
def test_another_server_at_the_url_is_a_bad_gateway(answered: int) -> None:
    other = NotADevboxesServer(
        "http://x", answered, "the server at http://x is not a Devboxes controller"
    )
    status, body = error_body(other)
    assert status == 502
    assert body["detail"] == (
        "the Devboxes URL of this Jupyter server is wrong: "
        "the server at http://x is not a Devboxes controller"
    )


def test_rejected_token_says_whose_token_it_was() -> None:
    status, body = error_body(AuthenticationError(401, "invalid token"))
    assert status == 401
    assert "configured for this Jupyter server" in body["detail"]


def test_missing_configuration_is_503_with_the_sdk_explanation() -> None:
    status, body = error_body(ConfigurationError("no Devboxes URL configured"))
    assert status == 503
    assert body["detail"].endswith("no Devboxes URL configured")
