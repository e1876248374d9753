"""The ``auth`` block: who may call the API besides the operator token (people of an
OpenID Connect issuer, people of a JupyterHub), and who among them is an admin.
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated

import httpx
from pydantic import (
    AfterValidator,
    Field,
    StrictStr,
    StringConstraints,
    WithJsonSchema,
)

from .base import Model, WholeNumber
from .formats import UrlWithoutCredentials
from .violations import fail

# A group as the identity providers name it.
GroupName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
_LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
MAX_ISSUER_LENGTH = 2048


def _check_issuer(value: str) -> str:
    if len(value) > MAX_ISSUER_LENGTH:
        raise fail(f"must be at most {MAX_ISSUER_LENGTH} characters")
    try:
        parts = urllib.parse.urlsplit(value)
        host = parts.hostname
    except ValueError as error:
        raise fail(f"{value!r} is not a URL: {error}") from None
    if parts.username is not None or parts.password is not None:
        # Not quoted: the value holds a secret.
        raise fail("must not carry credentials (user:password@)")
    if parts.scheme not in ("https", "http") or not host:
        raise fail(f"{value!r} is not an issuer URL: use https://<host>[/<path>]")
    if parts.scheme == "http" and host not in _LOOPBACK_HOSTS:
        raise fail(
            f"{value!r} must use https: tokens and keys from a plain-HTTP issuer can be "
            "forged on the way (plain http is allowed for a loopback host only)"
        )
    if parts.query or parts.fragment:
        raise fail(f"{value!r} must not carry a query or a fragment")
    return value


# Compared character for character with the tokens' iss claim, as OpenID Connect asks.
IssuerUrl = Annotated[
    StrictStr,
    AfterValidator(_check_issuer),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^(https://|http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?(/|$))",
            "maxLength": MAX_ISSUER_LENGTH,
        }
    ),
]
ClaimName = Annotated[StrictStr, StringConstraints(min_length=1, max_length=256)]
ClientId = Annotated[StrictStr, StringConstraints(min_length=1, max_length=256)]


class OidcSettings(Model):
    """People who bring a JWT access token from one OpenID Connect issuer."""

    # Exactly as the issuer writes it in its tokens' iss claim (mind a trailing slash);
    # its discovery document is read from <issuer>/.well-known/openid-configuration.
    issuer: IssuerUrl
    # The value a token's aud claim must hold: with most issuers, the client ID.
    audience: ClientId
    # The claim whose value is the person's username; it must be a non-empty string.
    username_claim: ClaimName = "preferred_username"
    # The claim that lists the person's groups; a token without it has no groups.
    groups_claim: ClaimName = "groups"
    # The public client (no secret; code flow with PKCE) that `devbox login --oidc` uses;
    # unset, the controller offers no such login.
    cli_client_id: ClientId | None = None


MAX_HUB_CACHE_SECONDS = 300


def _hub_address(value: str) -> str:
    """A URL the controller can ask, checked as its HTTP client reads it, so that a host
    or port it cannot use stops the controller at start instead of failing each request."""
    try:
        url = httpx.URL(value)
        # The host is decoded only when read.
        host, port = url.host, url.port
    except (httpx.InvalidURL, ValueError) as err:
        raise fail(f"{value!r} does not name a usable host: {err}") from None
    if not host:
        raise fail(f"{value!r} names no host")
    if port is not None and not 0 < port < 65536:
        raise fail(f"the port must be between 1 and 65535, got {port}")
    return value


class HubSettings(Model):
    """A JupyterHub whose people's tokens the API accepts (docs/operator-guide.md)."""

    # The hub's REST API, as single-user servers see it in JUPYTERHUB_API_URL,
    # e.g. http://hub.jhub.svc:8081/hub/api.
    api_url: Annotated[UrlWithoutCredentials, AfterValidator(_hub_address)]
    # How long the hub's answer about a token is trusted; a token the hub revokes keeps
    # working for at most this long.
    cache_seconds: Annotated[int, WholeNumber(1, MAX_HUB_CACHE_SECONDS)] = 30


class AuthSettings(Model):
    """Who may call the API besides the operator token, and who among them is an admin."""

    # People in any of these groups see and act on every box, as the operator token does.
    admin_groups: list[GroupName] = Field(default_factory=list, max_length=64)
    oidc: OidcSettings | None = None

    hub: HubSettings | None = None
