"""The name-ordered indexes behind filtered and paged lists, as plain data."""

from __future__ import annotations

import random

import pytest
from devboxes_controller.state.index import CPU, BoxIndex

Key = tuple[str | None, str | None, str | None]


def _walk(index: BoxIndex, key: Key, limit: int) -> list[str]:
    seen: list[str] = []
    after = ""
    while True:
        page = index.page(key, after, limit)
        seen += page.names
        if not page.more:
            return seen
        after = page.names[-1]


def test_each_filter_holds_exactly_its_boxes_in_name_order() -> None:
    index = BoxIndex()
    index.put("b", "alice", "ready", "l4")
    index.put("a", "bob", "stopped", CPU)
    index.put("c", "alice", "ready", CPU)
    assert index.names((None, None, None)) == ["a", "b", "c"]
    assert index.names((None, "ready", None)) == ["b", "c"]
    assert index.names((None, None, CPU)) == ["a", "c"]
    assert index.names((None, "ready", "l4")) == ["b"]
    assert index.names((None, "degraded", None)) == []
    assert index.names(("alice", None, None)) == ["b", "c"]
    assert index.names(("alice", "ready", CPU)) == ["c"]
    assert index.names(("bob", "ready", None)) == []
    assert index.names(("carol", None, None)) == []
    assert index.profiles() == {CPU, "l4"}
    assert len(index) == 3


def test_a_state_change_moves_the_box_and_a_removal_forgets_it() -> None:
    index = BoxIndex()
    index.put("a", "alice", "starting", "l4")
    index.put("a", "alice", "ready", "l4")
    assert index.names((None, "starting", None)) == []
    assert index.names(("alice", "ready", "l4")) == ["a"]
    index.remove("a")
    index.remove("a")
    assert index.names((None, None, None)) == []
    assert index.names(("alice", None, None)) == []
    assert index.profiles() == set()
    assert len(index) == 0


def test_a_put_and_a_removal_name_exactly_the_lists_whose_members_changed() -> None:
    index = BoxIndex()
    joined = index.put("a", "alice", "starting", "l4")
    assert joined == {
        (o, s, p) for o in (None, "alice") for s in (None, "starting") for p in (None, "l4")
    }
    assert index.put("a", "alice", "starting", "l4") == set()
    assert index.put("a", "alice", "ready", "l4") == {
        (o, s, p) for o in (None, "alice") for s in ("starting", "ready") for p in (None, "l4")
    }
    assert set(index.keys_of("a")) == {
        (o, s, p) for o in (None, "alice") for s in (None, "ready") for p in (None, "l4")
    }
    assert index.remove("a") == set(index.keys_of("a")) | {
        (o, s, p) for o in (None, "alice") for s in (None, "ready") for p in (None, "l4")
    }
    assert index.keys_of("a") == []
    assert index.remove("a") == set()


def test_pages_follow_each_other_and_the_last_says_no_more() -> None:
    index = BoxIndex()
    for name in "edcba":
        index.put(name, "alice", "ready", CPU)
    everything: Key = (None, None, None)
    first = index.page(everything, "", 2)
    assert (first.names, first.more) == (["a", "b"], True)
    last = index.page(everything, "d", 2)
    assert (last.names, last.more) == (["e"], False)
    exact = index.page(everything, "c", 2)
    assert (exact.names, exact.more) == (["d", "e"], False)
    assert index.page(everything, "", None).names == list("abcde")
    # Resuming after a name that was deleted meanwhile starts at the next one.
    index.remove("b")
    assert index.page(everything, "b", 1).names == ["c"]


@pytest.mark.parametrize("seed", range(20))
def test_paging_amid_creates_and_deletes_yields_every_lasting_box_exactly_once(seed: int) -> None:
    rng = random.Random(seed)
    index = BoxIndex()
    owners, states, profiles = ["alice", "bob"], ["ready", "stopped"], [CPU, "l4"]
    alive: dict[str, tuple[str, str, str]] = {}

    def create() -> str:
        # A name drawn twice is a box that changed state or profile.
        name = f"box-{rng.randrange(10_000):04d}"
        placed = (rng.choice(owners), rng.choice(states), rng.choice(profiles))
        alive[name] = placed
        index.put(name, *placed)
        return name

    for _ in range(rng.randrange(0, 120)):
        create()
    key: Key = (
        rng.choice([None, *owners]),
        rng.choice([None, *states]),
        rng.choice([None, *profiles]),
    )
    at_start = set(alive)
    touched: set[str] = set()
    seen: list[str] = []
    after = ""
    while True:
        page = index.page(key, after, rng.randrange(1, 8))
        seen += page.names
        if not page.more:
            break
        after = page.names[-1]
        for _ in range(rng.randrange(0, 4)):
            if alive and rng.random() < 0.5:
                gone = rng.choice(sorted(alive))
                del alive[gone]
                index.remove(gone)
                touched.add(gone)
            else:
                touched.add(create())
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen)
    lasting = {
        name
        for name in at_start - touched
        if all(wanted in (None, held) for wanted, held in zip(key, alive[name], strict=True))
    }
    assert lasting <= set(seen)
    assert set(seen) <= at_start | touched
    assert _walk(index, key, 3) == index.names(key)
