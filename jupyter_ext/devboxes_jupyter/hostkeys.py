"""The names devbox kernels record boxes' SSH host keys under, and what a changed key means.

A box whose host key the controller publishes is checked against that key alone. A box
made before the controller made host keys has its key trusted on first use and recorded
in one known_hosts file per OS user, which every Jupyter server of that user shares. A
box's name alone does not name its keys: the same person can have a box of one name on
two clusters, and a box deleted and created again under its name makes new keys. So each
entry is recorded under an alias of the controller the box belongs to and the box's own
identity, its Kubernetes uid: a new box never meets an old box's entry, and a key that
changes under the same alias is a real change.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

from devboxes_sdk import models

# What OpenSSH prints when a host presents another key than the one recorded for it.
CHANGED_MARK = "REMOTE HOST IDENTIFICATION HAS CHANGED"
# What it prints when strict checking finds no matching key.
REFUSED_MARK = "Host key verification failed"


def alias(controller_url: str, box: models.Devbox) -> str:
    """``devbox-<name>-<16 hex digits>``: the digits are of a SHA-256 of the controller's
    URL and the box's uid (its creation time from a controller that sends no uid)."""
    identity = box.uid or box.created_at.isoformat()
    digest = hashlib.sha256(f"{controller_url}\n{identity}".encode()).hexdigest()[:16]
    return f"devbox-{box.name}-{digest}"


def known_hosts_lines(box_alias: str, keys: list[str]) -> str:
    """known_hosts lines that give the box's published keys to its alias."""
    return "".join(f"{box_alias} {key}\n" for key in keys)


def not_published_message(box_name: str) -> str:
    """The one sentence a start ends with when the box presents another host key than the
    controller published for it."""
    return (
        f"box {box_name} answered SSH with another host key than the one the Devboxes "
        "controller published for it, so the connection was refused: it may be "
        "intercepted, or someone with root in the box replaced its key"
    )


def changed_message(box_name: str, box_alias: str, known_hosts: Path) -> str:
    """The one sentence a start ends with when the box presents another host key."""
    forget = shlex.join(["ssh-keygen", "-R", box_alias, "-f", str(known_hosts)])
    return (
        f"the SSH host key of box {box_name} changed since it was first seen: a box keeps "
        "its host keys on its home volume for as long as it exists, so they change only if "
        "someone with root in the box replaced them; otherwise the connection may be "
        f"intercepted. If the change is expected, forget the old key with `{forget}` "
        "and start the kernel again"
    )
