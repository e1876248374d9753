"""The line for a device on the real testbed: boxes wait behind the scheduling gate, and the
leader lets them through in the documented order, one per freed device.

Each test brings its own kwok node with two devices of a resource no other test knows, and
a controller whose one GPU profile asks for it, so nothing else takes or frees them. Boxes
the operator token creates belong to the operator: the tests record a person as the owner
on the Deployment and its pod template, where a person's create puts the owner, and every
new pod of the box carries it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import pytest
from devboxes_controller.box import naming, ownership
from devboxes_controller.placement import waiting
from devboxes_testbed.controller import Controller
from devboxes_testbed.nodes import POOL_LABEL
from kubernetes import client
from support import (
    LEASE,
    Api,
    DevicePool,
    StartController,
    lease_holder,
    wait_for,
    wait_for_value,
)

from devboxes_sdk.models import Devbox

PROFILE = DevicePool.PROFILE
# The pool fixture's node offers two devices.
POOL_DEVICES = 2
DISPLAY = DevicePool.DISPLAY
# Rounds of one holder freeing its device and asking again: each hands a device on once.
ROUNDS = 10
LEASE_SECONDS = 10
# The Lease of a dead leader, kept by the test: far longer than any test runs.
KEPT_LEASE_SECONDS = 3600


def leader_and_follower(
    start_controller: StartController, kube: Any, namespace: str, settings: dict[str, Any]
) -> tuple[Controller, Controller]:
    """Two replicas of one namespace: the one that took the Lease, and the other."""
    first = start_controller(settings, lease_seconds=LEASE_SECONDS)
    second = start_controller(settings, lease_seconds=LEASE_SECONDS)
    by_identity: dict[str, Controller] = {first.identity: first, second.identity: second}
    leader = wait_for(lambda: by_identity.get(lease_holder(kube, namespace) or ""))
    return leader, second if leader is first else first


def keep_lease(kube: Any, namespace: str, dead: str) -> int:
    """Keep the Lease of ``dead``, a leader killed holding it, from running out, so that no
    replica leads until :func:`let_lease_run_out`; the duration the leader gave it."""
    leases = client.CoordinationV1Api(kube)
    lease = leases.read_namespaced_lease(LEASE, namespace)
    assert lease.spec.holder_identity == dead, f"the Lease went on before it was kept: {lease}"
    duration = int(lease.spec.lease_duration_seconds)
    lease.spec.lease_duration_seconds = KEPT_LEASE_SECONDS
    # Written over the version read: had a replica taken the Lease since, this fails.
    leases.replace_namespaced_lease(LEASE, namespace, lease)
    return duration


def let_lease_run_out(kube: Any, namespace: str, duration: int) -> None:
    """Give the kept Lease its duration back: it runs out, as a dead leader's does."""
    client.CoordinationV1Api(kube).patch_namespaced_lease(
        LEASE, namespace, {"spec": {"leaseDurationSeconds": duration}}
    )


class Boxes:
    """The boxes of one test as the cluster shows them: their current pods."""

    def __init__(self, api: Api, kube: Any, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.core = client.CoreV1Api(kube)
        self.apps = client.AppsV1Api(kube)
        self.names: list[str] = []

    def pod(self, box: str) -> Any:
        """The box's pod that is not going away, or None."""
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{naming.LABEL_BOX}={box}"
        ).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        return live[0] if len(live) == 1 else None

    def gated(self, box: str) -> bool:
        pod = self.pod(box)
        gates = [g.name for g in (pod.spec.scheduling_gates or [])] if pod else []
        return naming.QUEUE_GATE in gates

    def bound(self, box: str) -> bool:
        pod = self.pod(box)
        return pod is not None and bool(pod.spec.node_name)

    def owner(self, box: str) -> str | None:
        pod = self.pod(box)
        return (pod.metadata.annotations or {}).get(ownership.ANNOTATION_OWNER) if pod else None

    def create(self, box: str, owner: str, preset: str = "small") -> None:
        """A box of ``owner``: created, its pod template and home volume given the owner
        (a start refuses a home volume of another owner), and its pod with the owner either
        gated or placed."""
        self.api.created(box, gpu={"profile": PROFILE}, preset=preset)
        self.names.append(box)
        labels, annotations = ownership.marks(owner)
        marks = {"labels": labels, "annotations": annotations}
        names = naming.object_names(box)
        self.core.patch_namespaced_persistent_volume_claim(
            names.pvc, self.namespace, {"metadata": marks}
        )
        self.apps.patch_namespaced_deployment(
            names.deployment,
            self.namespace,
            {"metadata": marks, "spec": {"template": {"metadata": marks}}},
        )
        wait_for(lambda: self.owner(box) == owner and (self.gated(box) or self.bound(box)))

    def summary(self, box: str) -> str | None:
        return Devbox.model_validate(self.api.box(box)).summary

    def expected_line(self, leaving: str | None = None) -> list[str]:
        """The documented order, from the cluster: fewest devices held by the owner, then
        the oldest pod, then the name; as it will be once ``leaving`` gives its device back."""
        boxes = [b for b in self.names if b != leaving]
        pods = {box: self.pod(box) for box in boxes}
        held = Counter(
            self.owner(box) for box, pod in pods.items() if pod is not None and not self.gated(box)
        )
        waiting = [box for box in boxes if self.gated(box)]
        return sorted(
            waiting,
            key=lambda b: (held[self.owner(b)], pods[b].metadata.creation_timestamp, b),
        )

    def places(self, line: list[str], free: int = 0) -> None:
        """Each box of ``line`` reports its exact place."""
        wanted = [
            f"Waiting for a free {DISPLAY}: {free} of 2 free, {waiting.ordinal(i)} in line"
            for i in range(1, len(line) + 1)
        ]
        wait_for_value(lambda: [self.summary(b) for b in line], wanted)


class Replicas(NamedTuple):
    """Two replicas of the pool's namespace, and the boxes made through the follower."""

    leader: Controller
    follower: Controller
    # The follower's API.
    api: Api
    boxes: Boxes


@pytest.fixture
def replicas(
    start_controller: StartController, pool: DevicePool, kube: Any, namespace: str
) -> Replicas:
    leader, follower = leader_and_follower(
        start_controller, kube, namespace, pool.settings(namespace)
    )
    api = Api(follower)
    return Replicas(leader, follower, api, Boxes(api, kube, namespace))


def test_three_people_get_two_devices_in_the_promised_order(
    replicas: Replicas, pool: DevicePool, kube: Any, namespace: str
) -> None:
    leader, follower, api, boxes = replicas
    # Ann and Bob take both devices.
    for box, owner in (("ann-1", "ann"), ("bob-1", "bob")):
        boxes.create(box, owner)
        wait_for(lambda b=box: boxes.bound(b))
    holders = ["ann-1", "bob-1"]
    # Ann asks for a second one first, then Cat, then Bob: Cat holds none, so she goes
    # ahead of Ann, who waited longer; Bob, holding one too, comes last.
    for box, owner in (("ann-2", "ann"), ("cat-1", "cat"), ("bob-2", "bob")):
        boxes.create(box, owner)
        assert boxes.gated(box)
    line = ["cat-1", "ann-2", "bob-2"]
    assert boxes.expected_line() == line
    boxes.places(line)
    assert all(boxes.gated(b) for b in line)

    for _ in range(ROUNDS):
        # The holder of the longest standing frees its device.
        leaving = holders.pop(0)
        head, *rest = boxes.expected_line(leaving)
        api.call("POST", f"/devboxes/{leaving}/stop")
        wait_for(lambda b=head: boxes.bound(b))
        assert all(boxes.gated(b) for b in rest), f"{head} took the device; {rest} wait"
        holders.append(head)
        # The head's owner now holds one more: the rest may change order behind it.
        boxes.places(boxes.expected_line())
        # It comes back and joins the end of the line its owner's holdings put it in.
        api.call("POST", f"/devboxes/{leaving}/start")
        wait_for(lambda b=leaving: boxes.gated(b))
        boxes.places(boxes.expected_line())
        assert sorted(holders) == sorted(b for b in boxes.names if boxes.bound(b))

    # A pod that is not a box waits for the device too, ahead of the box by its priority
    # (which takes no device from anyone): it gets the one freed, and the box that would
    # have had it names it. Nobody leads while the device changes hands (the leader dies
    # holding the Lease, kept until the pod has the device), so the box is never let
    # through for it and the scheduler has only that pod to place.
    scheduling = client.SchedulingV1Api(kube)
    priority = f"{namespace}-urgent"
    scheduling.create_priority_class(
        {"metadata": {"name": priority}, "value": 1000000, "preemptionPolicy": "Never"}
    )
    try:
        boxes.core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": "not-a-box"},
                "spec": {
                    "priorityClassName": priority,
                    "nodeSelector": {POOL_LABEL: pool.node},
                    "containers": [
                        {
                            "name": "work",
                            "image": "busybox",
                            "resources": {
                                "requests": {pool.resource: "1"},
                                "limits": {pool.resource: "1"},
                            },
                        }
                    ],
                },
            },
        )
        wait_for(lambda: unschedulable(boxes.core, namespace, "not-a-box"))
        leader.stop(kill=True)
        duration = keep_lease(kube, namespace, leader.identity)
        leaving = holders.pop(0)
        head, *rest = boxes.expected_line(leaving)
        api.call("POST", f"/devboxes/{leaving}/stop")
        wait_for(lambda: boxes.core.read_namespaced_pod("not-a-box", namespace).spec.node_name)
        named = f"devices held by a pod that is not a box: {namespace}/not-a-box"
        held = f"Waiting for a free {DISPLAY}: 0 of 2 free, 1st in line; {named}"
        wait_for_value(lambda: boxes.summary(head), held)
        let_lease_run_out(kube, namespace, duration)
        wait_for(lambda: lease_holder(kube, namespace) == follower.identity, timeout=60)
        # The new leader finds no free device: the box stays first in line, at its gate.
        assert boxes.summary(head) == held
        assert all(boxes.gated(b) for b in [head, *rest])
        # The next device freed is the box's.
        boxes.core.delete_namespaced_pod("not-a-box", namespace, grace_period_seconds=0)
        wait_for(lambda: boxes.bound(head))
        assert all(boxes.gated(b) for b in rest)
    finally:
        scheduling.delete_priority_class(priority)


def unschedulable(core: Any, namespace: str, name: str) -> bool:
    """The scheduler has tried the pod and found no room for it."""
    conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
    return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)


def test_a_new_leader_lifts_the_gates_in_the_same_order(
    replicas: Replicas, kube: Any, namespace: str
) -> None:
    leader, follower, api, boxes = replicas
    # Ann holds both devices and asks for a third before Bob and Cat ask for one each:
    # they hold none, so both go ahead of her.
    for box in ("ann-1", "ann-2"):
        boxes.create(box, "ann")
        wait_for(lambda b=box: boxes.bound(b))
    for box, owner in (("ann-3", "ann"), ("bob-1", "bob"), ("cat-1", "cat")):
        boxes.create(box, owner)
    line = ["bob-1", "cat-1", "ann-3"]
    assert boxes.expected_line() == line
    boxes.places(line)

    # The leader dies holding the Lease; a device is freed before anyone leads again.
    leader.stop(kill=True)
    duration = keep_lease(kube, namespace, leader.identity)
    api.call("POST", "/devboxes/ann-1/stop")
    wait_for(lambda: boxes.pod("ann-1") is None)
    # The follower sees the free device, and lets no box through while it does not lead.
    boxes.places(line, free=1)
    assert all(boxes.gated(b) for b in line)
    let_lease_run_out(kube, namespace, duration)
    wait_for(lambda: lease_holder(kube, namespace) == follower.identity, timeout=60)
    # The new leader knows the line only from the cluster, and goes on with it.
    wait_for(lambda: boxes.bound("bob-1"))
    assert boxes.gated("cat-1")
    assert boxes.gated("ann-3")
    boxes.places(["cat-1", "ann-3"])
    # Bob gives his back while Ann still holds one: Cat, holding none, is next.
    api.call("POST", "/devboxes/bob-1/stop")
    wait_for(lambda: boxes.bound("cat-1"))
    assert boxes.gated("ann-3")


def test_a_box_short_of_cpu_beside_free_devices_lets_a_smaller_box_pass(
    start_controller: StartController, pool: DevicePool, kube: Any, namespace: str
) -> None:
    # A pod that is not a box takes all but one of the node's 32 CPUs: both devices stay
    # free, a large box (2 CPU) has no room beside them and a small one (250m) has.
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "cpu-hog"},
            "spec": {
                "nodeSelector": {POOL_LABEL: pool.node},
                "containers": [
                    {"name": "work", "image": "busybox", "resources": {"requests": {"cpu": "31"}}}
                ],
            },
        },
    )
    wait_for(lambda: core.read_namespaced_pod("cpu-hog", namespace).spec.node_name)
    api = Api(start_controller(pool.settings(namespace)))
    boxes = Boxes(api, kube, namespace)

    def short_of(free: str) -> str:
        return (
            f"Waiting for CPU on a node with a free {DISPLAY}: needs 2 CPU, at most {free} "
            "free on any such node; 1st in line"
        )

    boxes.create("large-1", "ann", preset="large")
    wait_for_value(lambda: boxes.summary("large-1"), short_of("1"))
    # Bob's small box comes after Ann's large one (both hold nothing) and goes first.
    boxes.create("small-1", "bob")
    api.wait_ready("small-1")
    assert boxes.gated("large-1")
    wait_for_value(lambda: boxes.summary("large-1"), short_of("0.75"))
    # The large box kept the head of the line: once the CPU is free, it is next.
    core.delete_namespaced_pod("cpu-hog", namespace, grace_period_seconds=0)
    api.wait_ready("large-1")
