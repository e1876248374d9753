"""Who a request speaks for: the operator, or one person known to an identity provider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from ..k8s.kube import ApiProblem

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


class IdentityUnavailable(ApiProblem):
    """The identity provider that would vouch for a token cannot be asked right now."""

    def __init__(self, detail: str) -> None:
        super().__init__(503, detail, {"Retry-After": "5"})


class Verifier(Protocol):
    """Turns a bearer token into a person, for one identity provider.

    ``identify`` answers None for a token this provider does not issue, so the next one may
    try; raises ``auth.Unauthorized`` for one it issues but refuses (expired, wrongly
    signed), and ``IdentityUnavailable`` when it cannot tell.
    """

    async def identify(self, token: str) -> Identity | None: ...
