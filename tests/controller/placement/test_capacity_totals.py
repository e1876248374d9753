"""The running totals availability is computed from, as pure functions of plain objects:
each object's contribution, the totals kept through watch events, and the recount they
must always equal."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from devboxes_controller.config.gpu import GpuProfileConfig
from devboxes_controller.config.settings import Settings
from devboxes_controller.placement import capacity

NOW = datetime(2030, 1, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"
TOLERATE_GPU = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]


def node(
    name: str,
    gpus: str = "4",
    uid: str | None = None,
    ready: bool = True,
    cordoned: bool = False,
    labels: dict[str, str] | None = None,
    tainted: bool = True,
) -> dict[str, Any]:
    return capacity.strip_node(
        {
            "metadata": {
                "name": name,
                "uid": uid or f"uid-{name}",
                "resourceVersion": "1",
                "labels": {"accelerator": "nvidia-l4"} if labels is None else labels,
            },
            "spec": {
                "unschedulable": cordoned,
                "taints": [{"key": GPU, "effect": "NoSchedule"}] if tainted else [],
            },
            "status": {
                "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: gpus},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def pod(
    name: str,
    node_name: str | None,
    requests: dict[str, str],
    phase: str = "Running",
    uid: str | None = None,
) -> dict[str, Any]:
    return capacity.strip_pod(
        {
            "metadata": {
                "name": name,
                "namespace": "other",
                "uid": uid or f"uid-{name}",
                "resourceVersion": "1",
            },
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "resources": {"requests": requests}}],
            },
            "status": {"phase": phase},
        }
    )


def l4(count: int) -> GpuProfileConfig:
    return GpuProfileConfig.model_validate(
        {
            "name": f"nvidia-l4-{count}",
            "displayName": "NVIDIA L4",
            "resourceName": GPU,
            "count": count,
            "nodeSelector": {"accelerator": "nvidia-l4"},
            "tolerations": TOLERATE_GPU,
        }
    )


def agrees(totals: capacity.Totals, nodes: list[Any], pods: list[Any]) -> list[Any]:
    return capacity.disagreements(totals.figures(), capacity.count(nodes, pods))


def test_a_pod_takes_from_its_node_only_while_bound_and_not_finished() -> None:
    assert capacity.pod_contribution(pod("p", None, {GPU: "1"})) is None
    assert capacity.pod_contribution(pod("p", "n", {GPU: "1"}, "Succeeded")) is None
    assert capacity.pod_contribution(pod("p", "n", {GPU: "1"}, "Failed")) is None
    bound = capacity.pod_contribution(pod("p", "n", {GPU: "1", "cpu": "250m"}, "Pending"))
    assert bound == capacity.Contribution(
        "n", {GPU: Decimal(1), "cpu": Decimal("0.25"), "pods": Decimal(1)}
    )


def test_a_node_offers_its_allocatable() -> None:
    offered = capacity.node_contribution(node("n", gpus="8"))
    assert offered.node == "n"
    assert offered.amounts[GPU] == 8
    assert offered.amounts["memory"] == 64 * 2**30


def test_the_stripped_objects_keep_their_uid() -> None:
    assert capacity.uid(pod("p", "n", {})) == "uid-p"
    assert capacity.uid(node("n")) == "uid-n"


def test_a_pod_delivered_again_is_counted_once() -> None:
    totals = capacity.Totals()
    taken = pod("p", "n", {GPU: "1"})
    totals.put_pod(taken)
    # A relist re-reads every pod it already holds.
    totals.put_pod(taken)
    assert totals.used == {"n": {GPU: 1, "pods": 1}}


def test_a_pods_life_moves_its_contribution() -> None:
    totals = capacity.Totals()
    totals.put_pod(pod("p", None, {GPU: "1"}))
    assert totals.used == {}
    totals.put_pod(pod("p", "n", {GPU: "1"}, "Pending"))
    assert totals.used == {"n": {GPU: 1, "pods": 1}}
    totals.put_pod(pod("q", "n", {GPU: "2"}))
    assert totals.used == {"n": {GPU: 3, "pods": 2}}
    totals.put_pod(pod("p", "n", {GPU: "1"}, "Succeeded"))
    assert totals.used == {"n": {GPU: 2, "pods": 1}}
    totals.remove_pod(pod("q", "n", {GPU: "2"}))
    # Nothing left over at zero: the totals equal those of an empty cluster.
    assert totals.used == {}


def test_a_name_reused_by_a_new_pod_is_a_new_contribution() -> None:
    totals = capacity.Totals()
    old = pod("p", "a", {GPU: "1"}, uid="first")
    new = pod("p", "b", {GPU: "1"}, uid="second")
    totals.put_pod(old)
    totals.put_pod(new)
    assert set(totals.used) == {"a", "b"}
    totals.remove_pod(old)
    assert totals.used == {"b": {GPU: 1, "pods": 1}}


def test_a_node_changing_its_allocatable_replaces_what_it_offered() -> None:
    totals = capacity.Totals()
    totals.put_node(node("n", gpus="4"))
    totals.put_node(node("n", gpus="2"))
    assert totals.allocatable["n"][GPU] == 2
    totals.remove_node(node("n", gpus="2"))
    assert totals.allocatable == {}


def test_disagreements_name_the_node_resource_and_both_figures() -> None:
    nodes = [node("n")]
    pods = [pod("p", "n", {GPU: "1"})]
    totals = capacity.Totals.of(nodes, pods)
    assert agrees(totals, nodes, pods) == []
    totals.put_pod(pod("ghost", "n", {GPU: "2"}))
    assert agrees(totals, nodes, pods) == [
        capacity.Disagreement("used", "n", GPU, Decimal(3), Decimal(1)),
        capacity.Disagreement("used", "n", "pods", Decimal(2), Decimal(1)),
    ]
    totals.remove_node(node("n"))
    assert [(d.table, d.resource) for d in agrees(totals, nodes, pods)][-1] == (
        "allocatable",
        "pods",
    )


# -- the property: any sequence of watch events leaves the totals equal to a recount ----------

NODE_NAMES = ("l4-0", "l4-1", "l4-2")
POD_NAMES = tuple(f"pod-{i}" for i in range(12))


def random_node(rng: random.Random, name: str) -> dict[str, Any]:
    return node(
        name,
        gpus=rng.choice(("0", "1", "4", "8")),
        # A node deleted and created again under its name comes back with a new uid.
        uid=f"{name}-{rng.randrange(2)}",
        ready=rng.random() > 0.2,
        cordoned=rng.random() < 0.2,
        labels=rng.choice(({"accelerator": "nvidia-l4"}, {})),
        tainted=rng.random() > 0.2,
    )


def random_pod(rng: random.Random, name: str) -> dict[str, Any]:
    requests = {GPU: rng.choice(("1", "2")), "cpu": rng.choice(("100m", "1", "1500m"))}
    if rng.random() < 0.3:
        requests["memory"] = rng.choice(("512Mi", "1Gi", "0.5Gi"))
    return pod(
        name,
        rng.choice((None, *NODE_NAMES, "gone-node")),
        requests,
        rng.choice(("Pending", "Running", "Running", "Succeeded", "Failed")),
        uid=f"{name}-{rng.randrange(2)}",
    )


class Cache:
    """The informer's side: objects by key; each change hands (old, new) to the totals,
    as ``on_object`` does, and a relist re-delivers everything it reads."""

    def __init__(self, totals: capacity.Totals) -> None:
        self.totals = totals
        self.nodes: dict[str, Any] = {}
        self.pods: dict[str, Any] = {}

    def pod(self, name: str, new: dict[str, Any] | None) -> None:
        self._change(self.pods, name, new, self.totals.remove_pod, self.totals.put_pod)

    def node(self, name: str, new: dict[str, Any] | None) -> None:
        self._change(self.nodes, name, new, self.totals.remove_node, self.totals.put_node)

    @staticmethod
    def _change(
        objects: dict[str, dict[str, Any]],
        name: str,
        new: dict[str, Any] | None,
        remove: Callable[[dict[str, Any]], None],
        put: Callable[[dict[str, Any]], None],
    ) -> None:
        """Replace the object ``name`` of ``objects`` by ``new`` (None deletes it)."""
        old = objects.pop(name, None)
        if old is not None:
            remove(old)
        if new is not None:
            objects[name] = new
            put(new)


def step(rng: random.Random, cache: Cache) -> None:
    roll = rng.random()
    if roll < 0.5:
        name = rng.choice(POD_NAMES)
        cache.pod(name, random_pod(rng, name))
    elif roll < 0.65:
        cache.pod(rng.choice(POD_NAMES), None)
    elif roll < 0.8:
        name = rng.choice(NODE_NAMES)
        cache.node(name, random_node(rng, name))
    elif roll < 0.85:
        cache.node(rng.choice(NODE_NAMES), None)
    elif roll < 0.95:
        # A relist: every object delivered again to totals that already hold it.
        for pod_obj in list(cache.pods.values()):
            cache.totals.put_pod(pod_obj)
        for node_obj in list(cache.nodes.values()):
            cache.totals.put_node(node_obj)
    else:
        # The same pod, delivered twice in a row (a resync of an unchanged object).
        if cache.pods:
            cache.totals.put_pod(rng.choice(list(cache.pods.values())))


@pytest.mark.parametrize("seed", range(40))
def test_any_sequence_of_events_keeps_the_totals_equal_to_a_recount(seed: int) -> None:
    rng = random.Random(seed)
    cache = Cache(capacity.Totals())
    small = Settings().preset("small")
    profiles = [l4(1), l4(2)]
    for _ in range(300):
        step(rng, cache)
        nodes, pods = list(cache.nodes.values()), list(cache.pods.values())
        assert agrees(cache.totals, nodes, pods) == []
        counted = capacity.usage_by_node(pods)
        for preset in (None, small):
            served = capacity.availability(profiles, nodes, cache.totals.usage(), {}, NOW, preset)
            assert served == capacity.availability(profiles, nodes, counted, {}, NOW, preset)


def test_totals_keep_the_pods_that_hold_a_device() -> None:
    totals = capacity.Totals()
    training = pod("train", "l4-0", {GPU: "1", "cpu": "2"})
    totals.put_pod(training)
    totals.put_pod(pod("web", "l4-0", {"cpu": "1", "memory": "1Gi"}))
    totals.put_pod(pod("pending", None, {GPU: "1"}))
    assert totals.holding_devices() == [training]
    # It ends: it holds nothing any more.
    totals.put_pod(pod("train", "l4-0", {GPU: "1", "cpu": "2"}, phase="Succeeded"))
    assert totals.holding_devices() == []
    totals.put_pod(training)
    totals.remove_pod(training)
    assert totals.holding_devices() == []
    # A recount finds them too.
    assert capacity.Totals.of([], [training]).holding_devices() == [training]
