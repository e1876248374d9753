"""The continue token of paged lists: what it resumes at, and how it is refused."""

from __future__ import annotations

import base64
import json

import pytest
from devboxes_controller.k8s.kube import ApiProblem
from devboxes_controller.web.paging import TOKEN_TTL_SECONDS, ListTokens, Position

SECRET = "s" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _refusal(
    tokens: ListTokens, token: str, state: str | None = None, owner: str | None = None
) -> ApiProblem:
    with pytest.raises(ApiProblem) as caught:
        tokens.read(token, owner, state, None)
    return caught.value


def test_a_token_resumes_after_its_name_on_any_replica_with_the_same_secret() -> None:
    clock = Clock()
    token = ListTokens(SECRET, clock).issue(Position("box-7", "ready", "l4", "alice"))
    assert "=" not in token
    other_replica = ListTokens(SECRET, clock)
    assert other_replica.read(token, "alice", "ready", "l4") == Position(
        "box-7", "ready", "l4", "alice"
    )


@pytest.mark.parametrize("token", ["", "x", "not.base64!", "e30", "e30.", "W10.abc", "\u00e9.x"])
def test_garbage_is_a_400(token: str) -> None:
    problem = _refusal(ListTokens(SECRET), token)
    assert problem.status == 400
    assert "invalid continue token" in problem.detail


def test_an_edited_token_is_a_400() -> None:
    tokens = ListTokens(SECRET)
    payload, mac = tokens.issue(Position("a", None, None)).split(".")
    fields = json.loads(base64.urlsafe_b64decode(payload + "=="))
    fields["a"] = "zzz"
    forged = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
    problem = _refusal(tokens, f"{forged}.{mac}")
    assert (problem.status, problem.detail) == (
        400,
        "invalid continue token: its signature does not match",
    )


def test_a_token_of_other_filters_is_a_400_naming_both() -> None:
    tokens = ListTokens(SECRET)
    token = tokens.issue(Position("a", "ready", None))
    problem = _refusal(tokens, token, state="stopped")
    assert problem.status == 400
    assert "state=ready" in problem.detail
    assert "state=stopped" in problem.detail


def test_a_persons_token_does_not_continue_another_persons_list() -> None:
    tokens = ListTokens(SECRET)
    token = tokens.issue(Position("a", None, None, "alice"))
    problem = _refusal(tokens, token, owner="bob")
    assert problem.status == 400
    assert "owner=alice" in problem.detail
    assert "owner=bob" in problem.detail


def test_a_token_older_than_its_lifetime_is_a_410_saying_to_restart() -> None:
    clock = Clock()
    tokens = ListTokens(SECRET, clock)
    token = tokens.issue(Position("a", None, None))
    clock.now += TOKEN_TTL_SECONDS
    assert tokens.read(token, None, None, None).after == "a"
    clock.now += 1
    problem = _refusal(tokens, token)
    assert problem.status == 410
    assert "start the list again" in problem.detail


def test_a_token_signed_before_the_operator_token_was_rotated_is_a_410() -> None:
    token = ListTokens(SECRET).issue(Position("a", None, None))
    problem = _refusal(ListTokens("r" * 32), token)
    assert problem.status == 410
    assert "rotated" in problem.detail
