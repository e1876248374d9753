"""The edge to Kubernetes: one API client, raw JSON calls, and error translation.

Every apiserver failure becomes an :class:`ApiProblem` with the HTTP status our API
should answer and the apiserver's own message, so nothing surfaces as a bare 500. The
rest of the controller reaches the generated client only through here: :class:`Apis`
for its API groups, :func:`call` for a request, and :func:`write` for a change of a box's
objects or a person's keys, which ``devboxes_kubernetes_writes_total`` counts.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, TypeVar

import urllib3
from kubernetes import client, config
from prometheus_client import Counter

from devboxes_sdk.models import FieldError

from . import rest
from .kinds import KINDS
from .write_health import WRITES

T = TypeVar("T")
Obj = dict[str, Any]

# Every call is bounded: a frozen apiserver or a dead etcd must cost a request seconds,
# not minutes, and must never pin a worker thread for good.
CONNECT_SECONDS = 2.0
READ_SECONDS = 5.0
RETRY_AFTER_SECONDS = 5
# The generated client's methods that change objects, by the first word of their name.
WRITE_VERBS = frozenset({"create", "patch", "replace", "delete"})

# What :func:`write` sent, by verb; served with the controller's other metrics.
WRITTEN = Counter(
    "devboxes_kubernetes_writes_total",
    "Writes the controller sent to the apiserver",
    ["verb"],
    registry=None,
)

# The connection the API groups share, for the signatures of the modules that take one.
ApiClient: TypeAlias = client.ApiClient


class ApiProblem(Exception):
    """A failure our API reports as ``{"detail": message}`` with ``status``."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail}


class NotFound(ApiProblem):
    def __init__(self, detail: str) -> None:
        super().__init__(404, detail)


class Conflict(ApiProblem):
    def __init__(self, detail: str, retry_after: int | None = None) -> None:
        headers = {"Retry-After": str(retry_after)} if retry_after else None
        super().__init__(409, detail, headers)


class Invalid(ApiProblem):
    """A request broke a rule: 422 whose detail lists the field errors."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__(422, "; ".join(error.msg for error in errors))
        self.errors = list(errors)

    def body(self) -> dict[str, Any]:
        return {"detail": [error.model_dump(mode="json") for error in self.errors]}


def rule_broken(loc: Sequence[str | int], msg: str, kind: str = "value_error") -> Invalid:
    """The 422 for one of the controller's own rules, located like pydantic's errors."""
    return Invalid([FieldError(type=kind, loc=list(loc), msg=msg)])


class Unavailable(ApiProblem):
    """The apiserver cannot be reached or is overloaded: the client should retry shortly."""

    def __init__(self, detail: str) -> None:
        super().__init__(503, detail, {"Retry-After": str(RETRY_AFTER_SECONDS)})


class Apis:
    """The API groups the controller calls, over one client: each the generated client's
    methods of the kinds in ``kinds.KINDS`` that it serves."""

    def __init__(self, api: ApiClient) -> None:
        def group(name: rest.Group) -> rest.Methods:
            return rest.Methods(api, (kind for kind in KINDS if kind.group == name))

        self.core = group("core")
        self.apps = group("apps")
        self.node = group("node")
        self.resource = group("resource")
        self.coordination = group("coordination")
        self.storage = group("storage")
        self.authorization = group("authorization")


_APIS: weakref.WeakKeyDictionary[ApiClient, Apis] = weakref.WeakKeyDictionary()
_APIS_LOCK = threading.Lock()


def apis(api: ApiClient) -> Apis:
    """The one :class:`Apis` over ``api``, made on its first use, so every module calling
    through one client shares its methods."""
    with _APIS_LOCK:
        found = _APIS.get(api)
        if found is None:
            found = _APIS[api] = Apis(api)
        return found


def api_client(kubeconfig: str | None) -> client.ApiClient:
    """A client from an explicit kubeconfig, else in-cluster credentials, else ~/.kube/config."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    configuration.retries = 0
    return client.ApiClient(configuration)


def _apiserver_message(err: client.ApiException) -> str:
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return str(body.get("message") or err.reason or "Kubernetes API error")


def translate(err: Exception) -> ApiProblem:
    """The API outcome for a Kubernetes client failure."""
    if isinstance(err, client.ApiException):
        message = _apiserver_message(err)
        if err.status == 404:
            return NotFound(message)
        if err.status == 409:
            return Conflict(message)
        if err.status == 403:
            return ApiProblem(403, f"Kubernetes refused the request: {message}")
        if err.status in (400, 422):
            return ApiProblem(422, f"Kubernetes rejected the object: {message}")
        if err.status == 429 or (err.status or 0) >= 500:
            return Unavailable(f"Kubernetes API unavailable: {message}")
        return ApiProblem(502, f"Kubernetes API error {err.status}: {message}")
    if isinstance(err, urllib3.exceptions.HTTPError | OSError):
        return Unavailable("Kubernetes API unreachable")
    raise err


def call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """Call a generated client method and return the raw JSON body, translating failures.
    Writes report their outcome to ``write_health.WRITES``."""
    kwargs.setdefault("_request_timeout", (CONNECT_SECONDS, READ_SECONDS))
    changes = function.__name__.partition("_")[0] in WRITE_VERBS
    try:
        response = function(*args, **kwargs)
    except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
        problem = translate(err)
        if changes and isinstance(problem, Unavailable):
            WRITES.failed(problem.detail)
        raise problem from None
    if changes:
        WRITES.succeeded()
    data = response.data
    return dict(json.loads(data)) if data else {}


def write(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """:func:`call` for a method that changes an object, counted in ``WRITTEN`` by its
    verb once the apiserver took it."""
    verb = function.__name__.partition("_")[0]
    if verb not in WRITE_VERBS:
        raise ValueError(f"{function.__name__} does not write")
    written = call(function, *args, **kwargs)
    WRITTEN.labels(verb).inc()
    return written


def in_background(uid: str | None = None) -> Obj:
    """How a delete goes: its dependents in the background; with ``uid``, only the object
    of that uid, never one that replaced it meanwhile."""
    options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    if uid is not None:
        options["preconditions"] = {"uid": uid}
    return options


def status_of(err: BaseException) -> int | None:
    """The HTTP status of an apiserver's answer raised by the client; None for any other
    failure (a dropped connection, a timeout)."""
    if isinstance(err, client.ApiException):
        return int(err.status) if err.status is not None else None
    return None


def describe(err: BaseException) -> str:
    """A failure in one line for a log: the apiserver's status and reason, or the error."""
    if isinstance(err, client.ApiException):
        return f"HTTP {err.status}: {err.reason}"
    return f"{type(err).__name__}: {err}"


def resource_version(obj: Obj) -> int:
    """The object's resourceVersion as a number, for 'has the cache seen this write' checks."""
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0
