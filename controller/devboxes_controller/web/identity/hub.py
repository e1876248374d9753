"""People of a JupyterHub: the hub says whose a token is, and the answer is kept briefly.

A single-user server's ``JUPYTERHUB_API_TOKEN``, like every hub token, may ask the hub's
``GET /user`` for its owner's name and groups, so the controller needs no hub token of
its own. Answers are cached by a digest of the token, never the token itself: a person's
answer for ``auth.hub.cacheSeconds``, a refusal for a few seconds at most, so that a
revoked token stops working soon and a bad token cannot make the controller ask the hub
on every request. Requests with the same token that arrive while the hub is being asked
about it wait for that one answer, as a Lab's first requests do; no request waits longer
than ``HUB_TIMEOUT_SECONDS``.

A hub that cannot answer does not lock out the people it named: the answer it last gave
about a person's token keeps working for ``STALE_SECONDS`` after it was given, and such
requests no longer wait for the hub; other tokens are answered 503 at once. The hub is
asked again after a backoff (:mod:`.backoff`), one question at a time until it answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx

from ...config.settings import Settings
from .backoff import Backoff
from .base import Identity, IdentityUnavailable, Unauthorized

# At most this many tokens' answers are kept; the least recently used go first.
MAX_CACHED = 10_000
# A refusal is kept this long (or cacheSeconds, when shorter).
REFUSAL_SECONDS = 5.0
# While the hub cannot answer, its answer about a person is used this long after it gave
# it: an outage of the hub is ridden out, and a token revoked meanwhile dies at the end.
STALE_SECONDS = 3600.0
# One question to the hub, connecting and waiting for a connection included.
HUB_TIMEOUT_SECONDS = 5.0
# What the hub may be sent in a header: printable ASCII of a sane length. Anything else
# is no hub token.
_TOKEN_RE = re.compile(r"[\x21-\x7e]{1,4096}")
_SERVICE_REFUSAL = "a JupyterHub service's token speaks for no person; use a person's token"


@dataclass(frozen=True)
class _Answer:
    answered: float
    expires: float
    # None: the hub does not know the token; a string: why it is refused.
    identity: Identity | str | None


class HubVerifier:
    """Implements :class:`.base.Verifier` for one JupyterHub.

    ``hub_requests`` counts the questions put to the hub, for tests and benchmarks;
    ``clock`` is the time the cache goes by, so that they need not wait for it. Its
    connections to the hub stay open until ``aclose``.
    """

    def __init__(
        self,
        api_url: str,
        cache_seconds: float,
        admin_groups: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.cache_seconds = cache_seconds
        self.admin_groups = frozenset(admin_groups)
        self.hub_requests = 0
        self._clock = clock
        self._cache: OrderedDict[bytes, _Answer] = OrderedDict()
        self._asking: dict[bytes, asyncio.Task[Identity | str | None]] = {}
        self._backoff = Backoff(clock)
        self._client = httpx.AsyncClient(timeout=HUB_TIMEOUT_SECONDS, follow_redirects=False)

    def __repr__(self) -> str:
        return f"HubVerifier(api_url={self.api_url!r}, cache_seconds={self.cache_seconds!r})"

    async def identify(self, token: str) -> Identity | None:
        if not _TOKEN_RE.fullmatch(token):
            return None
        key = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            if cached.expires > now:
                return _result(cached.identity)
        stale = None
        if cached is not None and now - cached.answered <= STALE_SECONDS:
            stale = cached.identity if isinstance(cached.identity, Identity) else None
        asking = self._asking.get(key) or self._start_asking(key, token)
        failure = self._backoff.failure
        if stale is not None and failure is not None:
            return stale
        if asking is None:
            assert failure is not None, "the hub is only left unasked after a failure"
            raise IdentityUnavailable(failure.detail)
        try:
            # A caller that goes away leaves the question to the others.
            return _result(await asyncio.shield(asking))
        except IdentityUnavailable:
            if stale is None:
                raise
            return stale

    def _start_asking(self, key: bytes, token: str) -> asyncio.Task[Identity | str | None] | None:
        """A new question about ``token``; None while the hub's backoff lasts, or while it
        fails and another question is out."""
        if self._backoff.waiting or (self._backoff.failure is not None and self._asking):
            return None
        asking = asyncio.ensure_future(self._ask_and_remember(key, token))
        self._asking[key] = asking
        asking.add_done_callback(lambda done: self._forget(key, done))
        return asking

    async def _ask_and_remember(self, key: bytes, token: str) -> Identity | str | None:
        try:
            # httpx bounds each step of a question; this bounds the whole, waiting for a
            # pooled connection included.
            async with asyncio.timeout(HUB_TIMEOUT_SECONDS):
                answer = await self._ask(token)
        except TimeoutError:
            failure = self._too_slow()
            self._backoff.failed(failure)
            raise failure from None
        except IdentityUnavailable as failure:
            self._backoff.failed(failure)
            raise
        self._backoff.succeeded()
        now = self._clock()
        keep = self.cache_seconds if isinstance(answer, Identity) else REFUSAL_SECONDS
        self._remember(key, _Answer(now, now + min(keep, self.cache_seconds), answer))
        return answer

    def _forget(self, key: bytes, done: asyncio.Task[Identity | str | None]) -> None:
        self._asking.pop(key, None)
        if not done.cancelled():
            # Retrieved here, so that a question nobody waits for any more logs nothing.
            done.exception()

    def _remember(self, key: bytes, answer: _Answer) -> None:
        self._cache[key] = answer
        self._cache.move_to_end(key)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)

    async def _ask(self, token: str) -> Identity | str | None:
        """The hub's word on ``token``; raises IdentityUnavailable when there is none."""
        self.hub_requests += 1
        try:
            response = await self._client.get(
                f"{self.api_url}/user", headers={"Authorization": f"token {token}"}
            )
        except httpx.TimeoutException:
            raise self._too_slow() from None
        except httpx.HTTPError as err:
            raise self._unavailable(f"cannot be reached ({type(err).__name__})") from None
        if response.status_code in (401, 403):
            return None
        if response.status_code != 200:
            # A redirect or a 404 is what a hub answers outside its API.
            elsewhere = response.is_redirect or response.status_code == 404
            hint = "; auth.hub.apiUrl should name the hub's API, ending in /hub/api"
            raise self._unavailable(f"answered HTTP {response.status_code}{hint * elsewhere}")
        try:
            model = response.json()
            kind, name, groups = model.get("kind"), model["name"], model.get("groups", [])
        except (ValueError, KeyError, AttributeError):
            raise self._unavailable("answered with something that is not a user") from None
        if kind != "user":
            return _SERVICE_REFUSAL
        if not isinstance(name, str) or not name or not _strings(groups):
            raise self._unavailable("answered with something that is not a user")
        return Identity(
            user=name,
            mode="hub",
            groups=tuple(groups),
            admin=not self.admin_groups.isdisjoint(groups),
        )

    def _too_slow(self) -> IdentityUnavailable:
        return self._unavailable(f"did not answer within {HUB_TIMEOUT_SECONDS:g}s")

    def _unavailable(self, what: str) -> IdentityUnavailable:
        return IdentityUnavailable(
            f"cannot check a JupyterHub token: the hub at {self.api_url} {what}"
        )

    async def aclose(self) -> None:
        questions = list(self._asking.values())
        for question in questions:
            question.cancel()
        if questions:
            await asyncio.wait(questions)
        await self._client.aclose()


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _result(answer: Identity | str | None) -> Identity | None:
    if isinstance(answer, str):
        raise Unauthorized(answer)
    return answer


def hub_verifier(settings: Settings) -> HubVerifier | None:
    """The verifier of the configured hub; None when no hub is configured."""
    hub = settings.auth.hub
    if hub is None:
        return None
    return HubVerifier(hub.api_url, hub.cache_seconds, settings.auth.admin_groups)
