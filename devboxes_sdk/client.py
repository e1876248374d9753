"""The typed client of the Devboxes API (``/api/v1``): its verbs, and boxes that carry
them. The HTTP underneath (retries, the token, error mapping) is
:mod:`devboxes_sdk._transport`.
"""

from __future__ import annotations

import builtins
import copy
import math
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import date, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import requests
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic import ValidationError as PydanticValidationError

from devboxes_sdk import models
from devboxes_sdk._transport import Transport, decode, parse
from devboxes_sdk.config import resolve
from devboxes_sdk.errors import (
    BoxDegraded,
    BoxStopped,
    ListExpired,
    StartTimeout,
    ValidationError,
)
from devboxes_sdk.models import (
    API_PREFIX,
    IDEMPOTENCY_HEADER,
    MAX_LIST_LIMIT,
    MAX_USAGE_DAYS,
    MAX_WAIT_SECONDS,
    USAGE_GROUP_BYS,
    WAIT_HEADER,
    FieldError,
)

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

__all__ = ["BookingsNamespace", "Client", "Devbox", "GpuNamespace", "UpdateCallback"]

# With a progress callback, server-side waits are cut into rounds this long so that
# messages that change while the box starts (e.g. the scheduler's reason) still arrive.
PROGRESS_SERVER_WAIT = 10
_POLL_FIRST_DELAY = 0.5
_POLL_MAX_DELAY = 5.0
# A server-side wait that comes back sooner than this without any change is treated
# like a poll, so a misbehaving server cannot turn the wait into a busy loop.
_MIN_SERVER_WAIT_ROUND = 1.0
# Half a megabyte or so of JSON per request: few round trips, no long stall on any one.
DEFAULT_PAGE_SIZE = 500
UpdateCallback = Callable[["Devbox"], object]


def _name_or_error(name: str) -> str:
    try:
        return models.normalize_name(name)
    except ValueError as error:
        raise ValidationError([FieldError(loc=["name"], msg=str(error))], local=True) from None


def _filters(
    state: models.DevboxState | str | None, profile: str | None, owner: str | None
) -> dict[str, str]:
    wanted = {"state": state, "profile": profile, "owner": owner}
    return {key: str(value) for key, value in wanted.items() if value is not None}


def create_body(
    name: str,
    preset: str = "small",
    ttl_hours: int = 24,
    repository: str | None = None,
    gpu: bool | str | models.GpuProfile | models.GpuRequest | None = None,
    image: str | models.ImageProfile | None = None,
) -> dict[str, Any]:
    """The JSON body of a create, checked against :class:`models.DevboxCreate`.

    ``gpu=True`` becomes ``"gpu": {}`` (the operator default), a name becomes
    ``{"profile": name}``, and ``None``/``False`` leave the key out (a CPU box). A
    :class:`models.GpuRequest` (the ``gpu`` of a create body) means what it says.
    ``image`` is an image profile's name (or the profile); ``None`` leaves the key out.
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
    if isinstance(image, models.ImageProfile):
        image = image.name
    if isinstance(image, str):
        if not image.strip():
            raise ValidationError(
                [FieldError(loc=["body", "image"], msg="image profile name is empty")],
                local=True,
            )
        body["image"] = image.strip()
    elif image is not None:
        raise TypeError("image must be None, an image profile name or an ImageProfile")
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


class _Page(_Boxes):
    """One page of a paged ``GET /api/v1/devboxes``."""

    next: str | None = Field(default=None, alias="continue")


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
        return self._client._http.get_model(
            f"{API_PREFIX}/gpu/availability", models.GpuAvailability, params
        )

    def when(self, profile: str | None = None) -> models.GpuWhen:
        """When a new box of each GPU profile (or only ``profile``) would get a device, as
        things stand: now, a time with the reason for it, or unknown."""
        path = f"{API_PREFIX}/gpu/when"
        if profile is not None:
            path += "/" + _profile_or_error(profile)
        return self._client._http.get_model(path, models.GpuWhen)

    def timeline(self) -> models.GpuTimeline:
        """The next 24 hours of each GPU profile: per unit of it, the running boxes until
        they stop on their own and the bookings (others' boxes unnamed)."""
        return self._client._http.get_model(f"{API_PREFIX}/gpu/timeline", models.GpuTimeline)

    def doctor(self) -> models.DoctorReport:
        """The operator's preflight: every prerequisite of every profile, checked live."""
        return self._client._http.get_model(f"{API_PREFIX}/gpu/doctor", models.DoctorReport)


def _profile_or_error(profile: str) -> str:
    if not models.NAME_RE.fullmatch(profile):
        raise ValidationError(
            [FieldError(loc=["profile"], msg=f"invalid profile {profile!r}: {models.NAME_RULE}")],
            local=True,
        )
    return profile


def usage_query(
    since: date | None = None,
    until: date | None = None,
    group_by: str = "profile",
    everyone: bool = False,
) -> dict[str, str]:
    """The query of ``GET /api/v1/usage``, checked as the server checks it: a grouping it
    knows, ``since`` not after ``until`` and a span of at most ``MAX_USAGE_DAYS`` days
    when both are given (a missing one is the server's to default, on its clock)."""
    problems: list[FieldError] = []
    if group_by not in USAGE_GROUP_BYS:
        choices = ", ".join(USAGE_GROUP_BYS)
        problems.append(
            FieldError(loc=["query", "group_by"], msg=f"must be one of {choices}, got {group_by!r}")
        )
    if since is not None and until is not None:
        if since > until:
            problems.append(
                FieldError(
                    loc=["query", "since"], msg=f"must not be after until ({until.isoformat()})"
                )
            )
        elif (until - since).days + 1 > MAX_USAGE_DAYS:
            problems.append(
                FieldError(
                    loc=["query", "since"], msg=f"a report covers at most {MAX_USAGE_DAYS} days"
                )
            )
    if problems:
        raise ValidationError(problems, local=True)
    query = {"group_by": group_by}
    if since is not None:
        query["since"] = since.isoformat()
    if until is not None:
        query["until"] = until.isoformat()
    if everyone:
        query["all"] = "true"
    return query


class BookingsNamespace:
    """``client.bookings``: devices of a GPU profile promised to the caller for a window."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self, profile: str | None = None) -> builtins.list[models.Booking]:
        """The caller's bookings (an admin's: everyone's), earliest window first."""
        params = {"profile": _profile_or_error(profile)} if profile is not None else None
        path = f"{API_PREFIX}/bookings"
        return self._client._http.get_model(path, models.BookingList, params).items

    def create(
        self, profile: str, starts_at: datetime, hours: int, box: str | None = None
    ) -> models.Booking:
        """Book one unit of ``profile`` from ``starts_at`` for ``hours``. Refused with
        ``errors.Conflict`` naming the earliest window that fits when this one does not."""
        try:
            body = models.BookingCreate(profile=profile, starts_at=starts_at, hours=hours, box=box)
        except PydanticValidationError as error:
            raise ValidationError.from_pydantic(error) from None
        response = self._client._http.request(
            "POST", f"{API_PREFIX}/bookings", body=body.model_dump(mode="json")
        )
        return parse(models.Booking, decode(response), response.status_code)

    def cancel(self, name: str) -> models.Booking:
        """Cancel a booking; it keeps nothing from now."""
        if not re.fullmatch(models.BOOKING_NAME_PATTERN, name):
            raise ValidationError(
                [
                    FieldError(
                        loc=["name"],
                        msg=f"invalid booking name {name!r}: bk- and 8 "
                        "lowercase letters or digits, as listed",
                    )
                ],
                local=True,
            )
        response = self._client._http.request("DELETE", f"{API_PREFIX}/bookings/{name}")
        return parse(models.Booking, decode(response), response.status_code)


class KeysNamespace:
    """``client.keys``: the caller's SSH public keys, which every box of theirs accepts."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> builtins.list[models.SshKey]:
        return self._client._http.get_model(f"{API_PREFIX}/keys", models.SshKeyList).items

    def add(self, key: str) -> models.SshKey:
        """Add one public key: a line of a ``.pub`` file (``ssh-ed25519 AAAA... comment``)."""
        try:
            body = models.SshKeyAdd(key=key)
        except PydanticValidationError as error:
            raise ValidationError.from_pydantic(error) from None
        response = self._client._http.request("POST", f"{API_PREFIX}/keys", body=body.model_dump())
        return parse(models.SshKey, decode(response), response.status_code)

    def remove(self, fingerprint: str) -> models.SshKey:
        """Remove the key with this fingerprint (``SHA256:...``, as listed)."""
        response = self._client._http.request(
            "DELETE", f"{API_PREFIX}/keys", params={"fingerprint": fingerprint}
        )
        return parse(models.SshKey, decode(response), response.status_code)


class Client:
    """A connection to one Devboxes API.

    ``url`` and ``token`` default to ``DEVBOX_URL`` / ``DEVBOX_TOKEN`` and then to the
    configuration file (see :mod:`devboxes_sdk.config`). ``timeout`` bounds every
    request in seconds. Pass ``session`` to share a ``requests.Session``; the client
    only closes sessions it created. With ``retry=False`` nothing is tried twice: a
    failed connection or a 503 is the answer at once, for a caller with a deadline of
    its own. ``cluster`` names one of the configuration file's clusters (see
    :mod:`devboxes_sdk.clusters` for all of them at once).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        session: requests.Session | None = None,
        retry: bool = True,
        cluster: str | None = None,
    ) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        settings = resolve(url, token, cluster=cluster)
        self._http = Transport(settings.url, settings.token, float(timeout), session)
        if not retry:
            self._http.retry_delays = ()
        self.gpu = GpuNamespace(self)
        self.keys = KeysNamespace(self)
        self.bookings = BookingsNamespace(self)

    @property
    def url(self) -> str:
        return self._http.url

    @property
    def timeout(self) -> float:
        """Bounds every request, in seconds."""
        return self._http.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._http.timeout = seconds

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"

    def tunnel(self, name: str, *, notices: bool = False) -> ClientConnection:
        """A tunnel to box ``name``'s SSH server through the controller: a WebSocket whose
        binary messages carry the SSH connection (see :mod:`devboxes_sdk.tunnel`). The box
        must be ready; the API's error otherwise (404, 409 with its state). With
        ``notices``, the controller also sends the box's stop warnings, each once, as text
        messages."""
        return self._http.tunnel(name, notices=notices)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
        return decode(self._http.request(method, path, params=params, body=body))

    def _box(self, response: requests.Response) -> Devbox:
        return self._box_from(decode(response), response.status_code)

    def _box_from(self, data: Any, status: int) -> Devbox:
        return parse(Devbox, data, status)._bind(self, data)

    def whoami(self) -> models.WhoAmI:
        return self._http.get_model(f"{API_PREFIX}/whoami", models.WhoAmI)

    def capabilities(self) -> models.Capabilities:
        """What the server offers: ``.gpu`` is the GPU catalog and ``.images`` the image
        profiles (each without profiles when disabled, or from a server without them)."""
        data, status = self._http.read(f"{API_PREFIX}/capabilities")
        return parse(models.Capabilities, data, status)

    def create(
        self,
        name: str,
        preset: models.Preset = "small",
        ttl_hours: int = 24,
        repository: str | None = None,
        gpu: bool | str | models.GpuProfile | models.GpuRequest | None = None,
        image: str | models.ImageProfile | None = None,
    ) -> Devbox:
        """Create a box and return it at once (usually ``starting``).

        ``gpu``: ``None``/``False`` for a CPU box, ``True`` for the operator's default
        profile, a profile name (or :class:`~devboxes_sdk.models.GpuProfile`), or the
        ``gpu`` of a :class:`~devboxes_sdk.models.DevboxCreate`. ``image``: an image
        profile of ``capabilities().images``, by name or as the profile itself.
        The body is checked locally first; a broken rule raises
        :class:`~devboxes_sdk.errors.ValidationError` without a request.

        The create carries a new ``Idempotency-Key``, so it is retried like a read (on a
        503 or a failed connection): a try that the server applied but could not confirm
        answers with the box it made, never with a conflict.
        """
        body = create_body(name, preset, ttl_hours, repository, gpu, image)
        response = self._http.request(
            "POST",
            f"{API_PREFIX}/devboxes",
            body=body,
            headers={IDEMPOTENCY_HEADER: str(uuid.uuid4())},
        )
        return self._box(response)

    def list(
        self,
        *,
        state: models.DevboxState | str | None = None,
        profile: str | None = None,
        owner: str | None = None,
        page_size: int | None = None,
    ) -> builtins.list[Devbox]:
        """Every box the caller may see, newest first; only those in ``state``, of
        ``profile`` (a GPU profile's name, or ``"cpu"``) and of ``owner`` (admins only,
        for another person) when given.

        Without ``page_size`` the list comes in one answer, revalidated with its entity
        tag when asked for again; with it, page by page as :meth:`iter_boxes` fetches it.
        """
        if page_size is not None:
            boxes = self.iter_boxes(state=state, profile=profile, owner=owner, page_size=page_size)
            return sorted(boxes, key=lambda box: (box.created_at, box.name), reverse=True)
        query = urlencode(_filters(state, profile, owner))
        data, status = self._http.read(f"{API_PREFIX}/devboxes" + (f"?{query}" if query else ""))
        parsed = parse(_Boxes, data, status)
        return [box._bind(self, raw) for box, raw in zip(parsed.items, data["items"], strict=True)]

    def iter_boxes(
        self,
        *,
        state: models.DevboxState | str | None = None,
        profile: str | None = None,
        owner: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> Iterator[Devbox]:
        """Every box (filtered as for :meth:`list`) in name order, fetching the next page
        only when the iteration reaches it.

        A box that exists throughout the iteration is yielded exactly once; one created
        or deleted meanwhile may or may not be. Should the server expire the list (410,
        e.g. after a pause of more than 15 minutes), the list starts again once, skipping
        the names already yielded; a second expiry raises :class:`ListExpired`.
        """
        if not 1 <= page_size <= MAX_LIST_LIMIT:
            raise ValueError(f"page_size must be between 1 and {MAX_LIST_LIMIT}")
        filters = _filters(state, profile, owner)
        path = f"{API_PREFIX}/devboxes"
        token: str | None = None
        # Names up to this one were yielded before the list started again.
        resume = ""
        last = ""
        restarted = False
        while True:
            params: dict[str, str | int] = {**filters, "limit": page_size}
            if token is not None:
                params["continue"] = token
            try:
                response = self._http.request("GET", path, params=params)
            except ListExpired as err:
                if restarted:
                    raise ListExpired(
                        err.status, f"the list expired again after starting over: {err.detail}"
                    ) from err
                restarted, token, resume = True, None, last
                continue
            data = decode(response)
            page = parse(_Page, data, response.status_code)
            for box, raw in zip(page.items, data["items"], strict=True):
                if box.name > resume:
                    last = box.name
                    yield box._bind(self, raw)
            # Kubernetes ends its lists with an empty continue; sent back, it would start
            # the list again.
            if not page.next:
                return
            token = page.next

    def get(self, name: str) -> Devbox:
        return self._box_from(*self._http.read(f"{API_PREFIX}/devboxes/{_name_or_error(name)}"))

    def start(self, name: str) -> Devbox:
        """Start a stopped box (renews its TTL); returns without waiting."""
        path = f"{API_PREFIX}/devboxes/{_name_or_error(name)}/start"
        return self._box(self._http.request("POST", path))

    def stop(self, name: str) -> Devbox:
        """Stop a box; its home volume is kept."""
        path = f"{API_PREFIX}/devboxes/{_name_or_error(name)}/stop"
        return self._box(self._http.request("POST", path))

    def delete(self, name: str, purge: bool = False) -> models.DeleteResult:
        """Delete a box. The home volume is kept unless ``purge`` is true."""
        response = self._http.request(
            "DELETE",
            f"{API_PREFIX}/devboxes/{_name_or_error(name)}",
            params={"purge": "true" if purge else "false"},
        )
        return parse(models.DeleteResult, decode(response), response.status_code)

    def extend(self, name: str, hours: int) -> Devbox:
        """Push a running box's auto-stop time back by ``hours`` (at most the server's
        maximum time to live from now); the box keeps running."""
        try:
            body = models.DevboxExtend(hours=hours)
        except PydanticValidationError as error:
            raise ValidationError.from_pydantic(error) from None
        path = f"{API_PREFIX}/devboxes/{_name_or_error(name)}/extend"
        return self._box(self._http.request("POST", path, body=body.model_dump()))

    def volumes(self) -> builtins.list[models.Volume]:
        """Home volumes kept after their box was deleted, oldest first."""
        response = self._http.request("GET", f"{API_PREFIX}/volumes")
        data = decode(response)
        return parse(models.VolumeList, data, response.status_code).items

    def purge_volume(self, name: str) -> models.DeleteResult:
        """Delete the retained home volume of the box ``name``, permanently."""
        response = self._http.request("DELETE", f"{API_PREFIX}/volumes/{_name_or_error(name)}")
        return parse(models.DeleteResult, decode(response), response.status_code)

    def usage(
        self,
        since: date | None = None,
        until: date | None = None,
        group_by: models.UsageGroupBy = "profile",
        everyone: bool = False,
    ) -> models.UsageReport:
        """GPU usage over the whole UTC days ``since`` to ``until`` (both included; by
        default the seven days up to the server's today), one line per person, group,
        profile or box (``group_by``). The caller's own boxes, or with ``everyone``
        everyone's (admins only: others get ``PermissionDenied``). The query is checked
        locally first; a broken rule raises ``ValidationError`` without a request."""
        params = usage_query(since, until, group_by, everyone)
        return self._http.get_model(f"{API_PREFIX}/usage", models.UsageReport, params)

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
        state, message or summary changes; with a callback, each server-side wait lasts at most
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
        seen: tuple[models.DevboxState, str | None, str | None] | None = None
        round_cap = MAX_WAIT_SECONDS if on_update is None else PROGRESS_SERVER_WAIT
        while True:
            remaining = deadline - time.monotonic()
            asked_server = server_wait and remaining >= 1
            round_started = time.monotonic()
            if asked_server:
                seconds = min(round_cap, math.floor(remaining))
                response = self._http.request(
                    "GET",
                    path,
                    params={"wait": "ready", "timeout": seconds},
                    timeout=(self.timeout, seconds + self.timeout),
                )
                server_wait = response.headers.get(WAIT_HEADER, "").strip().lower() == "ready"
                box = self._box(response)
            else:
                box = self._box_from(*self._http.read(path))
            # The summary moves on its own, e.g. a waiting box's place in line.
            current = (box.state, box.message, box.summary)
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
