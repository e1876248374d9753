"""The read and write pools: a share per person, held until the call has finished, and one
shared call for a read that is the same for everyone. Real threads and plain functions: no
cluster."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from devboxes_controller.k8s.kube import ApiProblem, Unavailable
from devboxes_controller.web.reads import ReadPool, Shared
from devboxes_controller.web.writes import SLOTS, TooMany, WritePool

T = TypeVar("T")
# Bounds a wait for something another thread does at once; never reached when it works.
SETTLE_SECONDS = 10.0


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())  # type: ignore[arg-type]


class Gate:
    """A call that holds its worker until opened, counting how often it was made."""

    def __init__(self, answer: Any = "answer") -> None:
        self.opened = threading.Event()
        self.entered = threading.Semaphore(0)
        self.calls = 0
        self.answer = answer

    def __call__(self) -> Any:
        self.calls += 1
        self.entered.release()
        assert self.opened.wait(SETTLE_SECONDS)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    async def started(self, times: int = 1) -> None:
        for _ in range(times):
            assert await asyncio.to_thread(self.entered.acquire, timeout=SETTLE_SECONDS)


def no_problem() -> str | None:
    return None


def test_a_person_has_two_reads_in_flight_and_others_keep_theirs() -> None:
    async def scenario() -> None:
        reads = ReadPool(no_problem, per_person=2)
        gate = Gate()
        bobs = [asyncio.ensure_future(reads.run("bob", gate)) for _ in range(2)]
        await gate.started(2)
        with pytest.raises(TooMany) as refused:
            await reads.run("bob", gate)
        assert refused.value.status == 429
        assert refused.value.headers == {"Retry-After": "2"}
        assert (
            "you already have 2 requests that ask Kubernetes (the GPU doctor"
            in refused.value.detail
        )
        alices = asyncio.ensure_future(reads.run("alice", gate))
        await gate.started()
        gate.opened.set()
        assert await asyncio.gather(*bobs, alices) == ["answer"] * 3
        assert await reads.run("bob", gate) == "answer"
        assert gate.calls == 4
        reads.shutdown()

    run(scenario)


def test_a_share_is_held_until_the_call_finishes_not_until_its_request_gave_up() -> None:
    async def scenario() -> None:
        reads = ReadPool(no_problem, per_person=2, deadline=0.2)
        gate = Gate()
        for _ in range(2):
            with pytest.raises(Unavailable) as late:
                await reads.run("bob", gate)
            assert late.value.detail == "Kubernetes API did not answer within 0.2 s; retry shortly"
        await gate.started(2)
        # Both calls still run on a slow apiserver: a third would pile up behind them.
        with pytest.raises(TooMany):
            await reads.run("bob", gate)
        gate.opened.set()
        for _ in range(int(SETTLE_SECONDS / 0.01)):
            try:
                assert await reads.run("bob", str) == ""
                break
            except TooMany:
                await asyncio.sleep(0.01)
        else:
            raise AssertionError("bob's shares were never given back")
        assert gate.calls == 2
        reads.shutdown()

    run(scenario)


def test_a_refused_call_gives_its_share_back() -> None:
    async def scenario() -> None:
        reads = ReadPool(lambda: "the apiserver does not answer", per_person=1)
        for _ in range(3):
            with pytest.raises(Unavailable) as refused:
                await reads.run("bob", str)
            assert refused.value.status == 503
        reads.shutdown()

    run(scenario)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_call_serves_everyone_who_asks_while_it_runs_and_a_few_seconds_after() -> None:
    async def scenario() -> None:
        reads = ReadPool(no_problem, per_person=2)
        gate, clock = Gate(), Clock()
        shared = Shared(reads, gate, fresh=5.0, clock=clock)
        people = [f"person-{i}" for i in range(20)]
        waiting = [asyncio.ensure_future(shared.get(who)) for who in people]
        await gate.started()
        gate.opened.set()
        assert await asyncio.gather(*waiting) == ["answer"] * 20
        assert gate.calls == 1
        clock.now += 4.9
        assert await shared.get("bob") == "answer"
        assert gate.calls == 1
        clock.now += 0.2
        assert await shared.get("bob") == "answer"
        assert gate.calls == 2
        reads.shutdown()

    run(scenario)


def test_waiting_for_a_shared_call_counts_against_the_person() -> None:
    async def scenario() -> None:
        reads = ReadPool(no_problem, per_person=2)
        gate = Gate()
        shared = Shared(reads, gate)
        bobs = [asyncio.ensure_future(shared.get("bob")) for _ in range(2)]
        await gate.started()
        with pytest.raises(TooMany):
            await shared.get("bob")
        alices = asyncio.ensure_future(shared.get("alice"))
        gate.opened.set()
        assert await asyncio.gather(*bobs, alices) == ["answer"] * 3
        assert gate.calls == 1
        reads.shutdown()

    run(scenario)


def test_a_failed_shared_call_is_not_kept() -> None:
    async def scenario() -> None:
        reads = ReadPool(no_problem)
        failing = Gate(Unavailable("Kubernetes API unreachable"))
        shared = Shared(reads, failing)
        waiting = [asyncio.ensure_future(shared.get(who)) for who in ("alice", "bob")]
        await failing.started()
        failing.opened.set()
        answers = await asyncio.gather(*waiting, return_exceptions=True)
        assert [type(a) for a in answers] == [Unavailable, Unavailable]
        assert all(isinstance(a, ApiProblem) and a.status == 503 for a in answers)
        with pytest.raises(Unavailable):
            await shared.get("alice")
        assert failing.calls == 2
        reads.shutdown()

    run(scenario)


def test_a_shared_call_outlives_a_waiter_that_gave_up() -> None:
    async def scenario() -> None:
        reads = ReadPool(no_problem, deadline=0.5)
        gate = Gate()
        shared = Shared(reads, gate)
        with pytest.raises(Unavailable):
            await shared.get("alice")
        await gate.started()
        gate.opened.set()
        # Bob has the answer of the call alice started: it was neither cancelled nor made
        # twice.
        assert await shared.get("bob") == "answer"
        assert gate.calls == 1
        reads.shutdown()

    run(scenario)


def test_a_person_holds_at_most_their_share_of_the_write_slots() -> None:
    async def scenario() -> None:
        writes = WritePool(no_problem, per_person=8)
        gate = Gate()
        bobs = [asyncio.ensure_future(writes.run_for("bob", gate)) for _ in range(8)]
        await gate.started(8)
        refused = []
        for _ in range(SLOTS):
            with pytest.raises(TooMany) as refusal:
                await writes.run_for("bob", gate)
            refused.append(refusal.value)
        assert {r.status for r in refused} == {429}
        assert "you already have 8 changes in flight" in refused[0].detail
        assert refused[0].headers == {"Retry-After": "2"}
        # Bob's flood left alice's slots free.
        alices = [asyncio.ensure_future(writes.run_for("alice", gate)) for _ in range(8)]
        gate.opened.set()
        assert await asyncio.gather(*bobs, *alices) == ["answer"] * 16
        assert gate.calls == 16
        assert await writes.run_for("bob", gate) == "answer"
        writes.shutdown()

    run(scenario)
