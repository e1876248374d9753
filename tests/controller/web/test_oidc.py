"""JWT access tokens of a real OpenID provider (testbed/go/issuer), checked by OidcVerifier:
who they name, and every way one is refused, with a message that never quotes the token."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import jwt
import pytest
from devboxes_controller.config.settings import OidcSettings, Settings
from devboxes_controller.k8s.kube import ApiProblem
from devboxes_controller.web import oidc
from devboxes_controller.web.oidc import OidcVerifier, oidc_verifier
from devboxes_controller.web.people import Identity, IdentityUnavailable
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer

T = TypeVar("T")


def _settings(issuer: Issuer, **overrides: Any) -> OidcSettings:
    fields = {"issuer": issuer.url, "audience": CLI_CLIENT_ID, **overrides}
    return OidcSettings.model_validate(fields)


def _with_verifier(
    settings: OidcSettings,
    use: Callable[[OidcVerifier], Awaitable[T]],
    admin_groups: tuple[str, ...] = (),
    requests: list[str] | None = None,
) -> T:
    """Run ``use`` with a fresh verifier; ``requests`` collects the URLs it fetched."""

    async def count(request: httpx.Request) -> None:
        if requests is not None:
            requests.append(str(request.url))

    async def run() -> T:
        client = httpx.AsyncClient(timeout=5, event_hooks={"request": [count]})
        verifier = OidcVerifier(settings, admin_groups, client)
        try:
            return await use(verifier)
        finally:
            await verifier.aclose()

    return asyncio.run(run())


def _identify(settings: OidcSettings, token: str, admin_groups: tuple[str, ...] = ()) -> Any:
    return _with_verifier(settings, lambda v: v.identify(token), admin_groups)


def _refusal(settings: OidcSettings, token: str) -> ApiProblem:
    with pytest.raises(ApiProblem) as caught:
        _identify(settings, token)
    problem = caught.value
    assert token not in problem.detail
    for part in filter(None, token.split(".")):
        assert part not in problem.detail
    return problem


def _segments(token: str) -> list[str]:
    return token.split(".")


def _claims(token: str) -> dict[str, Any]:
    payload = _segments(token)[1]
    decoded: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return decoded


def test_a_token_names_its_person_and_groups(issuer: Issuer) -> None:
    settings = _settings(issuer)
    alice = _identify(settings, issuer.token_for("alice"), admin_groups=("gpu-admins",))
    assert alice == Identity(user="alice", mode="oidc", groups=("ml",), admin=False)
    olivia = _identify(settings, issuer.token_for("olivia"), admin_groups=("gpu-admins",))
    assert olivia == Identity(user="olivia", mode="oidc", groups=("gpu-admins",), admin=True)


def test_the_claims_read_are_the_configured_ones(issuer: Issuer) -> None:
    token = issuer.token_for("bob")
    by_subject = _identify(_settings(issuer, usernameClaim="sub", groupsClaim="roles"), token)
    # The provider's subject is the username; it has no roles claim: no groups.
    assert by_subject == Identity(user="bob", mode="oidc", groups=())
    problem = _refusal(_settings(issuer, usernameClaim="email"), token)
    assert problem.status == 401
    assert problem.detail == "the token has no username in its 'email' claim"
    problem = _refusal(_settings(issuer, groupsClaim="preferred_username"), token)
    assert problem.detail == "the token's 'preferred_username' claim is not a list of group names"


def test_oidc_verifier_follows_the_settings(issuer: Issuer) -> None:
    assert oidc_verifier(Settings.model_validate({})) is None
    settings = Settings.model_validate(
        {
            "auth": {
                "adminGroups": ["vision"],
                "oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID},
            }
        }
    )

    async def bob(_: OidcVerifier) -> Identity | None:
        verifier = oidc_verifier(settings)
        assert verifier is not None
        try:
            return await verifier.identify(issuer.token_for("bob"))
        finally:
            await verifier.aclose()

    assert _with_verifier(_settings(issuer), bob) == Identity("bob", "oidc", ("vision",), True)


@pytest.mark.parametrize("token", ["opaque-hub-token-0123456789abcdef", "a.b", "x.y.z", ""])
def test_a_token_that_is_no_jwt_is_left_to_other_verifiers(issuer: Issuer, token: str) -> None:
    assert _identify(_settings(issuer), token) is None


def test_an_expired_token_is_refused(tmp_path: Path) -> None:
    # A provider whose tokens expired before they were issued: an old token, as it were.
    with Issuer(tmp_path, lifetime="-5m") as stale:
        problem = _refusal(_settings(stale), stale.token_for("alice"))
    assert problem.status == 401
    assert problem.detail == "the token has expired; log in again"


def test_a_token_for_another_audience_is_refused(issuer: Issuer) -> None:
    problem = _refusal(_settings(issuer, audience="devboxes-api"), issuer.token_for("alice"))
    assert problem.status == 401
    assert problem.detail == (
        "the token is meant for ['devbox-cli'], not for this controller's audience 'devboxes-api'"
    )


def test_a_token_with_another_tokens_signature_is_refused(issuer: Issuer) -> None:
    header, payload, _ = _segments(issuer.token_for("alice"))
    *_, signature = _segments(issuer.token_for("bob"))
    problem = _refusal(_settings(issuer), f"{header}.{payload}.{signature}")
    assert problem.status == 401
    assert problem.detail == "the token's signature does not match the issuer's key"


def test_a_symmetric_or_unsigned_token_is_refused(issuer: Issuer) -> None:
    claims = _claims(issuer.token_for("olivia"))
    forged = jwt.encode(claims, "a shared secret of thirty-two bytes!", algorithm="HS256")
    problem = _refusal(_settings(issuer), forged)
    assert problem.detail.startswith("the token is signed with 'HS256'; accepted: RS256")
    unsigned = jwt.encode(claims, None, algorithm="none")
    assert _refusal(_settings(issuer), unsigned).detail.startswith(
        "the token is signed with 'none'"
    )


def test_a_token_of_another_issuer_is_refused(issuer: Issuer, tmp_path: Path) -> None:
    with Issuer(tmp_path) as other:
        token = other.token_for("alice")
        problem = _refusal(_settings(issuer), token)
    assert problem.status == 401
    assert problem.detail == (
        f"the token was issued by {other.url!r}, not by the trusted issuer {issuer.url!r}"
    )


def test_a_key_the_issuer_no_longer_publishes_is_refused_and_a_new_one_is_learnt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Refetching for every unknown key, so the new key is learnt without waiting.
    monkeypatch.setattr(oidc, "REFETCH_SECONDS", 0.0)
    provider = Issuer(tmp_path).start()
    try:
        before = provider.token_for("alice")
        settings = _settings(provider)

        async def across_a_restart(verifier: OidcVerifier) -> tuple[Any, ApiProblem, Any]:
            first = await verifier.identify(before)
            # The provider comes back on the same URL with a new signing key; its first
            # token makes the verifier fetch the new key set, without the old key.
            provider.stop()
            provider.start()
            after = await verifier.identify(provider.token_for("alice"))
            with pytest.raises(ApiProblem) as caught:
                await verifier.identify(before)
            return first, caught.value, after

        first, problem, after = _with_verifier(settings, across_a_restart)
    finally:
        provider.stop()
    assert first == after == Identity("alice", "oidc", ("ml",))
    assert problem.status == 401
    kid = jwt.get_unverified_header(before)["kid"]
    assert (
        problem.detail == f"the token is signed with key {kid!r}, which the issuer does not publish"
    )


def test_unknown_keys_refetch_the_key_set_at_most_once_in_a_while(issuer: Issuer) -> None:
    token = issuer.token_for("alice")
    header, payload, signature = _segments(token)
    made_up = []
    for index in range(5):
        fields = {**json.loads(base64.urlsafe_b64decode(header + "==")), "kid": f"made-up-{index}"}
        encoded = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
        made_up.append(f"{encoded}.{payload}.{signature}")
    requests: list[str] = []

    async def attempts(verifier: OidcVerifier) -> list[int]:
        await verifier.identify(token)
        statuses = []
        for forged in made_up:
            with pytest.raises(ApiProblem) as caught:
                await verifier.identify(forged)
            statuses.append(caught.value.status)
        return statuses

    assert _with_verifier(_settings(issuer), attempts, requests=requests) == [401] * 5
    discovery = f"{issuer.url}/.well-known/openid-configuration"
    # The first identify fetched discovery and keys once; the made-up keys, within
    # REFETCH_SECONDS of it, fetched nothing more.
    assert requests == [discovery, f"{issuer.url}/keys"]


def test_concurrent_first_requests_fetch_the_keys_once(issuer: Issuer) -> None:
    tokens = [issuer.token_for(name) for name in ("alice", "bob", "olivia")]
    requests: list[str] = []

    async def together(verifier: OidcVerifier) -> list[Identity | None]:
        return list(await asyncio.gather(*(verifier.identify(t) for t in tokens * 3)))

    people = _with_verifier(_settings(issuer), together, requests=requests)
    assert [p.user for p in people if p] == ["alice", "bob", "olivia"] * 3
    assert len(requests) == 2


def test_an_issuer_that_is_down_is_a_503_naming_it(tmp_path: Path) -> None:
    provider = Issuer(tmp_path).start()
    token = provider.token_for("bob")
    provider.stop()
    problem = _refusal(_settings(provider), token)
    assert isinstance(problem, IdentityUnavailable)
    assert problem.status == 503
    assert problem.headers == {"Retry-After": "5"}
    assert problem.detail == (
        f"the OIDC issuer {provider.url} cannot be reached (ConnectError); try again later"
    )


def test_the_issuer_must_be_configured_exactly_as_it_writes_itself(issuer: Issuer) -> None:
    # A trailing slash the provider does not write: its tokens' iss no longer matches.
    settings = OidcSettings(issuer=issuer.url + "/", audience=CLI_CLIENT_ID)
    token = issuer.token_for("alice")
    problem = _refusal(settings, token)
    assert problem.status == 401
    assert "not by the trusted issuer" in problem.detail


def test_an_id_token_is_accepted_only_for_its_client_and_its_own_nonce(issuer: Issuer) -> None:
    tokens = issuer.tokens_for("alice", nonce="n" * 43)
    settings = _settings(issuer)

    def check(token: str, client_id: str, nonce: str) -> None:
        _with_verifier(settings, lambda v: v.check_id_token(token, client_id, nonce))

    check(tokens["id_token"], CLI_CLIENT_ID, "n" * 43)
    refusals = [
        (tokens["id_token"], CLI_CLIENT_ID, "m" * 43, "its nonce differs"),
        (tokens["id_token"], "another-client", "n" * 43, "the ID token is not valid: "),
        # An access token carries no nonce: it cannot stand in for the ID token.
        (tokens["access_token"], CLI_CLIENT_ID, "n" * 43, "its nonce differs"),
        ("not-a-jwt", CLI_CLIENT_ID, "n" * 43, "the issuer's ID token is not a JWT"),
    ]
    for token, client_id, nonce, reason in refusals:
        with pytest.raises(ApiProblem) as caught:
            check(token, client_id, nonce)
        assert caught.value.status == 401
        assert reason in caught.value.detail
        assert token not in caught.value.detail
