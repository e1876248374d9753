"""The device line's own state: entries in, the lines they move and the counts out, and
availability told only when who waits changes."""

from __future__ import annotations

from typing import Any

from devboxes_controller.placement import order, waiting
from devboxes_controller.state.line import DeviceLine

from devboxes_sdk.models import ProfileAvailability

GPU = "nvidia.com/gpu"


def queued(box: str, since: str, owner: str = "ann", gated: bool = True) -> waiting.Queued:
    waiter = order.Waiter(box, f"{box}-pod", owner, GPU, 1, since, gated)
    return waiting.Queued("nvidia-l4", "NVIDIA L4", waiter)


class NoneFree:
    def profile(self, name: str) -> ProfileAvailability | None:
        return ProfileAvailability(name=name, available=0, capacity=2, waiting=2)

    def holding(self, resource: str) -> list[Any]:
        return []

    def on_nodes_of(self, profile: Any, pods: list[Any]) -> list[str]:
        raise AssertionError("no pod that is not a box holds a device")


def test_entries_move_their_lines_and_waiting_changes_are_told() -> None:
    line = DeviceLine()
    told: list[None] = []
    line.add_listener(lambda: told.append(None))

    assert line.put("a", queued("a", "2026-01-01T00:00:00Z"), None) == {GPU}
    assert line.put("b", queued("b", "2026-01-01T00:01:00Z", owner="bob"), None) == {GPU}
    assert len(told) == 2
    assert line.waiting_counts() == {"nvidia-l4": 2}
    # The same entry again moves nothing in the line and tells nobody.
    assert line.put("a", queued("a", "2026-01-01T00:00:00Z"), None) == {GPU}
    assert len(told) == 2

    summaries = line.summaries({GPU}, NoneFree(), lambda box: None)
    assert summaries == {
        "a": "Waiting for a free NVIDIA L4: 0 of 2 free, 1st in line",
        "b": "Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line",
    }

    # Ann's box gets its device: she now holds one, and Bob's box goes first.
    holder = order.Holder("uid-a", "node-1", "ann", GPU, 1)
    assert line.put("a", None, holder) == {GPU}
    assert len(told) == 3
    assert line.waiting_counts() == {"nvidia-l4": 1}
    waiters, holders = line.waiters_and_holders()
    assert [w.box for w in waiters] == ["b"]
    assert holders == [holder]
    assert line.summaries(line.lines(), NoneFree(), lambda box: None) == {
        "b": "Waiting for a free NVIDIA L4: 0 of 2 free, 1st in line"
    }

    # A walk that lets Bob's box through is news for his line only once.
    placing = order.Walk((), frozenset({"b"}), {})
    assert line.walked(placing) == {GPU}
    assert line.walked(placing) == set()
    assert line.put("b", None, None) == {GPU}
    assert line.waiting_counts() == {}
