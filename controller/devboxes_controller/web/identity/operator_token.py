"""The operator token: read once at start, refused when too weak, and compared in constant
time; whoever presents it is the operator, an admin."""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from ...box.ownership import OPERATOR
from .base import Identity

MIN_TOKEN_LENGTH = 32

OPERATOR_IDENTITY = Identity(user=OPERATOR, mode="operator", admin=True)


class TokenError(Exception):
    """The operator token is missing or too weak; the controller refuses to start."""


def load_token(token_file: Path | None, environ: dict[str, str] | None = None) -> str:
    environ = dict(os.environ) if environ is None else environ
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as err:
            raise TokenError(f"cannot read the token file {token_file}: {err.strerror}") from None
    else:
        token = environ.get("DEVBOXES_TOKEN", "").strip()
        if not token:
            raise TokenError("no operator token: set DEVBOXES_TOKEN or pass --token-file")
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokenError(f"the operator token must be at least {MIN_TOKEN_LENGTH} characters")
    return token


def token_matches(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())
