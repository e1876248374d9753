"""The JupyterHub verifier against a real hub: who a token is, refusals, a hub that is
gone, and the cache that spares the hub a question per request. A hub of the tests' own,
which can be made to fail or hang, shows how long people outlive a hub outage and how
little of it any request waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.config.violations import ConfigError
from devboxes_controller.web.identity import hub as hub_module
from devboxes_controller.web.identity.base import Identity, IdentityUnavailable, Unauthorized
from devboxes_controller.web.identity.hub import (
    REFUSAL_SECONDS,
    STALE_SECONDS,
    HubVerifier,
    hub_verifier,
)
from devboxes_testbed.hub import Hub
from support import Clock, OutageHandler, OutageServer, serving, wait_for

T = TypeVar("T")


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())  # type: ignore[arg-type]


def asked(hub: Hub, who: str) -> int:
    """How many times the hub's log says ``GET /user`` was answered for ``who``."""
    lines = hub.log.read_text(errors="replace").splitlines()
    return sum(" GET /hub/api/user " in line and f"({who}@" in line for line in lines)


def verifier(hub: Hub, clock: Clock | None = None, **kwargs: Any) -> HubVerifier:
    return HubVerifier(hub.api_url, 30, clock=clock or Clock(), **kwargs)


def test_a_persons_token_names_them_and_their_groups(hub: Hub) -> None:
    alice, olivia = hub.token_for("alice"), hub.token_for("olivia")

    async def scenario() -> tuple[Identity | None, Identity | None]:
        checker = verifier(hub, admin_groups=["gpu-admins"])
        try:
            return await checker.identify(alice), await checker.identify(olivia)
        finally:
            await checker.aclose()

    assert run(scenario) == (
        Identity("alice", "hub", ("ml",), admin=False),
        Identity("olivia", "hub", ("gpu-admins",), admin=True),
    )


def test_a_token_the_hub_does_not_know_is_none_of_its_people(hub: Hub) -> None:
    async def scenario() -> list[Identity | None]:
        checker = verifier(hub)
        try:
            return [
                await checker.identify("0" * 32),
                # Never sent: no hub token looks like this.
                await checker.identify("tökén with spaces"),
            ]
        finally:
            await checker.aclose()

    assert run(scenario) == [None, None]


def test_a_service_token_is_refused_as_no_person(hub: Hub) -> None:
    async def scenario() -> None:
        checker = verifier(hub)
        try:
            await checker.identify(hub.service_token)
        finally:
            await checker.aclose()

    with pytest.raises(Unauthorized) as caught:
        run(scenario)
    assert "service" in caught.value.detail


def test_the_cache_answers_again_without_the_hub_until_it_expires(hub: Hub) -> None:
    token = hub.token_for("bob")
    clock = Clock()
    before = asked(hub, "bob")

    async def scenario() -> list[Identity | None]:
        checker = verifier(hub, clock)
        try:
            first = await checker.identify(token)
            clock.now += 29
            second = await checker.identify(token)
            assert checker.hub_requests == 1
            clock.now += 2
            third = await checker.identify(token)
            assert checker.hub_requests == 2
            return [first, second, third]
        finally:
            await checker.aclose()

    bob = Identity("bob", "hub", ("vision",))
    assert run(scenario) == [bob, bob, bob]
    # The hub's own log agrees: two questions about bob, not three. It logs a request
    # after answering it, so the last line may come a moment later.
    wait_for(lambda: asked(hub, "bob") - before >= 2, timeout=60)
    assert asked(hub, "bob") - before == 2


def test_requests_with_one_token_at_once_ask_the_hub_once(hub: Hub) -> None:
    token = hub.token_for("olivia")
    before = asked(hub, "olivia")

    async def scenario() -> list[Identity | None]:
        checker = verifier(hub)
        try:
            answers = await asyncio.gather(*(checker.identify(token) for _ in range(10)))
            assert checker.hub_requests == 1
            return list(answers)
        finally:
            await checker.aclose()

    assert run(scenario) == [Identity("olivia", "hub", ("gpu-admins",))] * 10
    wait_for(lambda: asked(hub, "olivia") - before >= 1, timeout=60)
    assert asked(hub, "olivia") - before == 1


def test_a_revoked_token_stops_working_when_its_answer_expires(hub: Hub) -> None:
    token = hub.token_for("alice", note="to be revoked")
    clock = Clock()

    async def scenario() -> list[Identity | None]:
        checker = verifier(hub, clock)
        try:
            before = await checker.identify(token)
            token_id = hub.request("GET", "/user", token=token)["token_id"]
            hub.request("DELETE", f"/users/alice/tokens/{token_id}")
            cached = await checker.identify(token)
            clock.now += 31
            return [before, cached, await checker.identify(token)]
        finally:
            await checker.aclose()

    alice = Identity("alice", "hub", ("ml",))
    assert run(scenario) == [alice, alice, None]


def test_a_refusal_is_remembered_briefly(hub: Hub) -> None:
    clock = Clock()

    async def scenario() -> list[int]:
        checker = verifier(hub, clock)
        counts = []
        try:
            for step in (0.0, REFUSAL_SECONDS - 1, 2.0):
                clock.now += step
                assert await checker.identify("f" * 32) is None
                counts.append(checker.hub_requests)
            return counts
        finally:
            await checker.aclose()

    assert run(scenario) == [1, 1, 2]


def test_a_hub_that_is_down_is_a_503_naming_the_hub_never_the_token(tmp_path: Path) -> None:
    own = Hub(tmp_path / "hub")
    own.start(log=lambda message: None)
    try:
        token = own.token_for("alice")
    finally:
        own.stop()

    async def scenario() -> None:
        checker = HubVerifier(own.api_url, 30)
        try:
            await checker.identify(token)
        finally:
            await checker.aclose()

    with pytest.raises(IdentityUnavailable) as caught:
        run(scenario)
    problem = caught.value
    assert problem.status == 503
    assert f"the hub at {own.api_url} cannot be reached" in problem.detail
    assert token not in problem.detail


def test_a_wrong_api_url_says_where_the_api_is(hub: Hub) -> None:
    async def scenario() -> None:
        checker = HubVerifier(hub.api_url.removesuffix("/hub/api"), 30)
        try:
            await checker.identify(hub.token_for("alice"))
        finally:
            await checker.aclose()

    with pytest.raises(
        IdentityUnavailable,
        match=r"answered HTTP 302; auth.hub.apiUrl should name the hub's API, ending in /hub/api",
    ):
        run(scenario)


def test_settings_name_the_hub_and_bound_the_cache() -> None:
    assert hub_verifier(settings_from_mapping({})) is None
    settings = settings_from_mapping(
        {"auth": {"adminGroups": ["gpu-admins"], "hub": {"apiUrl": "http://hub:8081/hub/api/"}}}
    )
    made = hub_verifier(settings)
    assert made is not None
    assert (made.api_url, made.cache_seconds, made.admin_groups) == (
        "http://hub:8081/hub/api",
        30,
        frozenset({"gpu-admins"}),
    )
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping(
            {"auth": {"hub": {"apiUrl": "http://me:secret@hub/hub/api", "cacheSeconds": 301}}}
        )
    assert caught.value.violations == [
        "auth.hub.apiUrl: must not carry a user name or password: messages show this URL",
        "auth.hub.cacheSeconds: must be between 1 and 300, got 301",
    ]


@pytest.mark.parametrize(
    ("api_url", "violation"),
    [
        ("http://hub:99999/hub/api", "the port must be between 1 and 65535, got 99999"),
        ("http://:8081/hub/api", "'http://:8081/hub/api' names no host"),
        ("http://xn--/hub/api", "'http://xn--/hub/api' does not name a usable host"),
    ],
)
def test_an_api_url_the_controller_cannot_ask_stops_it_at_start(
    api_url: str, violation: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping({"auth": {"hub": {"apiUrl": api_url}}})
    [found] = caught.value.violations
    assert found.startswith(f"auth.hub.apiUrl: {violation}")


class _StubHub(OutageServer):
    """A hub of the test's own whose people are ``<name>-token`` for a few names."""

    def __init__(self) -> None:
        super().__init__(_StubHubHandler)
        self.api_url = f"{self.url}/hub/api"


class _StubHubHandler(OutageHandler):
    def do_GET(self) -> None:
        if self.in_outage({"message": "the hub is restarting"}):
            return
        token = self.headers.get("Authorization", "").removeprefix("token ")
        name = token.removesuffix("-token")
        if token == name or name not in ("alice", "bob", "carol", "dan", "erin"):
            self.send_json(403, {"message": "invalid token"})
        else:
            self.send_json(200, {"kind": "user", "name": name, "groups": ["ml"]})


ALICE = Identity("alice", "hub", ("ml",))
OTHERS = ("bob-token", "carol-token", "dan-token", "erin-token")


async def _together(checker: HubVerifier, *tokens: str) -> list[Any]:
    """Requests with ``tokens`` at once: each one's person or what it raised."""
    return list(
        await asyncio.gather(*(checker.identify(t) for t in tokens), return_exceptions=True)
    )


def _details(answers: list[Any]) -> set[str]:
    assert all(isinstance(a, IdentityUnavailable) and a.status == 503 for a in answers), answers
    return {a.detail for a in answers}


def test_through_a_hub_outage_a_persons_answer_keeps_working_for_a_bounded_time() -> None:
    clock = Clock()
    with serving(_StubHub()) as stub:
        failed = f"cannot check a JupyterHub token: the hub at {stub.api_url} answered HTTP 503"

        async def outage() -> list[int]:
            checker = HubVerifier(stub.api_url, 30, clock=clock)
            asked = []
            try:
                assert await checker.identify("alice-token") == ALICE
                stub.mode = "failing"
                clock.now += 31
                # Not yet known to fail, the hub is asked; its failure falls back on the
                # answer it gave.
                assert await checker.identify("alice-token") == ALICE
                asked.append(checker.hub_requests)
                # Known to fail, it is not asked within its backoff: alice is answered from
                # the cache, bob, whom it never named, is told it failed.
                assert await _together(checker, *["alice-token"] * 5) == [ALICE] * 5
                assert _details(await _together(checker, *["bob-token"] * 5)) == {failed}
                asked.append(checker.hub_requests)
                # After the first wait, one question; the next wait is longer.
                clock.now += 1
                assert _details(await _together(checker, "bob-token")) == {failed}
                assert await checker.identify("alice-token") == ALICE
                asked.append(checker.hub_requests)
                # The answer about alice, older than the bound, is no more used.
                clock.now = 1000 + 31 + STALE_SECONDS + 1
                assert _details(await _together(checker, "alice-token")) == {failed}
                asked.append(checker.hub_requests)
                stub.mode = "up"
                clock.now += 60
                assert await checker.identify("alice-token") == ALICE
                asked.append(checker.hub_requests)
                return asked
            finally:
                await checker.aclose()

        assert run(outage) == [2, 2, 3, 4, 5]


def test_during_a_hub_outage_no_request_waits_for_more_than_one_question(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A short question, so that the hub's silence costs the test little.
    monkeypatch.setattr(hub_module, "HUB_TIMEOUT_SECONDS", 0.5)
    clock = Clock()
    with serving(_StubHub()) as stub:
        failed = (
            f"cannot check a JupyterHub token: the hub at {stub.api_url} did not answer within 0.5s"
        )

        async def outage() -> list[int]:
            checker = HubVerifier(stub.api_url, 30, clock=clock)
            asked = []
            try:
                assert await checker.identify("alice-token") == ALICE
                stub.mode = "hanging"
                clock.now += 31
                # Five requests with one token share one question, and fall back on the
                # answer the hub gave once it times out.
                assert await _together(checker, *["alice-token"] * 5) == [ALICE] * 5
                asked.append(checker.hub_requests)
                # Within the backoff, tokens it never answered about are told at once.
                assert _details(await _together(checker, *OTHERS)) == {failed}
                asked.append(checker.hub_requests)
                return asked
            finally:
                await checker.aclose()

        assert run(outage) == [2, 2]


def test_a_person_known_to_a_failing_hub_never_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Questions that would outlast the test: a request that waited for one could not answer.
    monkeypatch.setattr(hub_module, "HUB_TIMEOUT_SECONDS", 3600.0)
    clock = Clock()
    with serving(_StubHub()) as stub:
        failed = f"cannot check a JupyterHub token: the hub at {stub.api_url} answered HTTP 503"

        async def outage() -> list[Any]:
            checker = HubVerifier(stub.api_url, 30, clock=clock)
            try:
                assert await checker.identify("alice-token") == ALICE
                stub.mode = "failing"
                assert _details(await _together(checker, "bob-token")) == {failed}
                stub.mode = "hanging"
                clock.now += 31
                # Past the first wait, the first request asks the hub without waiting for
                # it; while that question is out, the others ask nothing. Generous: no
                # answer needs the hub.
                async with asyncio.timeout(60):
                    answers = await _together(checker, *["alice-token"] * 5, *OTHERS)
                return [checker.hub_requests, *answers]
            finally:
                await checker.aclose()

        asked, *answers = run(outage)
    assert asked == 3
    assert answers[:5] == [ALICE] * 5
    assert _details(answers[5:]) == {failed}
