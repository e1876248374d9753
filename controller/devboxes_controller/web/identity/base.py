"""Who a request speaks for (the operator, or one person known to an identity provider),
what every provider implements, and the refusals they share."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Protocol

from starlette.requests import HTTPConnection

from ...k8s.kube import ApiProblem

# How the caller proved who they are; ``GET /api/v1/whoami`` reports it.
Mode = Literal["operator", "hub", "oidc", "browser-session", "cli-bearer"]


@dataclass(frozen=True)
class Identity:
    user: str
    mode: Mode
    groups: tuple[str, ...] = ()
    # Admins see and act on every box; people see only their own.
    admin: bool = False

    @property
    def scope(self) -> str | None:
        """Whose boxes the caller sees and acts on: everyone's for an admin (None), else
        only their own."""
        return None if self.admin else self.user


class Unauthorized(ApiProblem):
    def __init__(self, detail: str = "authentication required") -> None:
        super().__init__(401, detail, {"WWW-Authenticate": "Bearer"})


class Forbidden(ApiProblem):
    def __init__(self, detail: str) -> None:
        super().__init__(403, detail)


class IdentityUnavailable(ApiProblem):
    """The identity provider that would vouch for a token cannot be asked right now."""

    def __init__(self, detail: str) -> None:
        super().__init__(503, detail, {"Retry-After": "5"})


class Verifier(Protocol):
    """Turns a bearer token into a person, for one identity provider.

    ``identify`` answers None for a token this provider does not issue, so the next one may
    try; raises ``Unauthorized`` for one it issues but refuses (expired, wrongly signed),
    and ``IdentityUnavailable`` when it cannot tell.
    """

    async def identify(self, token: str) -> Identity | None: ...

    async def aclose(self) -> None:
        """Close the provider's connections, when the controller stops."""


def bearer(connection: HTTPConnection) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def with_admin_groups(identity: Identity, admin_groups: frozenset[str]) -> Identity:
    """A person in one of the operator's admin groups is an admin."""
    if admin_groups.isdisjoint(identity.groups):
        return identity
    return replace(identity, admin=True)


def owner_scope(identity: Identity, owner: str | None) -> str | None:
    """Whose boxes a listing asked for ``owner``'s shows: an admin may name anyone, others
    only themselves; without ``owner``, what the caller sees."""
    if owner is None:
        return identity.scope
    if not identity.admin and owner != identity.user:
        raise Forbidden("only admins may list another person's boxes")
    return owner
