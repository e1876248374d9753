"""HTTP to one Devboxes API: the transport under :class:`~devboxes_sdk.client.Client`.

Every exchange goes through :meth:`Transport.request` on one ``requests.Session``, so
connections are reused and retries, the bearer token and the mapping of failures to
:mod:`devboxes_sdk.errors` live in one place. Reads that clients poll are revalidated
with the entity tag of their last answer.
"""

from __future__ import annotations

import json
import re
import ssl
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import requests
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from devboxes_sdk._version import __version__
from devboxes_sdk.errors import (
    ApiError,
    ConfigurationError,
    NotADevboxesServer,
    NotFound,
    Unavailable,
    error_from_body,
)
from devboxes_sdk.models import IDEMPOTENCY_HEADER

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

# Only requests that can be repeated without a second effect are retried: these methods,
# and a request carrying an idempotency key, which the server answers once.
_IDEMPOTENT_METHODS = frozenset({"GET", "DELETE"})
_RETRY_DELAYS = (0.5, 1.0, 2.0)
_USER_AGENT = f"devboxes-sdk/{__version__}"
# OpenSSL's verify results that mean "no CA this machine trusts signed it".
_UNTRUSTED_ISSUER_CODES = frozenset({18, 19, 20, 21})
# The certificate names another host: a host name (62) or an IP address (64).
_NAME_MISMATCH_CODES = frozenset({62, 64})
# Starlette's answer for a path no route serves, as opposed to a box that is not there.
_NO_ROUTE_DETAIL = "Not Found"
# Read paths whose last answer is kept for revalidation: a box, the list, the catalog.
# Bounded, so that a long-lived client that has read many boxes keeps only the latest.
_REVALIDATED_PATHS = 32

ModelT = TypeVar("ModelT", bound=BaseModel)


class _BearerAuth(requests.auth.AuthBase):
    """Sets the bearer header; as an ``auth`` object it also wins over ``~/.netrc``."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.token}"
        return request

    def __repr__(self) -> str:
        return "_BearerAuth(token=<hidden>)"


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and everything it wraps: requests and urllib3 keep the cause in
    ``args`` and ``reason`` as well as in the exception chain."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for inner in (*current.args, getattr(current, "reason", None), current.__cause__):
            if isinstance(inner, BaseException):
                pending.append(inner)


def _tls_problem(error: BaseException) -> ssl.SSLError | None:
    return next((cause for cause in _causes(error) if isinstance(cause, ssl.SSLError)), None)


def _describe_tls_error(error: ssl.SSLError, host: str) -> str:
    """What went wrong in the handshake with ``host``, and what fixes it."""
    if isinstance(error, ssl.SSLCertVerificationError):
        if error.verify_code in _NAME_MISMATCH_CODES:
            return (
                f"its TLS certificate is not valid for {host} (hostname mismatch); use the "
                "host name the certificate was issued for"
            )
        if error.verify_code in _UNTRUSTED_ISSUER_CODES:
            return (
                "its TLS certificate is not signed by a CA this machine trusts "
                f"({error.verify_message}); if it is your organisation's own CA, set "
                "REQUESTS_CA_BUNDLE to a PEM file that holds it"
            )
        return f"its TLS certificate was refused: {error.verify_message}"
    if error.reason == "WRONG_VERSION_NUMBER":
        return f"{host} does not speak TLS on this port; is the URL http:// rather than https://?"
    reason = error.reason or type(error).__name__
    return f"the TLS handshake with {host} failed ({reason})"


def _describe_connection_error(error: requests.RequestException, host: str) -> str:
    """The useful part of urllib3's long exception text (never includes headers)."""
    tls = _tls_problem(error)
    if tls is not None:
        return _describe_tls_error(tls, host)
    text = str(error)
    match = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if match:
        return match.group(1).strip()
    if "RemoteDisconnected" in text or "Connection aborted" in text:
        return "the server closed the connection"
    return "connection failed"


def _media_type(response: requests.Response) -> str:
    return response.headers.get("Content-Type", "").split(";")[0].strip().lower()


def _is_json(response: requests.Response) -> bool:
    media_type = _media_type(response)
    return media_type == "application/json" or media_type.endswith("+json")


def _not_devboxes(url: str, response: requests.Response, path: str) -> NotADevboxesServer:
    """A server that answers ``path`` with a page or a redirect is not the controller,
    whose API answers JSON only."""
    status = response.status_code
    if 300 <= status < 400:
        # The target is not shown: a login redirect can carry state meant for the browser.
        what = "a redirect (the SDK never follows one with your token)"
    else:
        media_type = _media_type(response)
        body = "an HTML page" if media_type == "text/html" else media_type or "no content type"
        what = f"{body} instead of JSON"
    return NotADevboxesServer(
        url,
        status,
        f"the server at {url} is not a Devboxes controller: it answered {path} with "
        f"{status} and {what}; the URL must be the controller's base URL",
    )


def _error(url: str, response: requests.Response, path: str) -> ApiError:
    status = response.status_code
    if 300 <= status < 400 or (status < 500 and not _is_json(response)):
        return _not_devboxes(url, response, path)
    try:
        body: object = response.json()
    except ValueError:
        body = None
    error = error_from_body(status, body, text=response.text, reason=response.reason or "")
    parts = urlsplit(url)
    if isinstance(error, NotFound) and error.detail == _NO_ROUTE_DETAIL and parts.path:
        # A controller at the host's root answers every other path so.
        base = f"{parts.scheme}://{parts.netloc}"
        return NotFound(
            404,
            f"no route {path} under {url}; the URL must be the controller's base URL, e.g. {base}",
        )
    return error


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
        # Between the tries of a repeatable request; none, and every request is sent once.
        self.retry_delays: tuple[float, ...] = _RETRY_DELAYS
        self._auth = _BearerAuth(token)
        self._owns_session = session is None
        self._session = session if session is not None else requests.Session()
        # path -> (entity tag, body) of the last 200, sent back as If-None-Match.
        self._last_read: dict[str, tuple[str, bytes]] = {}

    def close(self) -> None:
        if self._owns_session:
            self._session.close()

    def tunnel(self, name: str, *, notices: bool = False) -> ClientConnection:
        """A tunnel to box ``name``'s sshd, with this transport's URL and token."""
        # Imported here: plain API calls (e.g. ``devbox known-hosts``) never load websockets.
        from devboxes_sdk.tunnel import open_tunnel

        return open_tunnel(self.url, self._auth.token, name, notices=notices)

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

        GET, DELETE and requests with an ``Idempotency-Key`` header are retried on
        connection errors, 503 and 429 (the caller's share of the server's capacity is in
        use), with a short bounded backoff and the same headers; everything else is sent
        exactly once.
        """
        if not path.startswith("/") or path.startswith("//"):
            raise ValueError(f"API path must start with a single '/': {path!r}")
        method = method.upper()
        repeatable = method in _IDEMPOTENT_METHODS or IDEMPOTENCY_HEADER in (headers or {})
        delays = self.retry_delays
        attempts = len(delays) + 1 if repeatable else 1
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
                # A certificate that fails verification fails the same way on every try.
                if not last and not isinstance(_tls_problem(error), ssl.SSLCertVerificationError):
                    time.sleep(delays[attempt])
                    continue
                reason = _describe_connection_error(error, urlsplit(self.url).hostname or "")
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
            except OSError as error:
                # requests reads REQUESTS_CA_BUNDLE only now, and says so when it is missing.
                raise ConfigurationError(f"cannot send a request to {self.url}: {error}") from None
            status = response.status_code
            if status in (429, 503) and not last:
                response.close()
                time.sleep(delays[attempt])
                continue
            if status == 304 and headers and "If-None-Match" in headers:
                return response
            if status >= 300:
                raise _error(self.url, response, path)
            if status != 204 and not _is_json(response):
                raise _not_devboxes(self.url, response, path)
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
