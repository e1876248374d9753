"""How ``devbox`` reaches a box's sshd: the ``ssh`` command line (through the controller's
tunnel when it offers one, else at the box's own address), the ``ProxyCommand`` end of the
tunnel, and the block ``devbox config-ssh`` keeps in ``~/.ssh/config``.

Building command lines and the config block are pure functions; running ssh and touching
files happen in :func:`exec_ssh`, :func:`stdio` and :func:`write_config`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Protocol

from devboxes_sdk.errors import DevboxesError
from devboxes_sdk.tunnel import (
    HOST_SUFFIX,
    host_of_box,
    join,
    known_hosts_command,
    open_tunnel,
    proxy_command,
)

if TYPE_CHECKING:
    # Only for annotations: the ProxyCommand end (stdio) must not load the client.
    from devboxes_sdk.client import Devbox


class SshTarget(Protocol):
    """What a login through the tunnel takes of a box: a :class:`Devbox`, or the
    :class:`~devboxes_sdk._ready_box.ReadyBox` read without the client."""

    @property
    def name(self) -> str: ...
    @property
    def ssh_user(self) -> str | None: ...
    @property
    def ssh_host_keys(self) -> list[str]: ...


# The workspace image's login user, for a server that names none.
DEFAULT_USER = "dev"
# ssh asks the box for a sign of life this often, so a tunnel with a live client is never
# closed as idle, and one whose client went away is.
KEEPALIVE_SECONDS = 60
BEGIN = "# --- devbox config-ssh: begin"
END = "# --- devbox config-ssh: end ---"
_SSH_HOST_RE = re.compile(r"^[A-Za-z0-9.:\[\]_][A-Za-z0-9.:\[\]_-]*$")
_SSH_USER_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")
# A public host key as it may stand on ssh's command line: a type and base64, nothing
# that ssh's %-expansion or word splitting would change.
_HOST_KEY_RE = re.compile(r"^ssh-(ed25519|rsa) [A-Za-z0-9+/]+={0,2}$")
_ECHO = "/bin/echo"


def _user(box: SshTarget) -> str:
    user = box.ssh_user or DEFAULT_USER
    if not _SSH_USER_RE.fullmatch(user):
        raise DevboxesError(f"{box.name} names an unusable SSH user: {user!r}")
    return user


def _extra(extra: Sequence[str]) -> list[str]:
    found = list(extra)
    return found[1:] if found and found[0] == "--" else found


def _host_key_options(box: SshTarget) -> list[str]:
    """The box's published host keys, when it has any, and then no other key. One key,
    as the controller publishes, is handed to ssh by ``echo``: the box was just read,
    and asking the controller again would start another interpreter on every login."""
    if not box.ssh_host_keys:
        return []
    keys = box.ssh_host_keys
    command = known_hosts_command()
    if len(keys) == 1 and _HOST_KEY_RE.fullmatch(keys[0]):
        command = f"{_ECHO} %H {keys[0]}"
    return ["-o", f"KnownHostsCommand={command}", "-o", "StrictHostKeyChecking=yes"]


def tunnel_argv(box: SshTarget, extra: Sequence[str], cluster: str | None = None) -> list[str]:
    """``ssh`` to the box through the controller's tunnel; named with its ``cluster``
    when several are configured, so each box of a name has its own host keys."""
    return [
        "ssh",
        "-o",
        f"ProxyCommand={proxy_command()}",
        *_host_key_options(box),
        "-o",
        f"ServerAliveInterval={KEEPALIVE_SECONDS}",
        f"{_user(box)}@{host_of_box(box.name, cluster)}",
        *_extra(extra),
    ]


def forward_argv(box: Devbox, port: int, local: int, cluster: str | None = None) -> list[str]:
    """``ssh`` that forwards 127.0.0.1:``local`` here to ``port`` on the box's loopback
    through the tunnel, and runs nothing else."""
    return tunnel_argv(
        box,
        [
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"127.0.0.1:{local}:127.0.0.1:{port}",
        ],
        cluster,
    )


def service_argv(box: Devbox, extra: Sequence[str], cluster: str | None = None) -> list[str]:
    """``ssh`` to the box at its own address, from its ssh_host, ssh_port and ssh_user."""
    destination = box.ssh_host
    if not destination or not _SSH_HOST_RE.fullmatch(destination):
        raise DevboxesError(f"{box.name} has no usable SSH address yet")
    if box.ssh_user is not None:
        destination = f"{_user(box)}@{destination}"
    # The box's keys are published under its name, whichever address reaches it.
    alias = ["-o", f"HostKeyAlias={host_of_box(box.name, cluster)}"] if box.ssh_host_keys else []
    return [
        "ssh",
        "-p",
        str(box.ssh_port),
        *alias,
        *_host_key_options(box),
        destination,
        *_extra(extra),
    ]


def exec_ssh(argv: Sequence[str], environment: Mapping[str, str]) -> NoReturn:
    """Replace this process with ``ssh``."""
    executable = shutil.which("ssh")
    if executable is None:
        raise DevboxesError("ssh is not installed (no 'ssh' on PATH)")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(executable, list(argv), dict(environment))  # noqa: S606 - the point
    except OSError as error:
        raise DevboxesError(f"cannot run {executable}: {error.strerror}") from None


def stdio(url: str, token: str, name: str) -> str | None:
    """Join standard input and output to a tunnel to box ``name`` of the API at ``url``,
    until either ends; the controller's reason when it closed the tunnel with one."""
    connection = open_tunnel(url, token, name, notices=True)
    with connection:
        return join(connection, sys.stdin.buffer, sys.stdout.buffer, sys.stderr)


def config_block(url: str, clusters: Sequence[tuple[str, str]] = ()) -> str:
    """The ``~/.ssh/config`` block that makes ``ssh NAME.devbox`` reach box NAME of the
    controller at ``url`` through its tunnel, for every tool that runs ssh; and, for each
    of ``clusters`` (name, URL), ``ssh NAME.CLUSTER.devbox`` box NAME of that cluster.
    A host matches the first section it fits, so the clusters' come first."""
    sections = [(f"*.{name}{HOST_SUFFIX}", address) for name, address in clusters]
    sections.append((f"*{HOST_SUFFIX}", url))
    lines = [
        f"{BEGIN} ({', '.join(address for _, address in sections)}) ---",
        "# Written by 'devbox config-ssh'; 'devbox config-ssh --remove' removes it.",
    ]
    for pattern, address in sections:
        # ssh runs a KnownHostsCommand without a shell, and only by an absolute path.
        with_url = f"{shutil.which('env') or '/usr/bin/env'} DEVBOX_URL={shlex.quote(address)}"
        lines += [
            f"Host {pattern}",
            f"    ProxyCommand {with_url} {proxy_command()}",
            f"    KnownHostsCommand {with_url} {known_hosts_command()}",
            f"    User {DEFAULT_USER}",
            f"    ServerAliveInterval {KEEPALIVE_SECONDS}",
        ]
    return "\n".join([*lines, END, ""])


def _without_block(text: str) -> tuple[str, int | None]:
    """``text`` without its config-ssh block, and the line the block began at."""
    lines = text.splitlines(keepends=True)
    begin = next((i for i, line in enumerate(lines) if line.startswith(BEGIN)), None)
    if begin is None:
        return text, None
    end = next((i for i in range(begin, len(lines)) if lines[i].rstrip("\n") == END), None)
    if end is None:
        raise DevboxesError(
            f"the devbox block in the SSH config has a begin line but no '{END}' line; "
            "mend or remove it by hand"
        )
    return "".join(lines[:begin] + lines[end + 1 :]), begin


def with_block(text: str, block: str) -> str:
    """``text`` with ``block`` in place of its config-ssh block, or first when it has
    none: ssh takes the first value it reads, and a ``Host *`` further up would win."""
    rest, begin = _without_block(text)
    lines = rest.splitlines(keepends=True)
    at = 0 if begin is None else begin
    return "".join(lines[:at]) + block + "".join(lines[at:])


def without_block(text: str) -> str:
    return _without_block(text)[0]


def write_config(path: Path, text: str) -> None:
    """Write the SSH config as ssh wants it: only its owner may write it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.devbox-tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(0o600)
    temporary.replace(path)
