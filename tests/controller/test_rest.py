"""The controller's calls of the Kubernetes API, made without the generated API classes:
every method a module calls exists with the generated client's name and arguments, and
becomes the URL and query the API documents. The calls themselves run against the real
apiserver in every testbed test."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from devboxes_controller.k8s import kinds, kube, rest
from kubernetes import client

CONTROLLER = Path(kube.__file__).resolve().parents[1]
# ``self._core.create_namespaced_service``, ``kube.apis(api).storage.list_storage_class``
CALLED = re.compile(
    r"(?:self\._(core|apps|resource|leases)|apis\(api\)\.(\w+))\.((?:list|read|create|patch|replace|delete)_\w+)"
)
GROUP_OF_ATTRIBUTE = {"leases": "coordination"}


def test_every_method_a_module_calls_exists() -> None:
    apis = kube.Apis(client.ApiClient())
    called = set()
    for source in CONTROLLER.rglob("*.py"):
        for attribute, group, method in CALLED.findall(source.read_text()):
            name = group or GROUP_OF_ATTRIBUTE.get(attribute, attribute)
            called.add((name, method))
    assert len(called) > 30
    missing = [f"{g}.{m}" for g, m in sorted(called) if not hasattr(getattr(apis, g), m)]
    assert missing == []


def test_one_client_shares_one_set_of_methods() -> None:
    api = client.ApiClient()
    assert kube.apis(api) is kube.apis(api)
    assert kube.apis(client.ApiClient()) is not kube.apis(api)


def test_the_generated_api_classes_are_never_loaded() -> None:
    kube.Apis(client.ApiClient())
    assert [name for name in sys.modules if name.startswith("kubernetes.client.api.")] == []


def test_paths_name_the_group_namespace_and_object() -> None:
    assert (
        kinds.DEPLOYMENTS.path("boxes", "devbox-a")
        == "/apis/apps/v1/namespaces/boxes/deployments/devbox-a"
    )
    assert kinds.PODS.path("boxes") == "/api/v1/namespaces/boxes/pods"
    assert kinds.PODS.path() == "/api/v1/pods"
    assert kinds.NODES.path(name="gpu-1") == "/api/v1/nodes/gpu-1"
    assert kinds.LEASES.path("ns", "x") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/x"
    # A name is one path segment, whatever it holds.
    assert kinds.SECRETS.path("boxes", "a/b") == "/api/v1/namespaces/boxes/secrets/a%2Fb"


def test_query_parameters_take_the_apis_names() -> None:
    assert rest._query(
        {
            "label_selector": "a=b",
            "allow_watch_bookmarks": True,
            "watch": False,
            "_continue": "token",
            "timeout_seconds": 30,
            "dry_run": "All",
            "field_selector": None,
        }
    ) == [
        ("labelSelector", "a=b"),
        ("allowWatchBookmarks", "true"),
        ("watch", "false"),
        ("continue", "token"),
        ("timeoutSeconds", "30"),
        ("dryRun", "All"),
    ]


def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What :func:`rest.request` is asked for, instead of sending it."""
    calls: list[dict[str, Any]] = []

    def record(
        api: Any, method: str, path: str, body: Any = None, query: Any = None, **options: Any
    ) -> None:
        calls.append({"method": method, "path": path, "body": body, "query": query, **options})

    monkeypatch.setattr(rest, "request", record)
    return calls


def test_methods_take_the_generated_clients_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = sent(monkeypatch)
    apis = kube.Apis(client.ApiClient())
    apis.apps.patch_namespaced_deployment(
        "devbox-a", "boxes", {"spec": {}}, _request_timeout=(2, 5)
    )
    apis.core.delete_namespaced_service("devbox-a-ssh", "boxes", body=kube.in_background("u1"))
    apis.core.list_namespaced_pod(namespace="boxes", label_selector="x", watch=True)
    apis.resource.list_resource_slice()
    apis.authorization.create_self_subject_access_review({"spec": {}})
    apis.core.list_pod_for_all_namespaces(_continue="t")
    assert calls == [
        {
            "method": "PATCH",
            "path": "/apis/apps/v1/namespaces/boxes/deployments/devbox-a",
            "body": {"spec": {}},
            "query": {},
            "_request_timeout": (2, 5),
        },
        {
            "method": "DELETE",
            "path": "/api/v1/namespaces/boxes/services/devbox-a-ssh",
            "body": {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "propagationPolicy": "Background",
                "preconditions": {"uid": "u1"},
            },
            "query": {},
        },
        {
            "method": "GET",
            "path": "/api/v1/namespaces/boxes/pods",
            "body": None,
            "query": {"label_selector": "x", "watch": True},
        },
        {
            "method": "GET",
            "path": "/apis/resource.k8s.io/v1/resourceslices",
            "body": None,
            "query": {},
        },
        {
            "method": "POST",
            "path": "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            "body": {"spec": {}},
            "query": {},
        },
        {"method": "GET", "path": "/api/v1/pods", "body": None, "query": {"_continue": "t"}},
    ]
    with pytest.raises(TypeError, match="takes 2 positional arguments"):
        apis.core.create_namespaced_secret("boxes", {}, "extra")
    with pytest.raises(AttributeError):
        _ = apis.core.create_namespaced_deployment
