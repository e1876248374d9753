"""The watch cache against the testbed's apiserver."""

from __future__ import annotations

from typing import Any

import pytest
from devboxes_controller.k8s.kube import apis
from devboxes_controller.state import cache, watches
from kubernetes import client


def test_the_first_list_is_read_page_by_page(
    kube: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = client.CoreV1Api(kube)
    names = [f"item-{i}" for i in range(5)]
    for name in names:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    monkeypatch.setattr(cache, "LIST_PAGE", 2)
    tokens: list[str | None] = []

    def list_config_maps(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            tokens.append(kwargs.get("_continue"))
        return apis(kube).core.list_namespaced_config_map(*args, **kwargs)

    informer = cache.Informer(
        "configmaps", list_config_maps, namespace, lambda _obj: None, lambda _box: None
    )
    informer.start()
    try:
        assert informer.synced.wait(120)
        assert set(names) <= informer.names()
        # Five objects and the namespace's own CA bundle, two a page.
        assert len(tokens) >= 3
        assert tokens[0] is None
        assert all(tokens[1:])
        # The watch resumes from the list's version: a later object arrives.
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "late"}})
        assert informer.wait_for(lambda: "late" in informer.names(), 120)
    finally:
        informer.stop()


def test_objects_keep_refuses_are_absent_and_leave_when_a_change_refuses_them(
    kube: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube)
    for name, kept in (("failing", "yes"), ("quiet", "no")):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "labels": {"kept": kept}}}
        )

    def keep(obj: Any) -> bool:
        return bool((obj["metadata"].get("labels") or {}).get("kept") == "yes")

    informer = cache.Informer(
        "configmaps",
        apis(kube).core.list_namespaced_config_map,
        namespace,
        lambda _obj: None,
        lambda _box: None,
        keep=keep,
    )
    informer.start()
    try:
        assert informer.synced.wait(120)
        assert informer.names() == {"failing"}
        core.patch_namespaced_config_map(
            "quiet", namespace, {"metadata": {"labels": {"kept": "yes"}}}
        )
        assert informer.wait_for(lambda: informer.names() == {"failing", "quiet"}, 120)
        core.patch_namespaced_config_map(
            "failing", namespace, {"metadata": {"labels": {"kept": "no"}}}
        )
        assert informer.wait_for(lambda: informer.names() == {"quiet"}, 120)
    finally:
        informer.stop()


def test_the_events_watch_holds_only_the_pod_creations_a_replicaset_was_refused(
    kube: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube)

    def event(name: str, kind: str, reason: str) -> None:
        involved = {"kind": kind, "name": f"devbox-{name}-5d8f", "namespace": namespace}
        core.create_namespaced_event(
            namespace,
            {
                "metadata": {"name": name},
                "involvedObject": involved,
                "reason": reason,
                "message": "exceeded quota",
                "type": "Warning",
            },
        )

    event("refused", "ReplicaSet", "FailedCreate")
    event("scheduled", "Pod", "Scheduled")
    event("deployment-refused", "Deployment", "FailedCreate")
    informer = watches.EVENTS.informer(apis(kube), namespace)
    informer.start()
    try:
        assert informer.synced.wait(120)
        assert informer.names() == {"refused"}
        # Through the watch too: an Event left out, then one kept after it.
        event("pulled", "Pod", "Pulled")
        event("refused-again", "ReplicaSet", "FailedCreate")
        assert informer.wait_for(lambda: "refused-again" in informer.names(), 120)
        assert informer.names() == {"refused", "refused-again"}
    finally:
        informer.stop()
