"""A real OpenSSH server on loopback that stands in for a box.

kwok runs no containers, so a testbed box is a pod object with no sshd behind its
reported SSH address. Debian's ``/usr/sbin/sshd`` listening on that host and port plays
the box, with the host key the controller made for the box: everything from the
controller's answer to the SSH login, the host key check, the port forwards and the
kernel is real.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from devboxes_testbed.controller import Controller
from kubernetes import client as kube_client
from kubernetes import config as kube_config

SSHD = Path("/usr/sbin/sshd")


def need_sshd() -> None:
    if not SSHD.exists():
        pytest.skip("Debian's openssh-server is not installed (make system-packages installs it)")


def make_key(directory: Path) -> Path:
    """A throwaway ed25519 key pair; the private half's path."""
    key = directory / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "devbox-test", "-f", str(key)],
        check=True,
    )
    return key


def box_host_key(controller: Controller, box: str) -> str:
    """The private half of the host key the controller made for ``box``: what the box's
    sshd presents, and what clients check against the key the API publishes."""
    api = kube_config.new_client_from_config(str(controller.kubeconfig))
    try:
        secret = kube_client.CoreV1Api(api).read_namespaced_secret(
            f"devbox-{box}-host-key", controller.settings["namespace"]
        )
    finally:
        api.close()
    return base64.b64decode(secret.data["ssh_host_ed25519_key"]).decode()


@contextlib.contextmanager
def loopback_sshd(
    directory: Path, port: int, public_key: Path, host_key_text: str | None = None
) -> Iterator[None]:
    """sshd on 127.0.0.1:``port`` that lets the current user in with ``public_key`` and
    presents ``host_key_text`` (a private key in OpenSSH's format), else a key of its own."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = directory / "host_ed25519"
    if host_key_text is not None:
        host_key.unlink(missing_ok=True)
        host_key.touch(mode=0o600)
        host_key.write_text(host_key_text)
    elif not host_key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True
        )
    authorized = directory / "authorized_keys"
    authorized.write_text(public_key.read_text())
    config = directory / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {directory / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                f"AllowUsers {getpass.getuser()}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                # The test's temporary directories are not laid out for sshd's owner checks.
                "StrictModes no",
                "UsePAM no",
                "AllowTcpForwarding yes",
                "AllowStreamLocalForwarding yes",
                "",
            ]
        )
    )
    # sshd insists on its privilege separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = (directory / "sshd.log").open("ab")
    process = subprocess.Popen(
        [str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(f"sshd exited: {(directory / 'sshd.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"sshd did not listen on 127.0.0.1:{port}")
            time.sleep(0.1)
        yield
    finally:
        process.terminate()
        process.wait(15)
        log.close()
