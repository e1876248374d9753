"""Creates that can be retried: a client's ``Idempotency-Key`` and the request it came
with, recorded on the box's Deployment.

The record lives on the box itself, written by the same call that creates it, so every
replica sees it, before and after a restart, and it lasts exactly as long as the box.
Only digests are kept: the key is the client's and never needs to be read back.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from devboxes_sdk.models import IDEMPOTENCY_HEADER, DevboxCreate

from ..k8s.kube import Invalid, rule_broken
from .naming import ANNOTATION_PREFIX, canonical_json

ANNOTATION_CREATE_REQUEST = ANNOTATION_PREFIX + "create-request"
MAX_KEY_LENGTH = 255
# Characters of a UUID, a ULID or a timestamped key; nothing that needs quoting.
KEY_PATTERN = rf"^[A-Za-z0-9._:-]{{1,{MAX_KEY_LENGTH}}}$"
KEY_RULE = f"1-{MAX_KEY_LENGTH} characters of letters, digits, '.', '_', ':' and '-'"
_KEY_RE = re.compile(KEY_PATTERN)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def check_key(value: str) -> str:
    """The key as sent, or a 422 naming the rule it breaks (never echoing the key)."""
    if not _KEY_RE.fullmatch(value):
        raise _refusal(f"must be {KEY_RULE}")
    return value


def _refusal(message: str) -> Invalid:
    return rule_broken(["header", IDEMPOTENCY_HEADER], message)


@dataclass(frozen=True)
class CreateRequest:
    """A create as its key and canonical body identify it."""

    key: str
    body: str

    @classmethod
    def of(cls, key: str, request: DevboxCreate) -> CreateRequest:
        # The parsed request, defaults filled in, so that spelling out a default or
        # reordering fields is still the same request.
        body = request.model_dump(mode="json")
        # Without an image, the body digests as it did before creates could name one, so
        # a retry that reaches a replica of another release still finds its box.
        if body.get("image") is None:
            body.pop("image", None)
        return cls(key=_digest(key), body=_digest(canonical_json(body)))

    def annotation(self) -> str:
        return canonical_json({"key": self.key, "body": self.body})

    def made(self, deployment: dict[str, Any]) -> bool:
        """Whether this very request created ``deployment``. Its key with another body
        is a 422: the client reused a key for a different create."""
        annotations = (deployment.get("metadata") or {}).get("annotations") or {}
        try:
            recorded = CreateRequest(**json.loads(annotations[ANNOTATION_CREATE_REQUEST]))
        except (KeyError, TypeError, ValueError):
            # No key recorded, or a record someone else edited: not this request's box.
            return False
        if recorded.key != self.key:
            return False
        if recorded.body != self.body:
            raise _refusal(
                "this key was already used for a different create request; send a new key "
                "with every new request"
            )
        return True
