"""The ``connections`` block: how the controller's HTTP server treats its clients, with
read deadlines for a request, caps on the connections they hold open, the bounds of
the tunnels to boxes, and where boxes' web previews are served.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from .base import Model, WholeNumber, lookup
from .previews import PreviewOrigins, PreviewUrl
from .violations import Violation

MAX_READ_SECONDS = 300
# About the most files a Linux process may open (fs.nr_open, 1,048,576 by default).
MAX_CONNECTIONS = 1_000_000
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 256
# A day: past it a silent tunnel is surely a client that went away without closing.
MAX_TUNNEL_IDLE_SECONDS = 86_400
MAX_TUNNELS_PER_PERSON = 1000


ReadSeconds = Annotated[int, WholeNumber(1, MAX_READ_SECONDS)]
TunnelIdleSeconds = Annotated[int, WholeNumber(30, MAX_TUNNEL_IDLE_SECONDS)]
TunnelCount = Annotated[int, WholeNumber(1, MAX_TUNNELS_PER_PERSON)]
ConnectionCount = Annotated[int, WholeNumber(1, MAX_CONNECTIONS)]


class ConnectionSettings(Model):
    """How long a client may take to send a request, and how many connections clients may
    hold open. Every replica applies them to its own connections.

    The read deadlines end once a request has been read: an answer that takes long (a
    waiting GET, the dashboard's event stream) is never cut by them.
    """

    # From a request's first byte, or from the connection's opening, to the end of its head.
    header_timeout_seconds: ReadSeconds = 10
    # From the end of the head to the end of the body.
    body_timeout_seconds: ReadSeconds = 30
    # A connection is closed when no next request begins this long after an answer.
    keep_alive_timeout_seconds: ReadSeconds = 5
    max_total: ConnectionCount = DEFAULT_MAX_CONNECTIONS
    # Behind an Ingress or another proxy every client has the proxy's address.
    max_per_client: ConnectionCount = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    # A tunnel to a box that carries no byte either way this long is closed. `devbox ssh`
    # and the blocks `devbox config-ssh` writes have ssh send a keepalive every minute,
    # so only a client that went away stays silent.
    tunnel_idle_seconds: TunnelIdleSeconds = 900
    # Tunnels one person may hold open at once on one replica.
    tunnels_per_person: TunnelCount = 16
    # Where ports that image profiles declare are served, one origin per box and port:
    # "https://*.preview.example.com" serves port 8080 of box web at
    # https://8080-web.preview.example.com. Unset, the dashboard serves no preview.
    preview_url: PreviewUrl | None = None

    @property
    def previews(self) -> PreviewOrigins | None:
        return PreviewOrigins.parse(self.preview_url) if self.preview_url else None

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        total = lookup(raw, "max_total")
        per_client = lookup(raw, "max_per_client")
        total = DEFAULT_MAX_CONNECTIONS if total is None else total
        shown = f"{per_client}"
        if per_client is None:
            per_client = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
            shown = f"{per_client} (the default)"
        numbers = all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in (total, per_client)
        )
        if numbers and per_client > total:
            return [(("maxPerClient",), f"{shown} must not exceed maxTotal ({total})")]
        return []
