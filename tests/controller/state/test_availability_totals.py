"""The running totals behind GPU availability, fed by the watch caches and checked by the
recount, with the apiserver's list and watch answers played from memory."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.placement import capacity
from devboxes_controller.state import availability, cache, slim, watches
from devboxes_controller.state.line import DeviceLine
from devboxes_controller.state.metrics import METRICS
from kubernetes import client

GPU = "nvidia.com/gpu"


class Response:
    """A list answer (``data``) or a watch answer (``stream``), as the client returns them
    with ``_preload_content=False``."""

    def __init__(self, body: Any = None, events: list[Any] | None = None) -> None:
        self.data = json.dumps(body).encode()
        self._lines = b"".join(json.dumps(e).encode() + b"\n" for e in events or [])

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield self._lines

    def release_conn(self) -> None:
        return None


class Apiserver:
    """One kind's objects: ``items`` for the next list, ``events`` for the next watch."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.events: list[Any] = []
        self.version = 1

    def __call__(self, **kwargs: Any) -> Response:
        if kwargs.get("watch"):
            events, self.events = self.events, []
            return Response(events=events)
        return Response({"metadata": {"resourceVersion": str(self.version)}, "items": self.items})


def pod(name: str, node: str | None, gpus: str = "1", phase: str = "Running", rv: int = 1) -> Any:
    return {
        "metadata": {
            "name": name,
            "namespace": "other",
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {GPU: gpus}}}],
        },
        "status": {"phase": phase},
    }


def node(name: str, gpus: str = "2") -> Any:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {"accelerator": "nvidia-l4"},
        },
        "spec": {"taints": [{"key": GPU, "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: gpus},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def event(kind: str, obj: Any) -> Any:
    return {"type": kind, "object": obj}


def test_the_cache_reports_each_change_with_the_object_before_and_after() -> None:
    server = Apiserver()
    changes: list[tuple[str | None, str | None]] = []

    def seen(old: Any, new: Any) -> None:
        version = [o and o["metadata"]["resourceVersion"] for o in (old, new)]
        changes.append((version[0], version[1]))

    informer = cache.Informer("pods", server, None, strip=slim.cluster_pod, on_object=seen)
    server.items = [pod("a", "n"), pod("b", "n")]
    informer._relist()
    assert changes == [(None, "1"), (None, "1")]

    changes.clear()
    server.events = [
        event("MODIFIED", pod("a", "n", phase="Succeeded", rv=2)),
        event("DELETED", pod("b", "n", rv=3)),
        event("ADDED", pod("c", "n", rv=4)),
    ]
    informer._watch("1")
    assert changes == [("1", "2"), ("1", None), (None, "4")]

    # A relist after a lost watch: the unchanged object is not handed over again, the
    # vanished one is removed, the new one added.
    changes.clear()
    server.items = [pod("a", "n", phase="Succeeded", rv=2), pod("d", "n", rv=5)]
    informer._relist()
    assert sorted(changes, key=str) == sorted([("4", None), (None, "5")], key=str)


def settings() -> Settings:
    return settings_from_mapping(
        {
            "namespace": "devboxes",
            "gpu": {
                "enabled": True,
                "defaultProfile": "nvidia-l4",
                "profiles": [
                    {
                        "name": "nvidia-l4",
                        "displayName": "NVIDIA L4",
                        "resourceName": GPU,
                        "count": 1,
                        "nodeSelector": {"accelerator": "nvidia-l4"},
                        "tolerations": [{"key": GPU, "operator": "Exists"}],
                    }
                ],
            },
        }
    )


@pytest.fixture
def served() -> tuple[availability.Availability, Apiserver, Apiserver]:
    """Availability over played nodes and pods; its threads are never started."""
    shared = watches.Watches(settings(), client.ApiClient())
    counts = availability.Availability(settings(), shared, DeviceLine())
    nodes, pods = Apiserver(), Apiserver()
    shared[watches.NODES]._list = nodes
    shared[watches.CLUSTER_PODS]._list = pods
    return counts, nodes, pods


def free(counts: availability.Availability) -> tuple[int | None, int | None]:
    counts.refresh()
    entry = counts.profile("nvidia-l4")
    assert entry is not None
    return entry.available, entry.capacity


def disagreements(table: str) -> float:
    value = METRICS.registry.get_sample_value(
        "devboxes_availability_recount_disagreements_total", {"table": table}
    )
    return value or 0.0


def test_watch_events_and_relists_keep_the_served_counts_and_the_recount_equal(
    served: tuple[availability.Availability, Apiserver, Apiserver],
) -> None:
    counts, nodes, pods = served
    nodes.items = [node("l4-0"), node("l4-1")]
    pods.items = [pod("a", "l4-0"), pod("pending", None)]
    counts._nodes._relist()
    counts._pods._relist()
    assert free(counts) == (3, 4)

    pods.events = [
        event("MODIFIED", pod("pending", "l4-1", rv=2)),
        event("ADDED", pod("done", "l4-1", phase="Succeeded", rv=3)),
        event("MODIFIED", pod("a", "l4-0", phase="Failed", rv=4)),
    ]
    counts._pods._watch("1")
    assert free(counts) == (3, 4)
    nodes.events = [
        event(
            "MODIFIED",
            {
                **node("l4-1", gpus="1"),
                "metadata": {**node("l4-1")["metadata"], "resourceVersion": "2"},
            },
        )
    ]
    counts._nodes._watch("1")
    assert free(counts) == (2, 3)

    # A relist that reads back every pod the watch already delivered, and one more.
    pods.items = [
        pod("pending", "l4-1", rv=2),
        pod("done", "l4-1", phase="Succeeded", rv=3),
        pod("a", "l4-0", phase="Failed", rv=4),
        pod("new", "l4-0", rv=5),
    ]
    for _ in range(2):
        counts._pods._relist()
    assert free(counts) == (1, 3)
    before = disagreements("used")
    assert counts.recount() == []
    assert disagreements("used") == before


def test_a_recount_that_disagrees_is_logged_counted_and_adopted(
    served: tuple[availability.Availability, Apiserver, Apiserver],
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts, nodes, pods = served
    nodes.items = [node("l4-0")]
    pods.items = [pod("a", "l4-0")]
    counts._nodes._relist()
    counts._pods._relist()
    assert free(counts) == (1, 2)

    # A change the totals heard of but the cache does not hold.
    counts._totals.put_pod(capacity.strip_pod(pod("ghost", "l4-0")))
    assert free(counts) == (0, 2)
    before = disagreements("used")
    with caplog.at_level(logging.WARNING):
        found = counts.recount()
    assert [(d.node, d.resource, d.kept, d.counted) for d in found] == [
        ("l4-0", GPU, 2, 1),
        ("l4-0", "pods", 2, 1),
    ]
    assert disagreements("used") == before + 2
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.node, r.resource, r.kept, r.counted) for r in warned] == [  # type: ignore[attr-defined]
        ("l4-0", GPU, "2", "1"),
        ("l4-0", "pods", "2", "1"),
    ]
    assert free(counts) == (1, 2)
    assert counts.recount() == []


def test_pods_that_are_not_boxes_taking_over_a_device_are_a_change_and_are_named(
    served: tuple[availability.Availability, Apiserver, Apiserver],
) -> None:
    counts, nodes, pods = served
    box = pod("box", "l4-0")
    box["metadata"]["labels"] = {"devboxes.io/box": "box"}
    nodes.items = [node("l4-0")]
    pods.items = [box, pod("train", "l4-0")]
    counts._nodes._relist()
    counts._pods._relist()
    assert counts.refresh()
    assert free(counts) == (0, 2)
    profile = settings().gpu.profile("nvidia-l4")
    assert profile is not None
    held = counts.holding(GPU)
    assert [p["metadata"]["name"] for p in held] == ["train"]
    assert counts.on_nodes_of(profile, held) == ["other/train"]
    # The box gives its device back as another pod takes it: the counts stay, the holders
    # change, and waiting boxes are told.
    pods.items = [pod("train", "l4-0"), pod("eval", "l4-0")]
    counts._pods._relist()
    assert counts.refresh()
    assert free(counts) == (0, 2)
    assert counts.on_nodes_of(profile, counts.holding(GPU)) == ["other/eval", "other/train"]
    assert not counts.refresh()
