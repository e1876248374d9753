"""HTTP to one Devboxes API: the transport under :class:`~devboxes_sdk.client.Client`.

Every exchange goes through :meth:`Transport.request` on one ``requests.Session``, so
connections are reused and retries, the bearer token and the mapping of failures to
:mod:`devboxes_sdk.errors` live in one place. Reads that clients poll are revalidated
with the entity tag of their last answer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any, TypeVar

import requests
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from devboxes_sdk._version import __version__
from devboxes_sdk.errors import ApiError, Unavailable, error_from_body

# Only requests that can be repeated without a second effect are retried.
_IDEMPOTENT_METHODS = frozenset({"GET", "DELETE"})
_RETRY_DELAYS = (0.5, 1.0, 2.0)
_USER_AGENT = f"devboxes-sdk/{__version__}"
# Read paths whose last answer is kept for revalidation: a box, the list, the catalog.
# Bounded, so that a long-lived client that has read many boxes keeps only the latest.
_REVALIDATED_PATHS = 32

ModelT = TypeVar("ModelT", bound=BaseModel)


class _BearerAuth(requests.auth.AuthBase):
    """Sets the bearer header; as an ``auth`` object it also wins over ``~/.netrc``."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:
        return "_BearerAuth(token=<hidden>)"


def _describe_connection_error(error: requests.RequestException) -> str:
    """The useful part of urllib3's long exception text (never includes headers)."""
    text = str(error)
    if isinstance(error, requests.exceptions.SSLError):
        match = re.search(r"(certificate verify failed[^'\")]*)", text)
        return f"TLS error: {match.group(1).strip()}" if match else "TLS handshake failed"
    match = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if match:
        return match.group(1).strip()
    if "RemoteDisconnected" in text or "Connection aborted" in text:
        return "the server closed the connection"
    return "connection failed"


def _error(response: requests.Response) -> ApiError:
    if 300 <= response.status_code < 400:
        return ApiError(
            response.status_code,
            "unexpected redirect; check the Devboxes URL (the SDK never follows "
            "redirects with your token)",
        )
    try:
        body: object = response.json()
    except ValueError:
        body = None
    return error_from_body(
        response.status_code, body, text=response.text, reason=response.reason or ""
    )


def decode(response: requests.Response) -> Any:
    """The response's JSON body; anything else is an :class:`ApiError`."""
    try:
        return response.json()
    except ValueError:
        content_type = response.headers.get("Content-Type", "no content type")
        raise ApiError(response.status_code, f"expected a JSON body, got {content_type}") from None


def parse(model: type[ModelT], data: Any, status: int) -> ModelT:
    """``data`` as ``model``; a body that does not match is an :class:`ApiError`."""
    try:
        return model.model_validate(data)
    except PydanticValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise ApiError(
            status,
            f"response does not match the Devboxes API "
            f"({model.model_config.get('title') or model.__name__}.{where}: "
            f"{first['msg']})",
        ) from None


class Transport:
    """Requests to the API at ``url`` with ``token``, each bounded by ``timeout`` seconds
    unless it says otherwise. Closes ``session`` only when it made it."""

    def __init__(
        self, url: str, token: str, timeout: float, session: requests.Session | None
    ) -> None:
        self.url = url
        self.timeout = timeout
        self._auth = _BearerAuth(token)
        self._owns_session = session is None
        self._session = session if session is not None else requests.Session()
        # path -> (entity tag, body) of the last 200, sent back as If-None-Match.
        self._last_read: dict[str, tuple[str, bytes]] = {}

    def close(self) -> None:
        if self._owns_session:
            self._session.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float | tuple[float, float] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """Send one request and return the successful response, or raise the mapped error.

        GET and DELETE are retried on connection errors and 503, with a short bounded
        backoff; everything else is sent exactly once.
        """
        if not path.startswith("/") or path.startswith("//"):
            raise ValueError(f"API path must start with a single '/': {path!r}")
        method = method.upper()
        attempts = len(_RETRY_DELAYS) + 1 if method in _IDEMPOTENT_METHODS else 1
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            try:
                response = self._session.request(
                    method,
                    self.url + path,
                    params=params,
                    json=body,
                    auth=self._auth,
                    headers={
                        "Accept": "application/json",
                        "User-Agent": _USER_AGENT,
                        **(headers or {}),
                    },
                    timeout=timeout if timeout is not None else self.timeout,
                    allow_redirects=False,
                )
            except requests.ConnectionError as error:
                if not last:
                    time.sleep(_RETRY_DELAYS[attempt])
                    continue
                reason = _describe_connection_error(error)
                raise Unavailable(
                    None, f"cannot reach the Devboxes API at {self.url}: {reason}"
                ) from None
            except requests.Timeout:
                raise Unavailable(
                    None, f"the Devboxes API at {self.url} did not answer in time"
                ) from None
            except requests.RequestException as error:
                raise ApiError(
                    None, f"request to the Devboxes API failed: {type(error).__name__}"
                ) from None
            if response.status_code == 503 and not last:
                response.close()
                time.sleep(_RETRY_DELAYS[attempt])
                continue
            if response.status_code >= 300 and not (
                response.status_code == 304 and headers and "If-None-Match" in headers
            ):
                raise _error(response)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    def get_model(
        self,
        path: str,
        model: type[ModelT],
        params: Mapping[str, str | int] | None = None,
    ) -> ModelT:
        response = self.request("GET", path, params=params)
        return parse(model, decode(response), response.status_code)

    def read(self, path: str) -> tuple[Any, int]:
        """GET ``path`` as JSON, revalidating the last answer: while nothing changed, the
        server answers 304 without a body and the body kept from before stands in for it."""
        last = self._last_read.get(path)
        response = self.request(
            "GET", path, headers={"If-None-Match": last[0]} if last is not None else None
        )
        if response.status_code == 304 and last is not None:
            return json.loads(last[1]), 200
        data = decode(response)
        self._last_read.pop(path, None)
        etag = response.headers.get("ETag")
        if etag:
            while len(self._last_read) >= _REVALIDATED_PATHS:
                del self._last_read[next(iter(self._last_read))]
            self._last_read[path] = (etag, response.content)
        return data, response.status_code
