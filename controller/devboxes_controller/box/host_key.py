"""A box's SSH host key: made by the controller with the box, its private half in a Secret
the box's sshd reads, its public half on the box's Deployment and in the API. Clients
check the box against the published key, so nobody is asked to trust a fingerprint and a
box that answers with another key is refused.

The key lives as long as the box's Deployment (its Secret belongs to it): kept across
stop and start, new for a box deleted and made again.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..k8s.kube import Obj
from .naming import ANNOTATION_HOST_KEY

# The key file's name in the Secret and in the box, as sshd's own keys are named.
KEY_FILE = "ssh_host_ed25519_key"


@dataclass(frozen=True)
class HostKey:
    private: str = ""
    public: str = ""

    def __repr__(self) -> str:
        return f"HostKey(public={self.public!r})"


def generate() -> HostKey:
    """A new Ed25519 host key: the private half in OpenSSH's format, the public half as
    one known_hosts key ("ssh-ed25519 AAAA...")."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return HostKey(private=private.decode(), public=public.decode())


def published(deployment: Obj) -> list[str]:
    """The host keys a box's Deployment publishes; none for a box made before the
    controller made host keys, whose sshd keeps the key it made itself."""
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    key = annotations.get(ANNOTATION_HOST_KEY)
    return [key] if isinstance(key, str) and key else []


# Where the box's main container finds the key; its entrypoint installs it for sshd.
VOLUME = "host-key"
MOUNT_PATH = "/etc/devbox/host-key"


def volume(secret: str) -> Obj:
    # Optional: the Secret is written right after the Deployment (it belongs to it); the
    # kubelet fills the mount in once it exists.
    return {
        "name": VOLUME,
        "secret": {"secretName": secret, "optional": True, "defaultMode": 0o400},
    }


def mount() -> Obj:
    return {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}
