"""People who bring a JWT access token from the configured OpenID Connect issuer.

The issuer's discovery document and signing keys (JWKS) are fetched on first use and
cached; a token signed with a key not in the cache makes one refetch, at most every
``REFETCH_SECONDS``, which is how a rotated key becomes known. Once the keys are cached a
token is checked without asking the issuer, so an issuer that goes down stops new keys,
not the people already known.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Mapping
from typing import Any

import httpx
import jwt

from ..config.settings import OidcSettings, Settings
from .auth import Unauthorized
from .people import Identity, IdentityUnavailable

# Asymmetric algorithms only: a symmetric one (HS256) would let anyone holding the
# public key sign tokens, and "none" signs nothing.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
# Clocks of the issuer and the controller may differ this much.
LEEWAY_SECONDS = 30
# An unknown key ID refetches the keys at most this often, so a stream of made-up key IDs
# cannot make the controller hammer the issuer.
REFETCH_SECONDS = 30.0
# Keys are refetched this long after the last fetch, so a key the issuer withdrew stops
# being accepted.
KEYS_MAX_AGE_SECONDS = 3600.0
HTTP_TIMEOUT_SECONDS = 5.0
# Claims quoted back in an error are cut to this length.
MAX_QUOTED = 120


def oidc_verifier(settings: Settings) -> OidcVerifier | None:
    """The verifier of the configured issuer, or None when no issuer is configured."""
    oidc = settings.auth.oidc
    return None if oidc is None else OidcVerifier(oidc, settings.auth.admin_groups)


class OidcVerifier:
    """A ``people.Verifier`` for the JWT access tokens of one issuer."""

    def __init__(
        self,
        settings: OidcSettings,
        admin_groups: list[str] | tuple[str, ...] = (),
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.issuer = settings.issuer
        self._admin_groups = frozenset(admin_groups)
        self._client = client or httpx.AsyncClient(timeout=HTTP_TIMEOUT_SECONDS)
        self._keys: dict[str, jwt.PyJWK] = {}
        self._discovery: dict[str, Any] | None = None
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()

    async def aclose(self) -> None:
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
            await self._refresh(self._fetched_at)
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
        now = time.monotonic()
        stale = self._fetched_at is None or now - self._fetched_at > KEYS_MAX_AGE_SECONDS
        missing = self._lookup(key_id) is None
        may_refetch = self._fetched_at is None or now - self._fetched_at > REFETCH_SECONDS
        if stale or (missing and may_refetch):
            await self._refresh(self._fetched_at)
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

    async def _refresh(self, seen: float | None) -> None:
        async with self._lock:
            # Requests that waited on the lock use the keys the first one fetched.
            if self._fetched_at != seen:
                return
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
            self._keys = self._parse_keys(await self._get_json(jwks_uri))
            self._discovery = discovery
            self._fetched_at = time.monotonic()

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
