"""The typed client of the Devboxes API (``/api/v1``).

Every HTTP exchange goes through :meth:`Client._request` on one ``requests.Session``,
so connections are reused and retries, authentication and error mapping live in one
place.
"""

from __future__ import annotations

import builtins
import copy
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import requests
from pydantic import BaseModel, ConfigDict, PrivateAttr
from pydantic import ValidationError as PydanticValidationError

from devboxes_sdk import models
from devboxes_sdk._version import __version__
from devboxes_sdk.config import resolve
from devboxes_sdk.errors import (
    ApiError,
    BoxDegraded,
    BoxStopped,
    StartTimeout,
    Unavailable,
    ValidationError,
    error_from_body,
)
from devboxes_sdk.models import API_PREFIX, MAX_WAIT_SECONDS, WAIT_HEADER, FieldError

__all__ = ["Client", "Devbox", "GpuNamespace", "UpdateCallback"]

# With a progress callback, server-side waits are cut into rounds this long so that
# messages that change while the box starts (e.g. the scheduler's reason) still arrive.
PROGRESS_SERVER_WAIT = 10
# Only requests that can be repeated without a second effect are retried.
_IDEMPOTENT_METHODS = frozenset({"GET", "DELETE"})
_RETRY_DELAYS = (0.5, 1.0, 2.0)
_POLL_FIRST_DELAY = 0.5
_POLL_MAX_DELAY = 5.0
# A server-side wait that comes back sooner than this without any change is treated
# like a poll, so a misbehaving server cannot turn the wait into a busy loop.
_MIN_SERVER_WAIT_ROUND = 1.0
_USER_AGENT = f"devboxes-sdk/{__version__}"
# Read paths whose last answer is kept for revalidation: a box, the list, the catalog.
# Bounded, so that a long-lived client that has read many boxes keeps only the latest.
_REVALIDATED_PATHS = 32

_ModelT = TypeVar("_ModelT", bound=BaseModel)
UpdateCallback = Callable[["Devbox"], object]


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


def _name_or_error(name: str) -> str:
    try:
        return models.normalize_name(name)
    except ValueError as error:
        raise ValidationError([FieldError(loc=["name"], msg=str(error))], local=True) from None


def create_body(
    name: str,
    preset: str = "small",
    ttl_hours: int = 24,
    repository: str | None = None,
    gpu: bool | str | models.GpuProfile | models.GpuRequest | None = None,
) -> dict[str, Any]:
    """The JSON body of a create, checked against :class:`models.DevboxCreate`.

    ``gpu=True`` becomes ``"gpu": {}`` (the operator default), a name becomes
    ``{"profile": name}``, and ``None``/``False`` leave the key out (a CPU box). A
    :class:`models.GpuRequest` (the ``gpu`` of a create body) means what it says.
    """
    body: dict[str, Any] = {"name": name, "preset": preset, "ttl_hours": ttl_hours}
    if isinstance(gpu, models.GpuRequest):
        gpu = gpu.profile if gpu.profile is not None else True
    if repository is not None:
        body["repository"] = repository
    if gpu is True:
        body["gpu"] = {}
    elif isinstance(gpu, models.GpuProfile):
        body["gpu"] = {"profile": gpu.name}
    elif isinstance(gpu, str):
        if not gpu.strip():
            raise ValidationError(
                [FieldError(loc=["body", "gpu", "profile"], msg="profile name is empty")],
                local=True,
            )
        body["gpu"] = {"profile": gpu.strip()}
    elif gpu is not None and gpu is not False:
        raise TypeError("gpu must be None, a bool, a profile name, a GpuProfile or a GpuRequest")
    try:
        checked = models.DevboxCreate.model_validate(body)
    except PydanticValidationError as error:
        raise ValidationError.from_pydantic(error) from None
    body["name"] = checked.name
    if checked.repository is None:
        body.pop("repository", None)
    else:
        body["repository"] = checked.repository
    return body


class Devbox(models.Devbox):
    """One box: the wire model :class:`devboxes_sdk.models.Devbox`, bound to the client
    that fetched it.

    :attr:`raw` is the JSON the server sent, unknown fields included. ``refresh``,
    ``start``, ``stop``, ``extend`` and ``wait_ready`` update this object in place and
    return it.
    """

    _client: Client = PrivateAttr()
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    def _bind(self, client: Client, raw: Mapping[str, Any]) -> Devbox:
        self._client = client
        self._raw = dict(raw)
        return self

    def _replace(self, other: Devbox) -> Devbox:
        for field in models.Devbox.model_fields:
            setattr(self, field, getattr(other, field))
        self._raw = other._raw
        return self

    @property
    def raw(self) -> dict[str, Any]:
        """A copy of the server's JSON for this box."""
        return copy.deepcopy(self._raw)

    @property
    def ready(self) -> bool:
        return self.state is models.DevboxState.READY

    def refresh(self) -> Devbox:
        return self._replace(self._client.get(self.name))

    def start(self) -> Devbox:
        """Start the box (renews its TTL). Use :meth:`wait_ready` to wait for it."""
        return self._replace(self._client.start(self.name))

    def stop(self) -> Devbox:
        """Stop the box; its home volume is kept."""
        return self._replace(self._client.stop(self.name))

    def delete(self, purge: bool = False) -> models.DeleteResult:
        """Delete the box; ``purge=True`` also deletes its home volume for good."""
        return self._client.delete(self.name, purge=purge)

    def extend(self, hours: int) -> Devbox:
        """Push the box's auto-stop time back by ``hours``, without a restart."""
        return self._replace(self._client.extend(self.name, hours))

    def wait_ready(
        self, timeout: float = 600, *, on_update: UpdateCallback | None = None
    ) -> Devbox:
        """Wait until the box is ready; see :meth:`Client.wait_ready`."""
        return self._replace(self._client.wait_ready(self.name, timeout, on_update=on_update))

    def __repr__(self) -> str:
        gpu = self.gpu.profile if self.gpu else None
        return (
            f"Devbox(name={self.name!r}, state={self.state.value!r}, "
            f"preset={self.preset!r}, gpu={gpu!r})"
        )


class _Boxes(BaseModel):
    """``GET /api/v1/devboxes`` parsed straight into bound boxes."""

    # Named after the wire model in the error a body that does not match it raises.
    model_config = ConfigDict(extra="ignore", title=models.DevboxList.__name__)

    items: list[Devbox]


class GpuNamespace:
    """``client.gpu``: the routes under ``/api/v1/gpu``. The catalog itself is
    ``client.capabilities().gpu``."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def availability(self, preset: models.Preset | None = None) -> models.GpuAvailability:
        """Per profile: boxes that could start now (``available``), on an empty cluster
        (``capacity``) and boxes waiting for a device (``waiting``), in the profile's units.

        With ``preset``, a box counts only where that preset's CPU and memory also fit.
        ``available`` and ``capacity`` are ``None`` (with ``reason``) when the server
        cannot see the cluster's nodes and pods.
        """
        params = {"preset": preset} if preset is not None else None
        return self._client._get_model(
            f"{API_PREFIX}/gpu/availability", models.GpuAvailability, params
        )

    def doctor(self) -> models.DoctorReport:
        """The operator's preflight: every prerequisite of every profile, checked live."""
        return self._client._get_model(f"{API_PREFIX}/gpu/doctor", models.DoctorReport)


class Client:
    """A connection to one Devboxes API.

    ``url`` and ``token`` default to ``DEVBOX_URL`` / ``DEVBOX_TOKEN`` and then to the
    configuration file (see :mod:`devboxes_sdk.config`). ``timeout`` bounds every
    request in seconds. Pass ``session`` to share a ``requests.Session``; the client
    only closes sessions it created.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        session: requests.Session | None = None,
    ) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        settings = resolve(url, token)
        self._url = settings.url
        self._auth = _BearerAuth(settings.token)
        self.timeout = float(timeout)
        self._owns_session = session is None
        self._session = session if session is not None else requests.Session()
        # path -> (entity tag, body) of the last 200, sent back as If-None-Match.
        self._last_read: dict[str, tuple[str, bytes]] = {}
        self.gpu = GpuNamespace(self)

    @property
    def url(self) -> str:
        return self._url

    def __repr__(self) -> str:
        return f"Client(url={self._url!r})"

    def close(self) -> None:
        if self._owns_session:
            self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- transport ----------------------------------------------------------------

    def _request(
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
                    self._url + path,
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
                    None, f"cannot reach the Devboxes API at {self._url}: {reason}"
                ) from None
            except requests.Timeout:
                raise Unavailable(
                    None, f"the Devboxes API at {self._url} did not answer in time"
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
                raise self._error(response)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    @staticmethod
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

    @staticmethod
    def _decode(response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            content_type = response.headers.get("Content-Type", "no content type")
            raise ApiError(
                response.status_code, f"expected a JSON body, got {content_type}"
            ) from None

    @staticmethod
    def _parse(model: type[_ModelT], data: Any, status: int) -> _ModelT:
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

    def request_json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        """Send a request to ``path`` (e.g. ``/api/v1/devboxes``) and return its JSON.

        The escape hatch for fields or endpoints the typed verbs do not cover; errors
        are mapped exactly as for the typed verbs.
        """
        return self._decode(self._request(method, path, params=params, body=body))

    def _get_model(
        self,
        path: str,
        model: type[_ModelT],
        params: Mapping[str, str | int] | None = None,
    ) -> _ModelT:
        response = self._request("GET", path, params=params)
        return self._parse(model, self._decode(response), response.status_code)

    def _read(self, path: str) -> tuple[Any, int]:
        """GET ``path`` as JSON, revalidating the last answer: while nothing changed, the
        server answers 304 without a body and the body kept from before stands in for it."""
        last = self._last_read.get(path)
        response = self._request(
            "GET", path, headers={"If-None-Match": last[0]} if last is not None else None
        )
        if response.status_code == 304 and last is not None:
            return json.loads(last[1]), 200
        data = self._decode(response)
        self._last_read.pop(path, None)
        etag = response.headers.get("ETag")
        if etag:
            while len(self._last_read) >= _REVALIDATED_PATHS:
                del self._last_read[next(iter(self._last_read))]
            self._last_read[path] = (etag, response.content)
        return data, response.status_code

    def _box(self, response: requests.Response) -> Devbox:
        return self._box_from(self._decode(response), response.status_code)

    def _box_from(self, data: Any, status: int) -> Devbox:
        return self._parse(Devbox, data, status)._bind(self, data)

    # -- verbs --------------------------------------------------------------------

    def whoami(self) -> models.WhoAmI:
        return self._get_model(f"{API_PREFIX}/whoami", models.WhoAmI)

    def capabilities(self) -> models.Capabilities:
        """What the server offers; ``.gpu`` is the GPU catalog (no profiles when disabled)."""
        data, status = self._read(f"{API_PREFIX}/capabilities")
        return self._parse(models.Capabilities, data, status)

    def create(
        self,
        name: str,
        preset: models.Preset = "small",
        ttl_hours: int = 24,
        repository: str | None = None,
        gpu: bool | str | models.GpuProfile | models.GpuRequest | None = None,
    ) -> Devbox:
        """Create a box and return it at once (usually ``starting``).

        ``gpu``: ``None``/``False`` for a CPU box, ``True`` for the operator's default
        profile, a profile name (or :class:`~devboxes_sdk.models.GpuProfile`), or the
        ``gpu`` of a :class:`~devboxes_sdk.models.DevboxCreate`.
        The body is checked locally first; a broken rule raises
        :class:`~devboxes_sdk.errors.ValidationError` without a request.
        """
        body = create_body(name, preset, ttl_hours, repository, gpu)
        return self._box(self._request("POST", f"{API_PREFIX}/devboxes", body=body))

    def list(self) -> builtins.list[Devbox]:
        """Every box, newest first."""
        data, status = self._read(f"{API_PREFIX}/devboxes")
        parsed = self._parse(_Boxes, data, status)
        return [box._bind(self, raw) for box, raw in zip(parsed.items, data["items"], strict=True)]

    def get(self, name: str) -> Devbox:
        return self._box_from(*self._read(f"{API_PREFIX}/devboxes/{_name_or_error(name)}"))

    def start(self, name: str) -> Devbox:
        """Start a stopped box (renews its TTL); returns without waiting."""
        path = f"{API_PREFIX}/devboxes/{_name_or_error(name)}/start"
        return self._box(self._request("POST", path))

    def stop(self, name: str) -> Devbox:
        """Stop a box; its home volume is kept."""
        path = f"{API_PREFIX}/devboxes/{_name_or_error(name)}/stop"
        return self._box(self._request("POST", path))

    def delete(self, name: str, purge: bool = False) -> models.DeleteResult:
        """Delete a box. The home volume is kept unless ``purge`` is true."""
        response = self._request(
            "DELETE",
            f"{API_PREFIX}/devboxes/{_name_or_error(name)}",
            params={"purge": "true" if purge else "false"},
        )
        return self._parse(models.DeleteResult, self._decode(response), response.status_code)

    def extend(self, name: str, hours: int) -> Devbox:
        """Push a running box's auto-stop time back by ``hours`` (at most the server's
        maximum time to live from now); the box keeps running."""
        try:
            body = models.DevboxExtend(hours=hours)
        except PydanticValidationError as error:
            raise ValidationError.from_pydantic(error) from None
        path = f"{API_PREFIX}/devboxes/{_name_or_error(name)}/extend"
        return self._box(self._request("POST", path, body=body.model_dump()))

    def volumes(self) -> builtins.list[models.Volume]:
        """Home volumes kept after their box was deleted, oldest first."""
        response = self._request("GET", f"{API_PREFIX}/volumes")
        data = self._decode(response)
        return self._parse(models.VolumeList, data, response.status_code).items

    def purge_volume(self, name: str) -> models.DeleteResult:
        """Delete the retained home volume of the box ``name``, permanently."""
        response = self._request("DELETE", f"{API_PREFIX}/volumes/{_name_or_error(name)}")
        return self._parse(models.DeleteResult, self._decode(response), response.status_code)

    def wait_ready(
        self,
        name: str,
        timeout: float = 600,
        *,
        on_update: UpdateCallback | None = None,
    ) -> Devbox:
        """Wait until the box is ``ready`` and return it.

        Uses the server-side wait when the server offers it (it answers with
        ``X-Devboxes-Wait: ready``), otherwise polls with a backoff from 0.5 s to 5 s.
        ``on_update`` is called with the first observed box and again whenever its
        state or message changes; with a callback, each server-side wait lasts at most
        ``PROGRESS_SERVER_WAIT`` seconds so that changes are seen while they happen.

        Raises :class:`~devboxes_sdk.errors.BoxDegraded` as soon as the box is degraded,
        :class:`~devboxes_sdk.errors.BoxStopped` if it is stopped, and
        :class:`~devboxes_sdk.errors.StartTimeout` (with the last state and message,
        e.g. the scheduler's reason) when ``timeout`` seconds pass.
        """
        if not timeout >= 0:
            raise ValueError("timeout must be zero or a positive number of seconds")
        path = f"{API_PREFIX}/devboxes/{_name_or_error(name)}"
        deadline = time.monotonic() + timeout
        server_wait = True
        delay = _POLL_FIRST_DELAY
        seen: tuple[models.DevboxState, str | None] | None = None
        round_cap = MAX_WAIT_SECONDS if on_update is None else PROGRESS_SERVER_WAIT
        while True:
            remaining = deadline - time.monotonic()
            asked_server = server_wait and remaining >= 1
            round_started = time.monotonic()
            if asked_server:
                seconds = min(round_cap, math.floor(remaining))
                response = self._request(
                    "GET",
                    path,
                    params={"wait": "ready", "timeout": seconds},
                    timeout=(self.timeout, seconds + self.timeout),
                )
                server_wait = response.headers.get(WAIT_HEADER, "").strip().lower() == "ready"
                box = self._box(response)
            else:
                box = self._box_from(*self._read(path))
            current = (box.state, box.message)
            changed = current != seen
            seen = current
            if changed and on_update is not None:
                on_update(box)
            if box.state is models.DevboxState.READY:
                return box
            if box.state is models.DevboxState.DEGRADED:
                raise BoxDegraded(box)
            if box.state is models.DevboxState.STOPPED:
                raise BoxStopped(box)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StartTimeout(box, timeout)
            quick = time.monotonic() - round_started < _MIN_SERVER_WAIT_ROUND
            if not (asked_server and server_wait) or (quick and not changed):
                time.sleep(min(delay, remaining))
                delay = min(delay * 2, _POLL_MAX_DELAY)
