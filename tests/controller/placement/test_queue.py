"""The line for a device: its order and which boxes go to the scheduler, with plain data."""

from __future__ import annotations

from decimal import Decimal

from devboxes_controller.box import naming
from devboxes_controller.placement import order

GPU = "nvidia.com/gpu"
OTHER = "amd.com/gpu"


def waiter(
    box: str, owner: str = "", since: int = 0, gated: bool = True, resource: str = GPU
) -> order.Waiter:
    return order.Waiter(
        box, f"{box}-pod", owner, resource, 1, f"2030-01-01T00:00:{since:02d}Z", gated
    )


def holder(owner: str, resource: str = GPU, count: int = 1) -> order.Holder:
    return order.Holder(f"uid-{owner}", "n0", owner, resource, count)


def names(line: list[order.Waiter]) -> list[str]:
    return [w.box for w in line]


def test_the_oldest_goes_first_then_the_name() -> None:
    waiting = [
        waiter("c", since=3),
        waiter("a", since=1),
        waiter("zz", since=1),
        waiter("b", since=2),
    ]
    assert names(order.line(waiting, GPU, {})) == ["a", "zz", "b", "c"]


def test_the_person_holding_fewest_devices_goes_first() -> None:
    waiting = [waiter("ann-1", "ann", since=1), waiter("bob-1", "bob", since=5)]
    holdings = order.held([holder("ann")])
    assert names(order.line(waiting, GPU, holdings)) == ["bob-1", "ann-1"]
    # Devices of another resource do not count.
    other = order.held([holder("ann", OTHER, 4)])
    assert names(order.line(waiting, GPU, other)) == ["ann-1", "bob-1"]
    # Two devices held weigh more than one.
    both = order.held([holder("ann"), holder("bob", count=2)])
    assert names(order.line(waiting, GPU, both)) == ["ann-1", "bob-1"]


def test_boxes_let_through_come_before_every_gated_box() -> None:
    waiting = [waiter("gated", since=1), waiter("through", "ann", since=9, gated=False)]
    holdings = order.held([holder("ann", count=3)])
    assert names(order.line(waiting, GPU, holdings)) == ["through", "gated"]


def test_places_count_per_resource_and_close_up_when_one_leaves() -> None:
    waiting = [
        waiter("a", since=1),
        waiter("b", since=2),
        waiter("c", since=3),
        waiter("x", since=0, resource=OTHER),
    ]
    assert order.places(waiting, {}) == {"a": 1, "b": 2, "c": 3, "x": 1}
    rest = [w for w in waiting if w.box != "b"]
    assert order.places(rest, {}) == {"a": 1, "c": 2, "x": 1}


def test_only_our_gate_holds_a_pod() -> None:
    assert naming.gated({"spec": {"schedulingGates": [{"name": "devboxes.io/queue"}]}})
    assert not naming.gated({"spec": {"schedulingGates": [{"name": "example.com/other"}]}})
    assert not naming.gated({"spec": {}})


NEEDS = {GPU: Decimal(1), "cpu": Decimal(2)}
SMALL = {GPU: Decimal(1), "cpu": Decimal("0.25")}
Room = dict[str, dict[str, Decimal]]


def room(cpu: int = 8, **gpus: int) -> Room:
    return {node: {GPU: Decimal(n), "cpu": Decimal(cpu)} for node, n in gpus.items()}


def demands(
    *boxes: str, nodes: tuple[str, ...] = ("n0", "n1"), needs: dict[str, Decimal] = NEEDS
) -> dict[str, order.Demand]:
    return {box: order.Demand(needs, nodes) for box in boxes}


def lifted(
    lines: list[list[order.Waiter]],
    wanted: dict[str, order.Demand],
    free: Room,
    strict: bool = False,
) -> list[str]:
    return names(list(order.walk(lines, wanted, free, strict).lift))


def test_as_many_are_let_through_as_devices_are_free() -> None:
    line = [waiter("a", since=1), waiter("b", since=2), waiter("c", since=3)]
    assert lifted([line], demands("a", "b", "c"), room(n0=1, n1=1)) == ["a", "b"]
    assert lifted([line], demands("a", "b", "c"), room(n0=0, n1=0)) == []


def test_a_device_promised_to_a_box_let_through_goes_to_nobody_else() -> None:
    through = waiter("through", gated=False)
    line = [through, waiter("a", since=1), waiter("b", since=2)]
    walked = order.walk([line], demands("through", "a", "b"), room(n0=1, n1=1))
    assert names(list(walked.lift)) == ["a"]
    # It has its room: it is about to be placed, and no longer counts as in line.
    assert walked.placing == {"through"}
    assert order.places(line, {}, walked.placing) == {"a": 1, "b": 2}
    assert lifted([line], demands("through", "a", "b"), room(n0=1)) == []


def test_a_head_short_of_cpu_beside_a_free_device_lets_smaller_boxes_pass() -> None:
    line = [waiter("large", since=1), waiter("small", since=2), waiter("large-2", since=3)]
    wanted = {**demands("large", "large-2"), **demands("small", needs=SMALL)}
    free = room(cpu=1, n0=2)
    walked = order.walk([line], wanted, free)
    assert names(list(walked.lift)) == ["small"]
    # The small box took a quarter of the one CPU free.
    assert walked.short == {
        "large": (order.Lack("cpu", Decimal(2), Decimal(1)),),
        "large-2": (order.Lack("cpu", Decimal(2), Decimal("0.75")),),
    }
    # Strictly in order, the first box that fits nowhere stops the line, and still says why.
    strictly = order.walk([line], wanted, free, strict=True)
    assert strictly.lift == ()
    assert strictly.short == {"large": (order.Lack("cpu", Decimal(2), Decimal(1)),)}
    # With the CPU free again, the head goes first.
    assert lifted([line], wanted, room(n0=1)) == ["large"]


def test_a_head_waiting_for_a_device_keeps_those_of_its_nodes() -> None:
    pair = order.Demand({GPU: Decimal(2), "cpu": Decimal(1)}, ("n0",))
    line = [waiter("pair", since=1), waiter("same-node", since=2), waiter("other", since=3)]
    wanted = {"pair": pair, **demands("same-node", nodes=("n0",)), **demands("other")}
    walked = order.walk([line], wanted, room(n0=1, n1=1))
    # One device of the two it needs is free on its node: nobody behind takes it, while a
    # node it may not use serves the box that may.
    assert names(list(walked.lift)) == ["other"]
    assert walked.short == {}
    assert lifted([line], wanted, room(n0=1, n1=1), strict=True) == []


def test_a_head_whose_nodes_have_no_free_device_lets_boxes_for_other_nodes_pass() -> None:
    line = [waiter("head", since=1), waiter("next", since=2)]
    wanted = {**demands("next", nodes=("n1",)), **demands("head", nodes=("n0",))}
    assert lifted([line], wanted, room(n0=0, n1=1)) == ["next"]
    assert lifted([line], wanted, room(n0=0, n1=1), strict=True) == []
    # Both waiting for the same node's device: the line holds.
    assert lifted([line], demands("head", "next", nodes=("n0",)), room(n0=0, n1=1)) == []


def test_what_a_box_lacks_is_named_by_the_nodes_with_its_devices_free() -> None:
    needs = {GPU: Decimal(1), "cpu": Decimal(2), "memory": Decimal(4), "pods": Decimal(1)}
    wanted = demands("box", needs=needs)

    def lacks(free: Room) -> tuple[order.Lack, ...]:
        return order.walk([[waiter("box")]], wanted, free).short["box"]

    def node(gpus: int, cpu: str, memory: int, pods: int = 10) -> dict[str, Decimal]:
        return {
            GPU: Decimal(gpus),
            "cpu": Decimal(cpu),
            "memory": Decimal(memory),
            "pods": Decimal(pods),
        }

    # The node without a free device does not count, however much CPU it has.
    assert lacks({"n0": node(1, "0.5", 8), "n1": node(0, "16", 8)}) == (
        order.Lack("cpu", Decimal(2), Decimal("0.5")),
    )
    assert lacks({"n0": node(1, "1", 1), "n1": node(1, "0.5", 2)}) == (
        order.Lack("cpu", Decimal(2), Decimal(1)),
        order.Lack("memory", Decimal(4), Decimal(2)),
    )
    # Each is free on one node, never both on the same one.
    mixed = lacks({"n0": node(1, "4", 1), "n1": node(1, "1", 8)})
    assert mixed == (
        order.Lack("cpu", Decimal(2), Decimal(4)),
        order.Lack("memory", Decimal(4), Decimal(8)),
    )
    assert not any(lack.short for lack in mixed)
    # Overcommitted room reads as none free.
    assert lacks({"n0": node(1, "-1", 8, pods=0)}) == (
        order.Lack("cpu", Decimal(2), Decimal(0)),
        order.Lack("pods", Decimal(1), Decimal(0)),
    )
    # A box that fits has nothing to lack; one whose devices are free nowhere neither.
    assert order.walk([[waiter("box")]], wanted, {"n0": node(1, "2", 4)}).short == {}
    assert order.walk([[waiter("box")]], wanted, {"n0": node(0, "0", 0)}).short == {}


def test_a_box_that_fits_no_node_at_all_holds_nobody_up() -> None:
    line = [waiter("never", since=1), waiter("next", since=2)]
    wanted = {**demands("next"), **demands("never", nodes=())}
    assert lifted([line], wanted, room(n0=1)) == ["next"]
    assert lifted([line], wanted, room(n0=1), strict=True) == ["next"]


def test_lines_of_different_devices_share_the_nodes_cpu() -> None:
    amd = waiter("amd", resource=OTHER)
    both = {GPU: Decimal(1), OTHER: Decimal(1), "cpu": Decimal(2)}
    free = {"n0": both}
    wanted = {
        "nv": order.Demand({GPU: Decimal(1), "cpu": Decimal(2)}, ("n0",)),
        "amd": order.Demand({OTHER: Decimal(1), "cpu": Decimal(2)}, ("n0",)),
    }
    walked = order.walk([[waiter("nv")], [amd]], wanted, free)
    assert names(list(walked.lift)) == ["nv"]
    assert walked.short == {"amd": (order.Lack("cpu", Decimal(2), Decimal(0)),)}
