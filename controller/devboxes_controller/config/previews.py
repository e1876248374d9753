"""Where the web previews of boxes are served: ``connections.previewUrl``.

A preview is a port an image profile declares (a web preview, a notebook server), served
by the controller on an origin of its own: ``{port}-{box}.<domain>``, one per box and
port, so that what a box serves can never act as the dashboard, nor as another box's
preview, in a browser. The operator names the pattern, e.g.
``https://*.preview.example.com``, and routes that wildcard host to the controller.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, StrictStr, WithJsonSchema

from devboxes_sdk.models import NAME_PATTERN

from .violations import fail

MAX_PREVIEW_URL_LENGTH = 200
_PATTERN = r"^https?://\*\.[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?/?$"
_PATTERN_RE = re.compile(_PATTERN)
# "8080-web": the port, then the box's name. A port has no dash, so it is all the digits
# before the first one, whatever the name.
_LABEL_RE = re.compile(rf"^(?P<port>[1-9][0-9]{{0,4}})-(?P<name>{NAME_PATTERN.strip('^$')})$")


@dataclass(frozen=True)
class PreviewOrigins:
    """The origins of previews: ``scheme://{port}-{box}.domain[:port]``."""

    scheme: str
    domain: str
    # The port in the URL, as written, or None for the scheme's default.
    port: int | None

    @classmethod
    def parse(cls, pattern: str) -> PreviewOrigins:
        parts = urllib.parse.urlsplit(pattern)
        host = parts.hostname or ""
        return cls(scheme=parts.scheme, domain=host.removeprefix("*."), port=parts.port)

    @property
    def secure(self) -> bool:
        return self.scheme == "https"

    def origin(self, box: str, port: int) -> str:
        suffix = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{port}-{box}.{self.domain}{suffix}"

    def box_of(self, host_header: str) -> tuple[str, int] | None:
        """The box and port a request's ``Host`` names, or None when it is no preview's."""
        host = host_header.lower()
        if host.startswith("["):
            return None
        host, _, _ = host.partition(":")
        label, dot, domain = host.partition(".")
        if not dot or domain != self.domain:
            return None
        found = _LABEL_RE.fullmatch(label)
        if found is None or int(found["port"]) > 65535:
            return None
        return found["name"], int(found["port"])


def _check_preview_url(value: str) -> str:
    if len(value) > MAX_PREVIEW_URL_LENGTH or not _PATTERN_RE.fullmatch(value):
        raise fail(
            f"{value!r} is not a preview URL pattern: use http(s)://*.<domain>[:port], "
            "e.g. https://*.preview.example.com, a wildcard host routed to the controller"
        )
    port = urllib.parse.urlsplit(value).netloc.rpartition(":")[2]
    if port.isdigit() and not 0 < int(port) < 65536:
        raise fail(f"{value!r} has no valid port (1-65535)")
    return value.rstrip("/")


PreviewUrl = Annotated[
    StrictStr,
    AfterValidator(_check_preview_url),
    WithJsonSchema({"type": "string", "maxLength": MAX_PREVIEW_URL_LENGTH, "pattern": _PATTERN}),
]
