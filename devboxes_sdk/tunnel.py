"""A tunnel to a box's SSH server through the controller, over the same HTTPS as the API.

``GET /api/v1/devboxes/{name}/ssh`` upgrades to a WebSocket whose binary messages carry
the SSH connection's bytes. ``devbox ssh --stdio NAME`` joins one to its standard input and
output, which is what ssh's ``ProxyCommand`` expects; ``devbox ssh`` and the blocks
``devbox config-ssh`` writes use it so. The box's sshd still checks the person's key.

The client honours ``HTTPS_PROXY`` and ``NO_PROXY`` (an HTTP CONNECT proxy) and trusts the
CA bundle named by ``REQUESTS_CA_BUNDLE``, as the rest of the SDK does.

ssh starts ``devbox ssh --stdio`` on every login, so this module loads neither requests
nor pydantic (``tests/sdk/test_fast_start.py`` keeps it so).
"""

from __future__ import annotations

import json
import os
import shlex
import ssl
import sys
import threading
from typing import BinaryIO, TextIO
from urllib.parse import quote, urlsplit

import certifi
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidProxy,
    InvalidProxyMessage,
    InvalidProxyStatus,
    InvalidStatus,
    ProxyError,
)
from websockets.sync.client import ClientConnection, connect

from devboxes_sdk._version import __version__
from devboxes_sdk._wire import API_PREFIX
from devboxes_sdk.errors import DevboxesError, Unavailable, error_from_body

# ``ssh NAME.devbox``: the host names ``devbox ssh``, the config block and the Lab's kernels
# give boxes reached through the tunnel.
HOST_SUFFIX = ".devbox"
# One read of standard input: about what one SSH packet of a bulk copy is.
CHUNK_BYTES = 64 * 1024
# The tunnel's own WebSocket pings: a dead controller or proxy is noticed within these.
PING_SECONDS = 20.0
OPEN_SECONDS = 15.0
# Asks the controller for notices (a warning that the box stops soon) as text messages
# beside the binary ones; a client that does not ask gets none.
NOTICES_HEADER = "Devboxes-Notices"


def proxy_command() -> str:
    """The ``ProxyCommand`` that carries ssh through the tunnel; ssh puts the host name
    it was given (``NAME.devbox``) in place of ``%n``. The interpreter running now, so it
    does not depend on what the shell's PATH finds."""
    return shlex.join([sys.executable, "-m", "devboxes_sdk", "ssh", "--stdio"]) + " %n"


def known_hosts_command() -> str:
    """The ``KnownHostsCommand`` that gives ssh the host keys the controller publishes for
    the box it connects to; ssh puts the host name it checks in place of ``%H``."""
    return shlex.join([sys.executable, "-m", "devboxes_sdk", "known-hosts"]) + " %H"


def box_of_host(host: str) -> str:
    """The box a host name given to ssh names: ``NAME.devbox``, ``NAME.CLUSTER.devbox``
    (whose controller the SSH config block of that cluster names), or ``NAME``."""
    if not host.endswith(HOST_SUFFIX):
        return host
    return host.removesuffix(HOST_SUFFIX).split(".", 1)[0]


def host_of_box(name: str, cluster: str | None = None) -> str:
    """The host name ssh is given for box ``name``, of ``cluster`` when several are known."""
    return f"{name}.{cluster}{HOST_SUFFIX}" if cluster else f"{name}{HOST_SUFFIX}"


def tunnel_url(api_url: str, name: str) -> str:
    """The WebSocket URL of the tunnel to box ``name`` of the API at ``api_url``."""
    parts = urlsplit(api_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    path = f"{parts.path.rstrip('/')}{API_PREFIX}/devboxes/{quote(name, safe='')}/ssh"
    return f"{scheme}://{parts.netloc}{path}"


# The CA bundle requests trusts by default (its DEFAULT_CA_BUNDLE_PATH), found without
# loading requests.
DEFAULT_CA_BUNDLE = certifi.where()


def tls_context() -> ssl.SSLContext:
    """What the SDK's HTTPS trusts: the CA bundle ``REQUESTS_CA_BUNDLE`` (or
    ``CURL_CA_BUNDLE``) names, else requests' own."""
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    try:
        return ssl.create_default_context(cafile=bundle or DEFAULT_CA_BUNDLE)
    except (OSError, ssl.SSLError) as error:
        raise DevboxesError(f"cannot read the CA bundle {bundle}: {error}") from None


def open_tunnel(api_url: str, token: str, name: str, *, notices: bool = False) -> ClientConnection:
    """A tunnel to box ``name``'s sshd, which also carries the box's stop warnings as text
    messages when ``notices``; the API's error for a refusal (404, 409...), or one line
    that says which hop failed."""
    url = tunnel_url(api_url, name)
    headers = {"Authorization": f"Bearer {token}"}
    if notices:
        headers[NOTICES_HEADER] = "text"
    try:
        return connect(
            url,
            ssl=tls_context() if url.startswith("wss:") else None,
            additional_headers=headers,
            user_agent_header=f"devboxes-sdk/{__version__}",
            compression=None,
            open_timeout=OPEN_SECONDS,
            ping_interval=PING_SECONDS,
            ping_timeout=PING_SECONDS,
        )
    except InvalidStatus as refused:
        response = refused.response
        text = (response.body or b"").decode("utf-8", "replace")
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        raise error_from_body(
            response.status_code, body, text=text, reason=response.reason_phrase
        ) from None
    except InvalidProxyStatus as refused:
        raise Unavailable(
            None,
            f"the proxy refused the tunnel to {api_url}: HTTP {refused.response.status_code} "
            "(the proxy must allow CONNECT to the controller, or name it in NO_PROXY)",
        ) from None
    except (InvalidProxy, InvalidProxyMessage, ProxyError) as error:
        raise Unavailable(None, f"the proxy for {api_url} failed: {error}") from None
    except ssl.SSLCertVerificationError as error:
        raise Unavailable(
            None,
            f"cannot verify the TLS certificate of {api_url}: {error.verify_message}; "
            "set REQUESTS_CA_BUNDLE to a PEM file that holds its CA",
        ) from None
    except (OSError, TimeoutError, InvalidHandshake) as error:
        raise Unavailable(
            None, f"cannot open a tunnel to {api_url}: {error or type(error).__name__}"
        ) from None


def _pump_input(connection: ClientConnection, source: BinaryIO) -> None:
    """Standard input to the tunnel, until it ends; then an empty message tells the
    controller so, and the box's answer still comes back until the box closes."""
    try:
        while data := source.read1(CHUNK_BYTES):  # type: ignore[attr-defined]
            connection.send(data)
        connection.send(b"")
    except (ConnectionClosed, OSError):
        connection.close()


def join(
    connection: ClientConnection, source: BinaryIO, sink: BinaryIO, notices: TextIO
) -> str | None:
    """Carry bytes between ``source``/``sink`` and the tunnel until either ends, and the
    controller's notices to ``notices`` (ssh shows a ProxyCommand's standard error on the
    person's terminal); the controller's reason when it closed the tunnel with one."""
    reader = threading.Thread(target=_pump_input, args=(connection, source), daemon=True)
    reader.start()
    try:
        for message in connection:
            if isinstance(message, str):
                # The terminal may be in raw mode: a line of its own, ended as it expects.
                notices.write(f"\r\ndevbox: {message}\r\n")
                notices.flush()
                continue
            sink.write(message)
            sink.flush()
    except ConnectionClosed:
        pass
    except OSError:
        # ssh closed its end of the pipe.
        connection.close()
    return connection.close_reason or None
