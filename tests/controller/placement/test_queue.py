"""The line for a device: its order and which boxes go to the scheduler, with plain data."""

from __future__ import annotations

from decimal import Decimal

from devboxes_controller.box import render
from devboxes_controller.placement import queue

GPU = "nvidia.com/gpu"
OTHER = "amd.com/gpu"


def waiter(
    box: str, owner: str = "", since: int = 0, gated: bool = True, resource: str = GPU
) -> queue.Waiter:
    return queue.Waiter(
        box, f"{box}-pod", owner, resource, 1, f"2030-01-01T00:00:{since:02d}Z", gated
    )


def holder(owner: str, resource: str = GPU, count: int = 1) -> queue.Holder:
    return queue.Holder(f"uid-{owner}", "n0", owner, resource, count)


def names(line: list[queue.Waiter]) -> list[str]:
    return [w.box for w in line]


def test_the_oldest_goes_first_then_the_name() -> None:
    waiting = [
        waiter("c", since=3),
        waiter("a", since=1),
        waiter("zz", since=1),
        waiter("b", since=2),
    ]
    assert names(queue.line(waiting, GPU, {})) == ["a", "zz", "b", "c"]


def test_the_person_holding_fewest_devices_goes_first() -> None:
    waiting = [waiter("ann-1", "ann", since=1), waiter("bob-1", "bob", since=5)]
    holdings = queue.held([holder("ann")])
    assert names(queue.line(waiting, GPU, holdings)) == ["bob-1", "ann-1"]
    # Devices of another resource do not count.
    other = queue.held([holder("ann", OTHER, 4)])
    assert names(queue.line(waiting, GPU, other)) == ["ann-1", "bob-1"]
    # Two devices held weigh more than one.
    both = queue.held([holder("ann"), holder("bob", count=2)])
    assert names(queue.line(waiting, GPU, both)) == ["ann-1", "bob-1"]


def test_boxes_let_through_come_before_every_gated_box() -> None:
    waiting = [waiter("gated", since=1), waiter("through", "ann", since=9, gated=False)]
    holdings = queue.held([holder("ann", count=3)])
    assert names(queue.line(waiting, GPU, holdings)) == ["through", "gated"]


def test_places_count_per_resource_and_close_up_when_one_leaves() -> None:
    waiting = [
        waiter("a", since=1),
        waiter("b", since=2),
        waiter("c", since=3),
        waiter("x", since=0, resource=OTHER),
    ]
    assert queue.places(waiting, {}) == {"a": 1, "b": 2, "c": 3, "x": 1}
    rest = [w for w in waiting if w.box != "b"]
    assert queue.places(rest, {}) == {"a": 1, "c": 2, "x": 1}


def test_only_our_gate_holds_a_pod() -> None:
    assert render.gated({"spec": {"schedulingGates": [{"name": "devboxes.io/queue"}]}})
    assert not render.gated({"spec": {"schedulingGates": [{"name": "example.com/other"}]}})
    assert not render.gated({"spec": {}})


NEEDS = {GPU: Decimal(1), "cpu": Decimal(2)}


def room(**gpus: int) -> dict[str, dict[str, Decimal]]:
    return {node: {GPU: Decimal(n), "cpu": Decimal(8)} for node, n in gpus.items()}


def demands(*boxes: str, nodes: tuple[str, ...] = ("n0", "n1")) -> dict[str, queue.Demand]:
    return {box: queue.Demand(NEEDS, nodes) for box in boxes}


def test_as_many_are_let_through_as_devices_are_free() -> None:
    line = [waiter("a", since=1), waiter("b", since=2), waiter("c", since=3)]
    lifted = queue.to_lift([line], demands("a", "b", "c"), room(n0=1, n1=1))
    assert names(lifted) == ["a", "b"]
    assert queue.to_lift([line], demands("a", "b", "c"), room(n0=0, n1=0)) == []


def test_a_device_promised_to_a_box_let_through_goes_to_nobody_else() -> None:
    through = waiter("through", gated=False)
    line = [through, waiter("a", since=1), waiter("b", since=2)]
    lifted = queue.to_lift([line], demands("through", "a", "b"), room(n0=1, n1=1))
    assert names(lifted) == ["a"]
    assert queue.to_lift([line], demands("through", "a", "b"), room(n0=1)) == []


def test_a_head_that_fits_no_free_node_holds_the_line() -> None:
    line = [waiter("head", since=1), waiter("next", since=2)]
    wanted = {**demands("next", nodes=("n1",)), **demands("head", nodes=("n0",))}
    assert queue.to_lift([line], wanted, room(n0=0, n1=1)) == []
    # Room for the device but not the CPU is no room.
    full = room(n0=1)
    full["n0"]["cpu"] = Decimal(1)
    assert queue.to_lift([line], demands("head", "next"), full) == []


def test_a_box_that_fits_no_node_at_all_holds_nobody_up() -> None:
    line = [waiter("never", since=1), waiter("next", since=2)]
    wanted = {**demands("next"), **demands("never", nodes=())}
    assert names(queue.to_lift([line], wanted, room(n0=1))) == ["next"]


def test_lines_of_different_devices_share_the_nodes_cpu() -> None:
    amd = waiter("amd", resource=OTHER)
    both = {GPU: Decimal(1), OTHER: Decimal(1), "cpu": Decimal(2)}
    free = {"n0": both}
    wanted = {
        "nv": queue.Demand({GPU: Decimal(1), "cpu": Decimal(2)}, ("n0",)),
        "amd": queue.Demand({OTHER: Decimal(1), "cpu": Decimal(2)}, ("n0",)),
    }
    assert names(queue.to_lift([[waiter("nv")], [amd]], wanted, free)) == ["nv"]
