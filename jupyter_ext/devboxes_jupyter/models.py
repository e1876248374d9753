"""What the server extension accepts from the browser and what it answers.

Bodies are the wire models of :mod:`devboxes_sdk.models`; this module only adds the
query parameters of the extension's own routes, the view the watch route answers (whose
OpenAPI document, :func:`watch_contract`, the sidebar's TypeScript types are generated
from) and the mapping of SDK errors to the ``{"detail": ...}`` error body the API uses
everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from pydantic.json_schema import models_json_schema

from devboxes_sdk import models
from devboxes_sdk.clusters import Answers, NoClusterAnswered
from devboxes_sdk.config import AUTO_CLUSTER
from devboxes_sdk.errors import (
    ApiError,
    ConfigurationError,
    DevboxesError,
    NotADevboxesServer,
    ValidationError,
)
from devboxes_sdk.placement import NoPlacement

# One server-side wait holds a worker thread; the browser asks again after each answer,
# so a short bound keeps threads free without costing the user anything.
MAX_WAIT_SECONDS = 120
DEFAULT_WAIT_SECONDS = 30


_Body = TypeVar("_Body", models.DevboxCreate, models.DevboxExtend)


class RequestRejected(Exception):
    """The browser's request broke a rule before any call to the controller."""

    def __init__(self, status: int, detail: str | list[models.FieldError]) -> None:
        super().__init__(status, detail)
        self.status = status
        self.detail = detail

    def body(self) -> dict[str, Any]:
        return {"detail": _detail_json(self.detail)}


class WaitQuery(BaseModel):
    """``?wait=ready&timeout=S`` on the get route, passed through to the controller."""

    model_config = ConfigDict(extra="forbid")

    wait: Literal["ready"]
    timeout: Annotated[int, Field(ge=1, le=MAX_WAIT_SECONDS)] = DEFAULT_WAIT_SECONDS


# A held watch keeps no thread busy (it waits on the event loop), but proxies in front
# of Jupyter commonly cut idle requests at 60 s.
MAX_WATCH_SECONDS = 30


class WatchQuery(BaseModel):
    """``?after=V&timeout=S`` on the watch route: answer once the view is newer than V."""

    after: Annotated[int, Field(ge=-1)] = -1
    timeout: Annotated[int, Field(ge=0, le=MAX_WATCH_SECONDS)] = 25


class KernelProgress(BaseModel):
    """What one devbox kernel start is doing (see :mod:`devboxes_jupyter.progress`)."""

    model_config = ConfigDict(frozen=True)

    kernel_id: str
    box: str
    profile: str
    phase: str
    message: str
    # Seconds since the epoch.
    updated: float
    # How long the current message has held and since the start began, as of the
    # answer that carries them (the sidebar counts on from there).
    step_seconds: float = 0.0
    total_seconds: float = 0.0


class ClusterView(BaseModel):
    """One cluster of a server that serves several: its boxes, free counts and catalog as
    last seen, and why it did not answer the latest listing, if it did not."""

    name: str
    # The cluster a request that names none goes to.
    default: bool = False
    # None until the cluster first answered; the last good listing stays while ``error``
    # is set.
    items: list[models.Devbox] | None = None
    observed_at: AwareDatetime | None = None
    # E.g. "did not answer in 3 s".
    error: str | None = None
    availability: models.GpuAvailability | None = None
    when: models.GpuWhen | None = None
    # The cluster's GPU catalog and image profiles, for the create form.
    capabilities: models.Capabilities | None = None
    dashboard_url: str | None = None


class CreatedBox(BaseModel):
    """A box created on a cluster the request named, or where ``auto`` placed it, and why
    there (as the SDK's ``Clusters.create`` says it)."""

    cluster: str
    reason: str
    box: models.Devbox


class WatchView(BaseModel):
    """The answer of the watch route: the boxes, availability and kernel starts as the
    server extension last saw them, numbered by ``version``.

    A server that serves the several clusters of the SDK configuration file also answers
    ``clusters``, one entry per cluster in the file's order; the other fields then are
    the default cluster's."""

    version: int
    # None until the first listing; the last good listing stays while ``error`` is set.
    items: list[models.Devbox] | None
    observed_at: AwareDatetime | None
    error: str | None
    # None when the controller does not count free devices.
    availability: models.GpuAvailability | None
    # When a new box of each profile would get a device; None from older controllers.
    when: models.GpuWhen | None = None
    # Where the browser opens a box's web previews: the controller's dashboard.
    dashboard_url: str | None = None
    kernels: list[KernelProgress]
    poll_interval: float
    # None on a server of one controller.
    clusters: list[ClusterView] | None = None
    # Configured names answered under another's: one cluster reached through two URLs.
    notes: list[str] = Field(default_factory=list)


WATCH_PATH = "/devboxes/api/watch"


def watch_contract() -> dict[str, Any]:
    """The OpenAPI document of the watch route, the source of the sidebar's generated
    ``watch-openapi.ts`` (``make openapi`` writes both)."""
    _, schemas = models_json_schema(
        [(WatchView, "serialization"), (CreatedBox, "serialization")],
        ref_template="#/components/schemas/{model}",
    )
    query = WatchQuery.model_json_schema()["properties"]
    return {
        "openapi": "3.1.0",
        "info": {"title": "Devboxes Jupyter server extension", "version": "1"},
        "paths": {
            WATCH_PATH: {
                "get": {
                    "summary": "The view once it is newer than `after`, or after `timeout` s",
                    "parameters": [
                        {"name": name, "in": "query", "required": False, "schema": schema}
                        for name, schema in query.items()
                    ],
                    "responses": {
                        "200": {
                            "description": "The view",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/WatchView"}
                                }
                            },
                        }
                    },
                }
            }
        },
        "components": {"schemas": schemas["$defs"]},
    }


def parse_watch(query: Mapping[str, Sequence[bytes]]) -> WatchQuery:
    # Other parameters are ignored: JupyterLab adds a cache-busting one to every GET.
    raw = {key: _single(query, key) for key in ("after", "timeout") if key in query}
    try:
        return WatchQuery.model_validate(raw)
    except PydanticValidationError as error:
        raise RequestRejected(422, models.field_errors(error.errors(), "query")) from None


# ``?cluster=*``: every cluster at once; never a cluster's name (names are DNS labels).
ALL_CLUSTERS = "*"


def parse_cluster(
    query: Mapping[str, Sequence[bytes]],
    names: Sequence[str] | None,
    *,
    every: bool = False,
    auto: bool = False,
) -> str | None:
    """The cluster a request names with ``?cluster=``, or None for the default one.

    ``names`` are the configured clusters, None on a server of one controller (which
    takes no ``cluster``). ``every`` allows ``*`` (each cluster's answer at once), ``auto``
    allows ``auto`` (a create placed where its GPU profile has a free device)."""
    if "cluster" not in query:
        return None
    value = _single(query, "cluster").strip()

    def refuse(message: str) -> RequestRejected:
        return RequestRejected(422, [models.FieldError(loc=["query", "cluster"], msg=message)])

    if names is None:
        raise refuse("this Jupyter server serves one controller: leave out cluster")
    if value == ALL_CLUSTERS:
        if every:
            return value
        raise refuse(f"'{ALL_CLUSTERS}' (every cluster) is for reading; name one cluster")
    if value == AUTO_CLUSTER:
        if auto:
            return value
        raise refuse(f"'{AUTO_CLUSTER}' goes with a create; name one cluster")
    if value not in names:
        raise refuse(f"no cluster {value!r} (configured: {', '.join(names)})")
    return value


def parse_preset(query: Mapping[str, Sequence[bytes]]) -> models.Preset | None:
    """``?preset=`` on the availability route: count only where its CPU and memory fit."""
    if "preset" not in query:
        return None
    value = _single(query, "preset")
    for preset in models.PRESETS:
        if preset == value:
            return preset
    message = f"must be one of {', '.join(models.PRESETS)}"
    raise RequestRejected(422, [models.FieldError(loc=["query", "preset"], msg=message)])


def answers_json(answers: Answers[Any]) -> dict[str, Any]:
    """Every cluster's answer of a ``?cluster=*`` read: ``answers`` (each cluster's body,
    as the route answers it for that cluster alone), ``errors`` (why a cluster gave none,
    e.g. ``did not answer in 3 s``) and ``notes``, as the SDK's ``Answers``."""
    return {
        "answers": [{"cluster": a.cluster, "value": a.value} for a in answers.answers],
        "errors": [{"cluster": e.cluster, "message": e.message} for e in answers.errors],
        "notes": list(answers.notes),
    }


def _detail_json(detail: str | Sequence[models.FieldError]) -> str | list[dict[str, Any]]:
    if isinstance(detail, str):
        return detail
    return [error.model_dump(mode="json") for error in detail]


def _single(query: Mapping[str, Sequence[bytes]], key: str) -> str:
    values = query[key]
    if len(values) != 1:
        message = f"give '{key}' once, not {len(values)} times"
        raise RequestRejected(422, [models.FieldError(loc=["query", key], msg=message)])
    try:
        return values[0].decode("utf-8")
    except UnicodeDecodeError:
        raise RequestRejected(
            422, [models.FieldError(loc=["query", key], msg="must be UTF-8 text")]
        ) from None


def parse_wait(query: Mapping[str, Sequence[bytes]]) -> WaitQuery | None:
    """The server-side wait the browser asked for, or None for a plain read."""
    if "wait" not in query and "timeout" not in query:
        return None
    raw = {key: _single(query, key) for key in ("wait", "timeout") if key in query}
    try:
        return WaitQuery.model_validate(raw)
    except PydanticValidationError as error:
        raise RequestRejected(422, models.field_errors(error.errors(), "query")) from None


def parse_name(value: str) -> str:
    """A box name from the URL path, normalized like every Devboxes client does."""
    try:
        return models.normalize_name(value)
    except ValueError as error:
        raise RequestRejected(
            422, [models.FieldError(loc=["path", "name"], msg=str(error))]
        ) from None


def devbox_json(data: object) -> dict[str, Any]:
    """A controller's box body, checked against the wire model and re-serialized."""
    try:
        return models.Devbox.model_validate(data).model_dump(mode="json")
    except PydanticValidationError:
        raise ApiError(502, "the controller's answer does not match the Devboxes API") from None


def parse_purge(query: Mapping[str, Sequence[bytes]]) -> bool:
    """``?purge=true|false`` on delete; anything else is refused rather than guessed."""
    if "purge" not in query:
        return False
    value = _single(query, "purge").strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise RequestRejected(
        422, [models.FieldError(loc=["query", "purge"], msg="must be 'true' or 'false'")]
    )


def _parse_body(body: bytes, model: type[_Body]) -> _Body:
    """A request body, checked with its wire model before it reaches the controller."""
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise RequestRejected(422, "the request body must be a JSON object") from None
    if not isinstance(data, dict):
        raise RequestRejected(422, "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except PydanticValidationError as error:
        raise RequestRejected(422, models.field_errors(error.errors(), "body")) from None


def parse_create(body: bytes) -> models.DevboxCreate:
    return _parse_body(body, models.DevboxCreate)


def parse_extend(body: bytes) -> models.DevboxExtend:
    return _parse_body(body, models.DevboxExtend)


def error_body(error: DevboxesError) -> tuple[int, dict[str, Any]]:
    """The status and ``{"detail": ...}`` body the browser gets for an SDK error.

    The controller's status passes through unchanged; the detail never contains the
    token (the SDK never puts it in an error).
    """
    if isinstance(error, ValidationError):
        return 422, {"detail": _detail_json(error.errors)}
    if isinstance(error, NoClusterAnswered):
        return 503, {"detail": str(error)}
    if isinstance(error, NoPlacement):
        # A create with cluster=auto that no cluster which answered can take.
        return 422, {"detail": str(error)}
    if isinstance(error, NotADevboxesServer):
        # Its status (a page's 200, a redirect) is another server's, not an answer to pass on.
        return 502, {"detail": f"the Devboxes URL of this Jupyter server is wrong: {error}"}
    if isinstance(error, ApiError):
        if error.status == 401:
            return 401, {
                "detail": "the Devboxes controller refused the token configured for this "
                f"Jupyter server: {error.detail}"
            }
        # No HTTP answer at all (connection refused, time-out): the controller is unavailable.
        return error.status or 503, {"detail": error.detail}
    if isinstance(error, ConfigurationError):
        return 503, {"detail": f"Devboxes is not configured on this Jupyter server: {error}"}
    return 502, {"detail": str(error)}
