"""The calls of the Kubernetes API the controller makes, named and called as the generated
client names them, over its ``ApiClient`` (its configuration, credentials and TLS), without
its API classes.

An API class holds every endpoint of its group with a validated signature each:
``CoreV1Api`` is 4 MiB of source and holds about 22 MiB once imported, ``AppsV1Api`` 12 MiB
more, while the controller makes a few dozen calls and reads every answer as raw JSON. A
:class:`Methods` makes the same methods for the kinds the controller uses:
``create_namespaced_service(namespace, body)``, ``list_node(watch=True, ...)``,
``delete_namespaced_deployment(name, namespace, body=...)``, each answering with the
urllib3 response (what the generated ones answer with ``_preload_content=False``), and
raising the client's ``ApiException`` for an answer other than 2xx.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from kubernetes import client

Verb = Literal["list", "read", "create", "patch", "replace", "delete"]
VERBS: tuple[Verb, ...] = ("list", "read", "create", "patch", "replace", "delete")
HTTP_METHODS: dict[Verb, str] = {
    "list": "GET",
    "read": "GET",
    "create": "POST",
    "patch": "PATCH",
    "replace": "PUT",
    "delete": "DELETE",
}
# A patch that is a list of operations is a JSON patch; an object is merged as kubectl
# merges it, which for built-in kinds is the strategic merge.
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# Query parameters whose generated name is not the camel case of the API's.
QUERY_NAMES = {"_continue": "continue"}
_WORD_START = re.compile(r"_([a-z])")


Group = Literal["core", "apps", "node", "resource", "coordination", "storage", "authorization"]
# The API group versions the controller calls, by the name the generated client gives them.
GROUP_PATHS: dict[Group, str] = {
    "core": "/api/v1",
    "apps": "/apis/apps/v1",
    "node": "/apis/node.k8s.io/v1",
    "resource": "/apis/resource.k8s.io/v1",
    "coordination": "/apis/coordination.k8s.io/v1",
    "storage": "/apis/storage.k8s.io/v1",
    "authorization": "/apis/authorization.k8s.io/v1",
}


@dataclass(frozen=True)
class Resource:
    """A kind's collection: ``plural`` as RBAC and the URL name it, ``singular`` as the
    generated client names its methods (``config_map``), ``group`` the API group version
    that serves it."""

    plural: str
    singular: str
    group: Group
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        parts = [GROUP_PATHS[self.group]]
        if namespace is not None:
            parts += ["namespaces", quote(namespace, safe="")]
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
        return "/".join(parts)


def _query(arguments: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    for key, value in arguments.items():
        if value is None:
            continue
        name = QUERY_NAMES.get(key) or _WORD_START.sub(lambda m: m.group(1).upper(), key)
        pairs.append((name, str(value).lower() if isinstance(value, bool) else str(value)))
    return pairs


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    query: dict[str, Any] | None = None,
    *,
    _request_timeout: Any = None,
    _content_type: str | None = None,
) -> Any:
    """One call: the urllib3 response of a 2xx answer, else ``ApiException``. The body of
    the response is read by the caller (``.data``, or ``.stream()`` for a watch)."""
    content_type = _content_type
    if content_type is None and body is not None:
        if method != "PATCH":
            content_type = "application/json"
        else:
            content_type = JSON_PATCH if isinstance(body, list) else STRATEGIC_MERGE_PATCH
    headers = {"Accept": "application/json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    http_method, url, headers, data, _ = api.param_serialize(
        method,
        path,
        query_params=_query(query or {}),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(http_method, url, headers, data, _request_timeout=_request_timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise client.ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response


def _method(
    api: client.ApiClient, resource: Resource, verb: Verb, name: str, namespaced: bool
) -> Callable[..., Any]:
    """The generated client's method ``name``: positional arguments as it takes them (the
    object's name, the namespace, the body), options that start with ``_`` (but
    ``_continue``), and the query's parameters by their generated names."""
    takes = [] if verb in ("list", "create") else ["name"]
    takes += ["namespace"] if namespaced else []
    takes += ["body"] if verb in ("create", "patch", "replace", "delete") else []

    def method(*args: Any, **arguments: Any) -> Any:
        if len(args) > len(takes):
            raise TypeError(f"{name}() takes {len(takes)} positional arguments")
        given = dict(zip(takes, args, strict=False))
        given.update({key: arguments.pop(key) for key in takes if key in arguments})
        options = {
            key: arguments.pop(key)
            for key in list(arguments)
            if key.startswith("_") and key not in QUERY_NAMES
        }
        path = resource.path(given.get("namespace"), given.get("name"))
        return request(api, HTTP_METHODS[verb], path, given.get("body"), arguments, **options)

    method.__name__ = method.__qualname__ = name
    return method


def method_name(resource: Resource, verb: Verb, all_namespaces: bool = False) -> str:
    """The generated client's name of ``verb`` on ``resource``: of one namespace, or, for a
    list of a namespaced kind, of every namespace; a cluster kind has only the one."""
    if not resource.namespaced:
        return f"{verb}_{resource.singular}"
    if all_namespaces:
        return f"{verb}_{resource.singular}_for_all_namespaces"
    return f"{verb}_namespaced_{resource.singular}"


def _methods(api: client.ApiClient, resource: Resource) -> Iterable[tuple[str, Callable[..., Any]]]:
    """The generated client's methods of ``resource``, by their names."""
    for verb in VERBS:
        name = method_name(resource, verb)
        yield name, _method(api, resource, verb, name, resource.namespaced)
    if resource.namespaced:
        name = method_name(resource, "list", all_namespaces=True)
        yield name, _method(api, resource, "list", name, namespaced=False)


class Methods:
    """The generated client's methods of the ``resources`` of one API group version."""

    def __init__(self, api: client.ApiClient, resources: Iterable[Resource]) -> None:
        self._methods = dict(method for resource in resources for method in _methods(api, resource))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            return self.__dict__["_methods"][name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(name) from None
