"""People who bring a JWT access token from the configured OpenID Connect issuer.

The issuer's discovery document and signing keys (JWKS) are fetched on first use and
cached. A token signed with a cached key is checked at once, without asking the issuer:
keys fetched more than ``KEYS_REFRESH_SECONDS`` ago are fetched again behind the request
that finds them due, which does not wait for it. A token signed with a key not in the cache
waits for a fetch, started at most every ``REFETCH_SECONDS``, which is how a rotated key
becomes known.

An issuer that goes down stops new keys, not the people already known: the cached keys go
on verifying tokens for ``KEYS_MAX_STALE_SECONDS`` after the last successful fetch, and past
that tokens are refused with a 503 that says so. At most one fetch is in flight and the
requests that need it share it, so none waits longer than ``HTTP_TIMEOUT_SECONDS`` (the
discovery document and the keys together); after a failure the issuer is asked again only
after a backoff (:mod:`.backoff`), and requests in between are answered at once.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import jwt

from ...config.auth import OidcSettings
from ...config.settings import Settings
from .backoff import Backoff
from .base import Identity, IdentityUnavailable, Unauthorized

# Asymmetric algorithms only: a symmetric one (HS256) would let anyone holding the
# public key sign tokens, and "none" signs nothing.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
# Clocks of the issuer and the controller may differ this much.
LEEWAY_SECONDS = 30
# An unknown key ID refetches the keys at most this often, so a stream of made-up key IDs
# cannot make the controller hammer the issuer.
REFETCH_SECONDS = 30.0
# Keys are refetched this long after the last successful fetch, so a key the issuer
# withdrew stops being accepted.
KEYS_REFRESH_SECONDS = 3600.0
# While the issuer cannot be asked, its last keys verify tokens this long after they were
# fetched: long enough to ride out an outage, short enough that a withdrawn key dies.
KEYS_MAX_STALE_SECONDS = 24 * 3600.0
# One fetch of the discovery document and the keys together: the longest a request waits.
HTTP_TIMEOUT_SECONDS = 5.0
# Claims quoted back in an error are cut to this length.
MAX_QUOTED = 120


def oidc_verifier(settings: Settings) -> OidcVerifier | None:
    """The verifier of the configured issuer, or None when no issuer is configured."""
    oidc = settings.auth.oidc
    return None if oidc is None else OidcVerifier(oidc, settings.auth.admin_groups)


class OidcVerifier:
    """A ``base.Verifier`` for the JWT access tokens of one issuer."""

    def __init__(
        self,
        settings: OidcSettings,
        admin_groups: list[str] | tuple[str, ...] = (),
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.issuer = settings.issuer
        self._admin_groups = frozenset(admin_groups)
        self._client = client or httpx.AsyncClient(timeout=HTTP_TIMEOUT_SECONDS)
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._discovery: dict[str, Any] | None = None
        # When the keys were last fetched, and when a fetch last started, failed or not.
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._fetch: asyncio.Task[None] | None = None
        self._backoff = Backoff(clock)

    async def aclose(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()
            await asyncio.wait([self._fetch])
        await self._client.aclose()

    @property
    def client(self) -> httpx.AsyncClient:
        return self._client

    async def endpoint(self, name: str) -> str:
        """One URL of the issuer's discovery document, such as ``token_endpoint``."""
        url = await self.published(name)
        if url is None:
            raise IdentityUnavailable(f"the OIDC issuer {self.issuer} publishes no {name}")
        return url

    async def published(self, name: str) -> str | None:
        """One URL of the issuer's discovery document, or None for a feature the issuer
        does not offer (``device_authorization_endpoint`` is optional, say)."""
        if self._discovery is None:
            await self._fetched(rate_limited=False)
        assert self._discovery is not None
        url = self._discovery.get(name)
        return url if isinstance(url, str) else None

    async def identify(self, token: str) -> Identity | None:
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            # Not a JWT at all (a hub token, say): another verifier may know it.
            return None
        issuer = unverified.get("iss")
        if issuer != self.issuer:
            raise Unauthorized(
                f"the token was issued by {_quote(issuer)}, not by the trusted issuer "
                f"{self.issuer!r}"
            )
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise Unauthorized(
                f"the token is signed with {_quote(algorithm)}; accepted: {', '.join(ALGORITHMS)}"
            )
        key = await self._key(header.get("kid"))
        try:
            claims = self._decode(token, key, algorithm, self.settings.audience)
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the token has expired; log in again") from None
        except jwt.ImmatureSignatureError:
            raise Unauthorized("the token is not valid yet (nbf or iat is in the future)") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized(
                f"the token is meant for {_quote(unverified.get('aud'))}, not for this "
                f"controller's audience {self.settings.audience!r}"
            ) from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("the token's signature does not match the issuer's key") from None
        except jwt.MissingRequiredClaimError as error:
            raise Unauthorized(f"the token has no {error.claim!r} claim") from None
        except jwt.PyJWTError as error:
            # PyJWT's messages name claims and formats, never the token itself.
            raise Unauthorized(f"the token is not valid: {error}") from None
        return self._identity(claims)

    def _decode(self, token: str, key: Any, algorithm: str, audience: str) -> dict[str, Any]:
        """The claims of a token this issuer signed with ``key`` for ``audience``; PyJWT's
        errors for the caller to word."""
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            audience=audience,
            issuer=self.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "iss", "aud"]},
        )
        return claims

    async def check_id_token(self, token: str, client_id: str, nonce: str) -> None:
        """Refuse (Unauthorized) unless ``token`` is an ID token this issuer signed for
        ``client_id`` in answer to the sign-in that sent ``nonce``: a code taken from
        another sign-in and brought here is told apart by its nonce."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthorized("the issuer's ID token is not a JWT") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            accepted = ", ".join(ALGORITHMS)
            raise Unauthorized(
                f"the ID token is signed with {_quote(algorithm)}; accepted: {accepted}"
            )
        key = await self._key(header.get("kid"))
        try:
            claims = self._decode(token, key, algorithm, client_id)
        except jwt.PyJWTError as error:
            # PyJWT's messages name claims and formats, never the token itself.
            raise Unauthorized(f"the ID token is not valid: {error}") from None
        presented = claims.get("nonce")
        if not isinstance(presented, str) or not hmac.compare_digest(
            presented.encode(), nonce.encode()
        ):
            raise Unauthorized("the ID token answers another sign-in (its nonce differs)")

    def _identity(self, claims: Mapping[str, Any]) -> Identity:
        username_claim = self.settings.username_claim
        user = claims.get(username_claim)
        if not isinstance(user, str) or not user.strip():
            raise Unauthorized(f"the token has no username in its {username_claim!r} claim")
        groups_claim = self.settings.groups_claim
        raw_groups = claims.get(groups_claim, [])
        if not isinstance(raw_groups, list) or not all(isinstance(g, str) for g in raw_groups):
            raise Unauthorized(f"the token's {groups_claim!r} claim is not a list of group names")
        groups = tuple(dict.fromkeys(raw_groups))
        return Identity(
            user=user,
            mode="oidc",
            groups=groups,
            admin=not self._admin_groups.isdisjoint(groups),
        )

    async def _key(self, key_id: object) -> jwt.PyJWK:
        age = None if self._fetched_at is None else self._clock() - self._fetched_at
        usable = age is not None and age <= KEYS_MAX_STALE_SECONDS
        key = self._lookup(key_id) if usable else None
        if key is not None:
            if age is not None and age > KEYS_REFRESH_SECONDS:
                self._start_fetch(rate_limited=False)
            return key
        try:
            # Anyone can make up a key ID: one in a usable key set refetches only in a while.
            await self._fetched(rate_limited=usable)
        except IdentityUnavailable as failure:
            raise self._outage(failure) from None
        key = self._lookup(key_id)
        if key is None:
            raise Unauthorized(
                f"the token is signed with key {_quote(key_id)}, which the issuer does not publish"
            )
        return key

    def _lookup(self, key_id: object) -> jwt.PyJWK | None:
        if isinstance(key_id, str):
            return self._keys.get(key_id)
        # A token without a key ID is usable only when the issuer has a single key.
        if key_id is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return None

    def _outage(self, failure: IdentityUnavailable) -> IdentityUnavailable:
        """What a request that found no usable key is told when the issuer failed."""
        if self._fetched_at is None:
            return failure
        age = self._clock() - self._fetched_at
        if age <= KEYS_MAX_STALE_SECONDS:
            return failure
        return IdentityUnavailable(
            f"tokens of the OIDC issuer {self.issuer} cannot be checked: its keys were last "
            f"fetched {age / 3600:.1f} h ago, more than the {KEYS_MAX_STALE_SECONDS / 3600:g} h "
            f"they are trusted without it, and fetching them again failed: {failure.detail}"
        )

    async def _fetched(self, rate_limited: bool) -> None:
        """Wait for the fetch in flight or a new one; with none allowed yet, raise the last
        fetch's failure, or return when the last fetch succeeded."""
        fetch = self._start_fetch(rate_limited)
        if fetch is not None:
            # A request that goes away leaves the fetch to the others.
            await asyncio.shield(fetch)
        elif self._backoff.failure is not None:
            raise IdentityUnavailable(self._backoff.failure.detail)

    def _start_fetch(self, rate_limited: bool) -> asyncio.Task[None] | None:
        """The fetch in flight, else a new one unless the backoff (or, when
        ``rate_limited``, ``REFETCH_SECONDS``) says to wait."""
        if self._fetch is not None:
            return self._fetch
        now = self._clock()
        if self._backoff.waiting:
            return None
        recent = self._attempted_at is not None and now - self._attempted_at < REFETCH_SECONDS
        if rate_limited and recent:
            return None
        self._attempted_at = now
        self._fetch = asyncio.ensure_future(self._fetch_keys())
        self._fetch.add_done_callback(self._fetch_done)
        return self._fetch

    def _fetch_done(self, fetch: asyncio.Task[None]) -> None:
        self._fetch = None
        if not fetch.cancelled():
            # Retrieved here, so that a fetch nobody waited for logs no stray traceback: its
            # failure is logged by the backoff.
            fetch.exception()

    async def _fetch_keys(self) -> None:
        try:
            async with asyncio.timeout(HTTP_TIMEOUT_SECONDS):
                discovery, keys = await self._download()
        except TimeoutError:
            failure = IdentityUnavailable(
                f"the OIDC issuer {self.issuer} did not answer within {HTTP_TIMEOUT_SECONDS:g}s; "
                "try again later"
            )
            self._backoff.failed(failure)
            raise failure from None
        except IdentityUnavailable as failure:
            self._backoff.failed(failure)
            raise
        self._keys = keys
        self._discovery = discovery
        self._fetched_at = self._clock()
        self._backoff.succeeded()

    async def _download(self) -> tuple[dict[str, Any], dict[str, jwt.PyJWK]]:
        """The issuer's discovery document and signing keys."""
        discovery = await self._get_json(
            f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
        )
        if discovery.get("issuer") != self.issuer:
            raise IdentityUnavailable(
                f"the OIDC issuer {self.issuer} describes itself as "
                f"{_quote(discovery.get('issuer'))}; the configured issuer must match it "
                "exactly"
            )
        jwks_uri = discovery.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise IdentityUnavailable(f"the OIDC issuer {self.issuer} publishes no jwks_uri")
        return discovery, self._parse_keys(await self._get_json(jwks_uri))

    def _parse_keys(self, jwks: Mapping[str, Any]) -> dict[str, jwt.PyJWK]:
        keys: dict[str, jwt.PyJWK] = {}
        entries = jwks.get("keys")
        if not isinstance(entries, list):
            raise IdentityUnavailable(f"the OIDC issuer {self.issuer} published no key set")
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWTError:
                # A key of a type this controller cannot use (or a malformed one) is skipped,
                # as the issuer may publish keys for other purposes.
                continue
            keys[str(entry.get("kid", f"#{index}"))] = key
        return keys

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            answer = await self._client.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise IdentityUnavailable(
                f"the OIDC issuer {self.issuer} cannot be reached ({type(error).__name__}); "
                "try again later"
            ) from None
        if answer.status_code != 200:
            raise IdentityUnavailable(
                f"the OIDC issuer {self.issuer} answered {answer.status_code} for {url}"
            )
        try:
            body = answer.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise IdentityUnavailable(f"the OIDC issuer {self.issuer} answered {url} without JSON")
        return body


def _quote(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= MAX_QUOTED else shown[: MAX_QUOTED - 3] + "..."
