"""What every ``devbox`` command shares, and the commands that start on each login.

The exit codes, the usage error, printing a message safely, and the URL and token a
command uses. ``devbox ssh --stdio`` (ssh's ``ProxyCommand``) and ``devbox known-hosts``
(its ``KnownHostsCommand``) start once or twice per login, and ``devbox ssh NAME`` once:
this module, and everything it imports, loads neither the client nor requests nor
pydantic, so that :func:`ssh_stdio` and :func:`ssh_if_ready` run on a lean interpreter;
:func:`known_hosts` loads the client only when it asks the controller.
``tests/sdk/test_fast_start.py`` keeps it so.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from devboxes_sdk import _cli_ssh
from devboxes_sdk._ready_box import ready_box
from devboxes_sdk._wire import normalize_name
from devboxes_sdk.config import (
    ENV_CLUSTER,
    ENV_TOKEN,
    ENV_URL,
    Settings,
    chosen_cluster,
    normalize_token,
    normalize_url,
    resolve,
)
from devboxes_sdk.errors import ConfigurationError, DevboxesError, NotConfigured
from devboxes_sdk.tunnel import box_of_host

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 3
EXIT_DEGRADED = 4
EXIT_INTERRUPTED = 130

_NOT_CONFIGURED = {
    "url": f"no Devboxes URL configured: run 'devbox login --url URL' or set {ENV_URL}",
    "token": f"no Devboxes token configured: run 'devbox login' or set {ENV_TOKEN}",
}

# Server-supplied text (messages, names) is shown in a terminal; control characters
# could move the cursor or rewrite earlier lines, so they are replaced.
_CONTROL = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0)], "?")


class UsageError(Exception):
    """The command line is well-formed for argparse but cannot be carried out as given."""


class BadCommandLine(UsageError):
    """A command line argparse refused; ``prog`` is the (sub)command that refused it."""

    def __init__(self, prog: str, message: str) -> None:
        self.prog = prog
        super().__init__(message)


def clean(text: str) -> str:
    """``text`` with control characters replaced, safe to print to a terminal."""
    return text.translate(_CONTROL)


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def print_error(message: str) -> None:
    print(clean(message), file=sys.stderr)


def box_name(value: str) -> str:
    """The box a name names; ``NAME.devbox``, as ssh and the config block name a box,
    names box NAME. A ``ValueError`` says why a name is not one."""
    return normalize_name(box_of_host(value))


def command_settings(url: str | None, token: str | None, cluster: str | None = None) -> Settings:
    """The URL and token of the command line (``--url``, ``--token``, ``--cluster``; None
    when not given), environment or config file, with problems explained in terms of
    this command's options."""
    if url is not None:
        if cluster is not None:
            raise UsageError("--url and --cluster cannot be combined: give one")
        try:
            url = normalize_url(url)
        except ConfigurationError as error:
            raise ConfigurationError(f"{error} (from --url)") from None
    token = None if token is None else normalize_token(token, "--token")
    try:
        return resolve(url, token, cluster=cluster)
    except NotConfigured as error:
        raise ConfigurationError(_NOT_CONFIGURED[error.setting]) from None


def ssh_stdio(url: str | None, token: str | None, name: str) -> int:
    """``devbox ssh --stdio NAME``: one SSH connection over standard input and output
    through the controller's tunnel to box ``name``, as ssh's ``ProxyCommand``."""
    settings = command_settings(url, token)
    reason = _cli_ssh.stdio(settings.url, settings.token, name)
    if reason:
        print(f"devbox: the controller closed the tunnel: {clean(reason)}", file=sys.stderr)
    return EXIT_OK


def ssh_if_ready(name: str, extra: Sequence[str]) -> None:
    """``devbox ssh NAME [-- ARGS]`` of a box the controller reports ready behind its
    tunnel: ssh replaces this process, the client never loaded. Returns otherwise (no
    configuration, the box not ready, any other answer, ssh that cannot start), and the
    command then goes through the client, which carries it out or explains."""
    try:
        settings = command_settings(None, None)
        cluster = chosen_cluster()
    except ConfigurationError:
        return
    # With several clusters, which one holds a bare name is for the client to find.
    if cluster is not None and not os.environ.get(ENV_CLUSTER, "").strip():
        return
    box = ready_box(settings, name)
    if box is None:
        return
    argv = _cli_ssh.tunnel_argv(box, extra, cluster)
    try:
        _cli_ssh.exec_ssh(argv, {**os.environ, ENV_URL: settings.url})
    except DevboxesError:
        return


def known_hosts(url: str | None, token: str | None, host: str) -> int:
    """``devbox known-hosts HOST``: what ssh's ``KnownHostsCommand`` asks, the known_hosts
    lines of the host keys the controller publishes for the box that ``host`` names."""
    try:
        name = box_name(host)
    except ValueError as error:
        raise UsageError(str(error)) from None
    settings = command_settings(url, token)
    # The client (requests, the models) is loaded only once there is something to ask.
    from devboxes_sdk.client import Client

    with Client(settings.url, settings.token) as client:
        box = client.get(name)
    for key in box.ssh_host_keys:
        print(f"{host} {key}")
    return EXIT_OK
