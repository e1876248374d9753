"""Whether a box is ready behind the controller's tunnel, read without the client.

``devbox ssh NAME`` needs two answers before ssh starts: the box (its state, login user
and host keys) and the controller's ways to SSH. Read through the client, they cost the
login a fresh interpreter's load of requests, pydantic and the models, which is most of a
login's CPU and what ten logins at once wait on. These reads use the standard library with
the client's proxy (``HTTPS_PROXY``, ``NO_PROXY``) and CA settings, and never follow a
redirect, so the token goes to the configured controller only. Any other answer than the
expected one (an error, a box not ready, a controller without the tunnel, JSON of another
shape) gives None, and the command then goes through the client, which explains it.
"""

from __future__ import annotations

import http.client
import json
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from devboxes_sdk._version import __version__
from devboxes_sdk._wire import API_PREFIX
from devboxes_sdk.config import Settings
from devboxes_sdk.errors import DevboxesError
from devboxes_sdk.tunnel import tls_context

# As the models name them: DevboxState.READY and the tunnel among Capabilities.ssh_access.
READY = "ready"
TUNNEL = "tunnel"
# A controller answers these reads in milliseconds; one that does not is asked again
# through the client, whose own wait and message follow, so this one is kept short.
READ_SECONDS = 5.0


@dataclass(frozen=True)
class ReadyBox:
    """What ssh's command line takes of a ready box, as the API's box names it."""

    name: str
    ssh_user: str | None
    ssh_host_keys: list[str]


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _read(settings: Settings, path: str) -> Any:
    """The JSON of a 200 answer to ``GET path``; None for anything else."""
    secure = settings.url.startswith("https:")
    handlers: list[urllib.request.BaseHandler] = [_NoRedirects()]
    if secure:
        handlers.append(urllib.request.HTTPSHandler(context=tls_context()))
    # The configured controller's URL, http or https only (config.normalize_url).
    request = urllib.request.Request(  # noqa: S310
        f"{settings.url}{API_PREFIX}{path}",
        headers={
            "Authorization": f"Bearer {settings.token}",
            "Accept": "application/json",
            "User-Agent": f"devboxes-sdk/{__version__}",
        },
    )
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=READ_SECONDS) as answer:
            return json.loads(answer.read()) if answer.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException, DevboxesError):
        # Refusals, connection and TLS failures, an unreadable CA bundle, JSON that is not.
        return None


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    return None


def ready_box(settings: Settings, name: str) -> ReadyBox | None:
    """Box ``name`` when it is ready and the controller offers its tunnel; else None."""
    box = _read(settings, f"/devboxes/{quote(name, safe='')}")
    if not isinstance(box, dict) or box.get("state") != READY or box.get("name") != name:
        return None
    user, keys = box.get("ssh_user"), _strings(box.get("ssh_host_keys", []))
    if not (user is None or isinstance(user, str)) or keys is None:
        return None
    capabilities = _read(settings, "/capabilities")
    if not isinstance(capabilities, dict) or TUNNEL not in (
        _strings(capabilities.get("ssh_access")) or []
    ):
        return None
    return ReadyBox(name, user, keys)
