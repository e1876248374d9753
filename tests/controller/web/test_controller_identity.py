"""Who a request speaks for: the operator token first, then each identity provider."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import pytest
from devboxes_controller.k8s.kube import ApiProblem
from devboxes_controller.web.identity.base import (
    Forbidden,
    Identity,
    IdentityUnavailable,
    Unauthorized,
    owner_scope,
)
from devboxes_controller.web.identity.chooser import caller
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

TOKEN = "o" * 40


class Provider:
    """A provider that knows a fixed set of tokens, as a hub or an issuer would."""

    def __init__(
        self, known: dict[str, Identity], refused: set[str] = frozenset(), down: bool = False
    ):
        self.known = known
        self.refused = refused
        self.down = down
        self.asked: list[str] = []

    async def identify(self, token: str) -> Identity | None:
        self.asked.append(token)
        if self.down:
            raise IdentityUnavailable(
                "the identity provider at https://idp.example is not answering"
            )
        if token in self.refused:
            raise Unauthorized("the token has expired")
        return self.known.get(token)


def app(*providers: Provider, admin_groups: frozenset[str] = frozenset()) -> TestClient:
    api = FastAPI()
    api.state.token = TOKEN
    api.state.verifiers = providers
    api.state.admin_groups = admin_groups

    @api.exception_handler(ApiProblem)
    async def problem(_: Request, err: ApiProblem) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @api.get("/me")
    async def me(identity: Annotated[Identity, Depends(caller)]) -> dict[str, object]:
        return {**asdict(identity), "scope": identity.scope}

    return TestClient(api)


def get(client: TestClient, token: str | None) -> tuple[int, dict[str, object]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    response = client.get("/me", headers=headers)
    return response.status_code, response.json()


ALICE = Identity(user="alice", mode="hub", groups=("ml",))
OLIVIA = Identity(user="olivia", mode="oidc", groups=("gpu-admins", "ml"))


def test_the_operator_token_is_the_admin_and_no_provider_is_asked() -> None:
    provider = Provider({})
    status, body = get(app(provider), TOKEN)
    assert status == 200
    assert (body["user"], body["mode"], body["admin"]) == ("operator", "operator", True)
    assert body["scope"] is None
    assert provider.asked == []


def test_a_person_sees_only_their_own_boxes_and_an_admin_group_sees_all() -> None:
    client = app(Provider({"a": ALICE, "o": OLIVIA}), admin_groups=frozenset({"gpu-admins"}))
    status, body = get(client, "a")
    assert (status, body["user"], body["admin"], body["scope"]) == (200, "alice", False, "alice")
    assert body["groups"] == ["ml"]
    status, body = get(client, "o")
    assert (status, body["user"], body["admin"], body["scope"]) == (200, "olivia", True, None)


def test_providers_are_asked_in_order_until_one_knows_the_token() -> None:
    first, second = Provider({}), Provider({"a": ALICE})
    status, body = get(app(first, second), "a")
    assert (status, body["user"]) == (200, "alice")
    assert first.asked == second.asked == ["a"]


@pytest.mark.parametrize(
    ("provider", "status", "words"),
    [
        (Provider({}), 401, "invalid token"),
        (Provider({}, refused=frozenset({"t"})), 401, "expired"),
        (Provider({}, down=True), 503, "not answering"),
        (Provider({"t": Identity(user="operator", mode="oidc")}), 401, "reserved"),
    ],
    ids=["unknown", "refused", "provider down", "reserved name"],
)
def test_a_token_nobody_vouches_for_is_refused_with_a_clear_message(
    provider: Provider, status: int, words: str
) -> None:
    got, body = get(app(provider), "t")
    assert got == status
    assert words in str(body["detail"])
    assert body["detail"] != "t"


def test_no_credentials_is_a_401() -> None:
    status, body = get(app(Provider({"a": ALICE})), None)
    assert status == 401
    assert body["detail"] == "authentication required"


def test_an_owner_filter_is_anyones_for_an_admin_and_only_ones_own_for_a_person() -> None:
    operator = Identity(user="operator", mode="operator", admin=True)
    admin = Identity(user="olivia", mode="oidc", groups=("gpu-admins",), admin=True)
    assert owner_scope(operator, None) is None
    assert owner_scope(admin, "alice") == "alice"
    assert owner_scope(ALICE, None) == "alice"
    assert owner_scope(ALICE, "alice") == "alice"
    with pytest.raises(Forbidden) as refused:
        owner_scope(ALICE, "bob")
    assert (refused.value.status, refused.value.detail) == (
        403,
        "only admins may list another person's boxes",
    )
