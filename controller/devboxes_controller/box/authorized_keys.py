"""People's SSH public keys as sshd reads them: parsed, checked and fingerprinted as
OpenSSH does, and kept in each person's ConfigMap that their boxes mount.

A key is one ``authorized_keys`` line without options: ``<type> <base64> [comment]``.
Options (``command=``, ``from=``) are refused rather than kept: a key added through the
API logs in as the box's user, nothing more and nothing less.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from devboxes_sdk.models import MAX_PUBLIC_KEY_LENGTH

from .ownership import ANNOTATION_OWNER

MAX_KEY_LENGTH = MAX_PUBLIC_KEY_LENGTH
MAX_KEYS_PER_PERSON = 32
MIN_RSA_BITS = 2048
MAX_COMMENT_LENGTH = 256
ALGORITHMS = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)
_PRINTABLE = re.compile(r"[\x20-\x7e]*")


class KeyRejected(ValueError):
    """The text is not a public key this API accepts; the message says why."""


@dataclass(frozen=True)
class PublicKey:
    algorithm: str
    # As ``ssh-keygen -l`` shows it: SHA256 of the key blob, unpadded base64.
    fingerprint: str
    comment: str | None
    # The line written to authorized_keys: type, blob and comment, normalized.
    line: str


def fingerprint_of(blob: bytes) -> str:
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def parse(text: str) -> PublicKey:
    """One OpenSSH public key, or KeyRejected naming the problem."""
    if len(text) > MAX_KEY_LENGTH:
        raise KeyRejected(f"a public key is at most {MAX_KEY_LENGTH} characters")
    stripped = text.strip()
    if not stripped:
        raise KeyRejected("empty: paste one line of a .pub file, e.g. ~/.ssh/id_ed25519.pub")
    if "PRIVATE KEY" in stripped:
        raise KeyRejected(
            "this is a private key; send the public key (the .pub file) and keep this one secret"
        )
    if "\n" in stripped or "\r" in stripped:
        raise KeyRejected("one key per request: the text has more than one line")
    parts = stripped.split(None, 2)
    algorithm = parts[0]
    if algorithm not in ALGORITHMS:
        if "=" in algorithm or '"' in algorithm:
            raise KeyRejected("key options such as command= or from= are not accepted")
        raise KeyRejected(
            f"unsupported key type {algorithm[:40]!r}; one of {', '.join(ALGORITHMS)}"
        )
    if len(parts) < 2:
        raise KeyRejected(f"the {algorithm} key has no key data after its type")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise KeyRejected("the key data is not valid base64") from None
    try:
        key = load_ssh_public_key(f"{algorithm} {parts[1]}".encode())
    except (ValueError, UnsupportedAlgorithm):
        raise KeyRejected(f"the key data is not a valid {algorithm} public key") from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise KeyRejected(
            f"the RSA key has {key.key_size} bits; at least {MIN_RSA_BITS} are required"
        )
    comment = parts[2].strip() if len(parts) > 2 else None
    if comment is not None and (
        len(comment) > MAX_COMMENT_LENGTH or not _PRINTABLE.fullmatch(comment)
    ):
        raise KeyRejected(
            f"the comment must be printable ASCII of at most {MAX_COMMENT_LENGTH} characters"
        )
    line = f"{algorithm} {parts[1]}" + (f" {comment}" if comment else "")
    return PublicKey(algorithm, fingerprint_of(blob), comment or None, line)


# A person's keys live in a ConfigMap (public keys are not secrets) mounted into each of
# their boxes, where sshd's AuthorizedKeysCommand reads them at every login.
CONFIG_MAP_PREFIX = "devbox-keys-"
COMPONENT_KEYS = "keys"
AUTHORIZED_KEYS = "authorized_keys"
# Each key with when it was added; authorized_keys is derived from it.
RECORD = "keys.json"
VOLUME = "person-keys"
MOUNT_PATH = "/etc/devbox-person"


@dataclass(frozen=True)
class Entry:
    line: str
    added_at: str

    def key(self) -> PublicKey:
        return parse(self.line)


def operator_keys_fix(secret: str | None, namespace: str) -> str:
    """How an operator lets a public key log in to the boxes made with the operator token,
    whose keys come from a Secret rather than from the keys API."""
    if secret is None:
        return (
            "put the public keys that may log in under the key authorized_keys of a Secret in "
            f"namespace {namespace} (kubectl -n {namespace} create secret generic "
            "devbox-ssh-keys --from-file=authorized_keys=KEYS_FILE) and set "
            "controller.ssh.authorizedKeysSecret to its name"
        )
    return (
        f"the operator's boxes accept the public keys under the key authorized_keys of Secret "
        f"{secret} in namespace {namespace}; an operator adds a key there, with the others "
        f"that may log in (kubectl -n {namespace} create secret generic {secret} "
        "--from-file=authorized_keys=KEYS_FILE --dry-run=client -o yaml | kubectl apply -f -)"
    )


def config_map_name(owner: str) -> str:
    """A name Kubernetes accepts whatever the person's name is."""
    return CONFIG_MAP_PREFIX + hashlib.sha256(owner.encode()).hexdigest()[:20]


def render_config_map(
    owner: str, entries: list[Entry], namespace: str, labels: dict[str, str]
) -> dict[str, Any]:
    record = [{"key": e.line, "addedAt": e.added_at} for e in entries]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(owner),
            "namespace": namespace,
            "labels": labels,
            "annotations": {ANNOTATION_OWNER: owner},
        },
        "data": {
            AUTHORIZED_KEYS: "".join(f"{e.line}\n" for e in entries),
            RECORD: json.dumps(record, separators=(",", ":")),
        },
    }


def entries_of(config_map: dict[str, Any]) -> list[Entry]:
    """The keys recorded in a person's ConfigMap; a line that no longer parses (edited by
    hand) is left out rather than served."""
    text = (config_map.get("data") or {}).get(RECORD) or "[]"
    try:
        record = json.loads(text)
    except ValueError:
        return []
    found = []
    for item in record if isinstance(record, list) else []:
        line, added = (
            (item.get("key"), item.get("addedAt")) if isinstance(item, dict) else (None, None)
        )
        if not isinstance(line, str) or not isinstance(added, str):
            continue
        try:
            parse(line)
        except KeyRejected:
            continue
        found.append(Entry(line, added))
    return found
