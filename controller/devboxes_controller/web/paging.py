"""The ``continue`` token of a paged box list.

A token is ``PAYLOAD.MAC``, both unpadded base64url: the payload is a small JSON object
holding the last name of the page it follows, the filters of its list, when it was
issued and which key signed it; the MAC is an HMAC-SHA256 over the payload with a key
derived from the operator token. Every replica holding the same operator token honours
every other replica's tokens, and a restart keeps them valid, because the position is a
name and not a place in some replica's memory.

Rejections are precise: 400 for a token this controller family never issued (bad
encoding, a wrong MAC, or the filters of another list); 410 for a real token that can no
longer be honoured (older than :data:`TOKEN_TTL_SECONDS`, signed under a rotated
operator token, or of another token format). A 410 says to start the list again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..k8s.kube import ApiProblem

# Long enough for a client to page through 10,000 boxes many times over, short enough
# that a token pasted from an old log or script is refused rather than silently honoured.
TOKEN_TTL_SECONDS = 15 * 60
_VERSION = 1
RESTART = "start the list again without continue"

Clock = Callable[[], float]


class BadToken(ApiProblem):
    def __init__(self, detail: str) -> None:
        super().__init__(400, f"invalid continue token: {detail}")


class ExpiredToken(ApiProblem):
    def __init__(self, detail: str) -> None:
        super().__init__(410, f"the continue token has expired: {detail}; {RESTART}")


@dataclass(frozen=True)
class Position:
    """Where a paged list resumes: after ``after``, within the same filters."""

    after: str
    state: str | None
    profile: str | None
    owner: str | None = None

    @property
    def filters(self) -> tuple[str | None, str | None, str | None]:
        return (self.owner, self.state, self.profile)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _describe(owner: str | None, state: str | None, profile: str | None) -> str:
    named = (("owner", owner), ("state", state), ("profile", profile))
    filters = [f"{k}={v}" for k, v in named if v is not None]
    return ", ".join(filters) or "no filters"


class ListTokens:
    def __init__(self, secret: str, clock: Clock = time.time) -> None:
        self._key = hmac.new(secret.encode(), b"devboxes list continue", "sha256").digest()
        # Names the key without revealing it, so that a token signed before the operator
        # token was rotated is told apart from a forged one.
        self._key_id = hmac.new(self._key, b"key id", "sha256").hexdigest()[:8]
        self._clock = clock

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def issue(self, position: Position) -> str:
        fields = {
            "v": _VERSION,
            "k": self._key_id,
            "a": position.after,
            "s": position.state,
            "p": position.profile,
            "o": position.owner,
            "t": int(self._clock()),
        }
        payload = _b64(json.dumps(fields, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(payload)}"

    def read(
        self, token: str, owner: str | None, state: str | None, profile: str | None
    ) -> Position:
        """The position a token resumes at, if it continues a list with these filters."""
        payload, _, mac = token.partition(".")
        try:
            fields = json.loads(_unb64(payload))
        except (binascii.Error, ValueError):
            raise BadToken("not a token this controller issued") from None
        if not isinstance(fields, dict) or not mac:
            raise BadToken("not a token this controller issued")
        if fields.get("v") != _VERSION:
            raise ExpiredToken("it was issued by another version of the controller")
        if fields.get("k") != self._key_id:
            raise ExpiredToken("it was issued before the operator token was rotated")
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            raise BadToken("its signature does not match")
        after, issued = fields.get("a"), fields.get("t")
        if not isinstance(after, str) or not isinstance(issued, int):
            raise BadToken("not a token this controller issued")
        issued_for = (fields.get("o"), fields.get("s"), fields.get("p"))
        if issued_for != (owner, state, profile):
            raise BadToken(
                f"it continues a list with {_describe(*issued_for)}, "
                f"not {_describe(owner, state, profile)}; send the same filters with it"
            )
        if self._clock() - issued > TOKEN_TTL_SECONDS:
            raise ExpiredToken(f"it is older than {TOKEN_TTL_SECONDS // 60} minutes")
        return Position(after, state, profile, owner)
