"""JWT access tokens of a real OpenID provider (testbed/go/issuer), checked by OidcVerifier:
who they name, and every way one is refused, with a message that never quotes the token.
An issuer of the tests' own, which can be made to fail or hang, shows how long the keys
outlive an outage and how many fetches an outage costs."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from devboxes_controller.config.auth import OidcSettings
from devboxes_controller.config.settings import Settings
from devboxes_controller.k8s.kube import ApiProblem
from devboxes_controller.web.identity import oidc
from devboxes_controller.web.identity.base import Identity, IdentityUnavailable
from devboxes_controller.web.identity.oidc import OidcVerifier, oidc_verifier
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from support import Clock, OutageHandler, OutageServer, serving

T = TypeVar("T")


def _settings(issuer: Issuer, **overrides: Any) -> OidcSettings:
    fields = {"issuer": issuer.url, "audience": CLI_CLIENT_ID, **overrides}
    return OidcSettings.model_validate(fields)


def _with_verifier(
    settings: OidcSettings,
    use: Callable[[OidcVerifier], Awaitable[T]],
    admin_groups: tuple[str, ...] = (),
    requests: list[str] | None = None,
    clock: Clock | None = None,
) -> T:
    """Run ``use`` with a fresh verifier; ``requests`` collects the URLs it fetched."""

    async def count(request: httpx.Request) -> None:
        if requests is not None:
            requests.append(str(request.url))

    async def run() -> T:
        client = httpx.AsyncClient(
            timeout=oidc.HTTP_TIMEOUT_SECONDS, event_hooks={"request": [count]}
        )
        verifier = OidcVerifier(settings, admin_groups, client, clock or time.monotonic)
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


@pytest.mark.testbed
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


@pytest.mark.testbed
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


@pytest.mark.testbed
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


class _StubIssuer(OutageServer):
    """An issuer of the test's own that signs with one RSA key and publishes it."""

    def __init__(self) -> None:
        super().__init__(_StubIssuerHandler)
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def token(self, user: str, kid: str = "stub-key") -> str:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "aud": CLI_CLIENT_ID,
            "preferred_username": user,
            "groups": ["ml"],
            "iat": now,
            "exp": now + 3600,
        }
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": kid})


class _StubIssuerHandler(OutageHandler):
    server: _StubIssuer

    def do_GET(self) -> None:
        stub = self.server
        if self.in_outage({"error": "unavailable"}):
            return
        if self.path == "/.well-known/openid-configuration":
            self.send_json(200, {"issuer": stub.url, "jwks_uri": f"{stub.url}/keys"})
        else:
            public = jwt.algorithms.RSAAlgorithm.to_jwk(stub.key.public_key(), as_dict=True)
            self.send_json(200, {"keys": [{**public, "kid": "stub-key", "use": "sig"}]})


def _stub_settings(stub: _StubIssuer) -> OidcSettings:
    return OidcSettings(issuer=stub.url, audience=CLI_CLIENT_ID)


async def _five(verifier: OidcVerifier, token: str) -> list[Any]:
    """Five requests with ``token`` at once: each one's person or what it raised."""
    return list(
        await asyncio.gather(*(verifier.identify(token) for _ in range(5)), return_exceptions=True)
    )


def _detail(answer: Any) -> str:
    assert isinstance(answer, IdentityUnavailable), answer
    assert answer.status == 503
    return answer.detail


def test_known_keys_keep_verifying_through_an_outage_for_a_bounded_time() -> None:
    clock = Clock()
    fetched: list[str] = []
    with serving(_StubIssuer()) as stub:
        token = stub.token("alice")
        unknown_key = stub.token("alice", kid="rotated-key")
        discovery = f"{stub.url}/.well-known/openid-configuration"
        failed = f"the OIDC issuer {stub.url} answered 503 for {discovery}"

        async def outage(verifier: OidcVerifier) -> None:
            alice = Identity("alice", "oidc", ("ml",))
            assert await verifier.identify(token) == alice
            assert len(fetched) == 2
            stub.mode = "failing"

            async def refreshed_behind() -> None:
                """Known keys due for their refresh check the token at once; the refresh
                runs behind it."""
                assert await _five(verifier, token) == [alice] * 5
                # A key the cache lacks may be a rotated one, so it waits for that refresh
                # and gets the issuer's failure, not a 401.
                with pytest.raises(IdentityUnavailable) as caught:
                    await verifier.identify(unknown_key)
                assert caught.value.detail == failed

            clock.now += oidc.KEYS_REFRESH_SECONDS + 1
            await refreshed_behind()
            assert len(fetched) == 3
            # Up to the bound, the cached key keeps working: one attempt per backoff.
            clock.now += oidc.KEYS_MAX_STALE_SECONDS - oidc.KEYS_REFRESH_SECONDS - 2
            await refreshed_behind()
            assert len(fetched) == 4
            assert await _five(verifier, token) == [alice] * 5
            assert len(fetched) == 4
            # Past it, the token is refused with the reason, after one more attempt.
            clock.now += oidc.KEYS_MAX_STALE_SECONDS
            refused = await _five(verifier, token)
            assert len(fetched) == 5
            assert {_detail(answer) for answer in refused} == {
                f"tokens of the OIDC issuer {stub.url} cannot be checked: its keys were last "
                f"fetched 48.0 h ago, more than the 24 h they are trusted without it, and "
                f"fetching them again failed: {failed}"
            }
            # The issuer back, the next attempt after the backoff restores it.
            stub.mode = "up"
            clock.now += 60
            assert await _five(verifier, token) == [alice] * 5
            assert len(fetched) == 7

        _with_verifier(_stub_settings(stub), outage, requests=fetched, clock=clock)


@pytest.mark.parametrize("mode", ["hanging", "failing"])
def test_a_replica_started_during_an_outage_shares_one_fetch_and_backs_off(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short fetch timeout, so that a hanging issuer costs the test little.
    monkeypatch.setattr(oidc, "HTTP_TIMEOUT_SECONDS", 0.5)
    clock = Clock()
    fetched: list[str] = []
    with serving(_StubIssuer()) as stub:
        stub.mode = mode
        token = stub.token("bob")
        failed = {
            "hanging": f"the OIDC issuer {stub.url} did not answer within 0.5s; try again later",
            "failing": (
                f"the OIDC issuer {stub.url} answered 503 for "
                f"{stub.url}/.well-known/openid-configuration"
            ),
        }[mode]

        async def outage(verifier: OidcVerifier) -> list[int]:
            attempts = []
            # Each round of five concurrent requests: all answered with the failure of at
            # most one fetch attempt, which they share.
            for step in (0, 0, 1, 1, 1, 2, 2):
                clock.now += step
                answers = await _five(verifier, token)
                assert {_detail(answer) for answer in answers} == {failed}
                attempts.append(len(fetched))
            stub.mode = "up"
            clock.now += 8
            assert await _five(verifier, token) == [Identity("bob", "oidc", ("ml",))] * 5
            attempts.append(len(fetched))
            return attempts

        # Waits of 1 s after the first failure, then 2, 4 and 8 s: a round within a wait
        # asks nothing, the first round after it asks once.
        expected = [1, 1, 2, 2, 3, 3, 4, 6]
        assert _with_verifier(_stub_settings(stub), outage, requests=fetched, clock=clock) == (
            expected
        )


def test_a_known_key_does_not_wait_for_a_refresh_that_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A refresh that would outlast the test: a request waiting for it could not answer.
    monkeypatch.setattr(oidc, "HTTP_TIMEOUT_SECONDS", 3600.0)
    clock = Clock()
    fetched: list[str] = []
    with serving(_StubIssuer()) as stub:
        token = stub.token("olivia")

        async def hanging(verifier: OidcVerifier) -> list[Any]:
            await verifier.identify(token)
            stub.mode = "hanging"
            clock.now += oidc.KEYS_REFRESH_SECONDS + 1
            # Generous: the requests need no network, only the refresh does.
            async with asyncio.timeout(60):
                return await _five(verifier, token)

        answers = _with_verifier(_stub_settings(stub), hanging, requests=fetched, clock=clock)
    assert answers == [Identity("olivia", "oidc", ("ml",))] * 5
    assert fetched[2:] == [f"{stub.url}/.well-known/openid-configuration"]
