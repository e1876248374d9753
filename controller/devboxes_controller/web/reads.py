"""The few reads that must ask the apiserver: the GPU doctor and a person's SSH keys.

They run on a pool of their own, so that no number of them can take the capacity that
creates and stops need on the write pool; and each person may have only a few of them in
flight at once, so that one person asking again and again cannot take the capacity that
other people's reads need either. A read that everyone asks alike (the doctor) runs once
for all the callers that ask while it runs, and its answer serves for a few seconds more.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from .writes import Pool, Shares

T = TypeVar("T")

WORKERS = 4
SLOTS = 16
# Longer than a write's: a read changes nothing, and the doctor makes a few dozen calls.
DEADLINE_SECONDS = 10.0
# Counted until the call a read started has finished, not only until it answered:
# otherwise a person retrying reads that time out would pile calls up on a slow apiserver.
PER_PERSON = 2
# How long a shared answer serves callers after it was made.
FRESH_SECONDS = 5.0


class ReadPool:
    def __init__(
        self,
        problem: Callable[[], str | None],
        workers: int = WORKERS,
        slots: int = SLOTS,
        per_person: int = PER_PERSON,
        deadline: float = DEADLINE_SECONDS,
    ) -> None:
        self.pool = Pool(
            problem,
            name="k8s-read",
            workers=workers,
            slots=slots,
            deadline=deadline,
            full="too many reads of Kubernetes in flight while it is slow; retry shortly",
            late="retry shortly",
        )
        self.shares = Shares(
            per_person, "requests that ask Kubernetes (the GPU doctor, listing SSH keys)"
        )

    async def run(self, who: str, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` for the person ``who``; 429 when they have their share in
        flight already."""
        return await self.hold(who, lambda: self.pool.submit(function, *args), shared=False)

    async def hold(self, who: str, start: Callable[[], Future[T]], *, shared: bool) -> T:
        return await self.pool.hold(self.shares, who, start, shared=shared)

    def shutdown(self) -> None:
        self.pool.shutdown()


class Shared(Generic[T]):
    """A read whose answer is the same for every caller: one call serves everyone who
    asks while it runs and for ``fresh`` seconds after it answered; a failure serves
    only those who waited for it."""

    def __init__(
        self,
        reads: ReadPool,
        function: Callable[[], T],
        fresh: float = FRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reads = reads
        self._function = function
        self._fresh = fresh
        self._clock = clock
        # Touched only on the event loop.
        self._call: Future[tuple[T, float]] | None = None

    async def get(self, who: str) -> T:
        answer, _ = await self._reads.hold(who, self._current, shared=True)
        return answer

    def _current(self) -> Future[tuple[T, float]]:
        call = self._call
        if call is None or (call.done() and not self._serves(call)):
            call = self._reads.pool.submit(self._timed)
            self._call = call
        return call

    def _serves(self, call: Future[tuple[T, float]]) -> bool:
        if call.cancelled() or call.exception() is not None:
            return False
        _, made = call.result()
        return self._clock() - made < self._fresh

    def _timed(self) -> tuple[T, float]:
        return self._function(), self._clock()
