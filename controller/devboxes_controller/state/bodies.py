"""Response bodies made once per change, not once per request.

A :class:`Body` holds the JSON bytes a read route answers with, their entity tag and,
for large bodies, the same bytes gzipped. The tag is a hash of the content, so every
replica gives the same tag to the same content, and a client polling with
``If-None-Match`` gets a 304 with no body until something changes.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request, Response

from ..config.settings import Settings

# Below this, compressing costs more than the bytes it saves.
GZIP_MIN_BYTES = 1024
# Fast compression: bodies change with every watch event, and level 6 already gets JSON
# lists to a fifth of their size.
GZIP_LEVEL = 6


@dataclass(frozen=True)
class Body:
    data: bytes
    etag: str
    gzipped: bytes | None = None


def body(data: bytes, compress: bool = False) -> Body:
    etag = f'"{hashlib.blake2b(data, digest_size=12).hexdigest()}"'
    packed = (
        gzip.compress(data, GZIP_LEVEL, mtime=0)
        if compress and len(data) >= GZIP_MIN_BYTES
        else None
    )
    return Body(data, etag, packed)


class CapabilitiesBody:
    """The capabilities' body: made from the settings, and once more when the cluster's id,
    which ``cluster_id`` gives from memory (None while unknown), has changed since."""

    def __init__(self, settings: Settings, cluster_id: Callable[[], str | None]) -> None:
        self._settings = settings
        self._cluster_id = cluster_id
        self._made = self._make(cluster_id())

    def _make(self, cluster_id: str | None) -> tuple[str | None, Body]:
        capabilities = self._settings.capabilities(cluster_id)
        return cluster_id, body(capabilities.model_dump_json().encode())

    def current(self) -> Body:
        cluster_id = self._cluster_id()
        made = self._made
        if made[0] != cluster_id:
            made = self._made = self._make(cluster_id)
        return made[1]


def _accepts_gzip(request: Request) -> bool:
    codings = request.headers.get("accept-encoding", "")
    return any(
        part.split(";")[0].strip().lower() == "gzip" and "q=0" not in part.replace(" ", "")
        for part in codings.split(",")
    )


def respond(request: Request, answer: Body) -> Response:
    """200 with the body, or 304 when the client already holds this version."""
    headers = {"ETag": answer.etag, "Vary": "Accept-Encoding"}
    presented = request.headers.get("if-none-match", "")
    if answer.etag in (tag.strip() for tag in presented.split(",")) or presented == "*":
        return Response(status_code=304, headers=headers)
    if answer.gzipped is not None and _accepts_gzip(request):
        headers["Content-Encoding"] = "gzip"
        return Response(answer.gzipped, media_type="application/json", headers=headers)
    return Response(answer.data, media_type="application/json", headers=headers)
