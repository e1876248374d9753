"""Kubernetes calls off the event loop, on bounded pools with a deadline per request.

Reads are answered from memory on the event loop and must never wait behind a call that
is stuck on a frozen apiserver. Writes therefore run on a small pool of their own (and
the few reads that must ask the apiserver on another, :mod:`.reads`); a request gets a
slot or an immediate 503, and a call that has not finished by the deadline answers 503
with Retry-After while its worker runs on to its own call timeouts. Each person may hold
only a share of a pool's slots, so that one person sending many calls at once cannot take
the capacity everyone else's need: past it they get 429.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ..k8s.kube import ApiProblem, Unavailable

T = TypeVar("T")

WORKERS = 8
# Writes accepted at once, running or queued; more are refused rather than queued behind
# an apiserver that is not answering.
SLOTS = 32
DEADLINE_SECONDS = 4.5
# A quarter of the slots: a person sending more at once waits for their own answers.
PER_PERSON = 8
RETRY_AFTER_SECONDS = 2


def _taken(waiting: asyncio.Future[Any]) -> None:
    if not waiting.cancelled():
        waiting.exception()


class TooMany(ApiProblem):
    def __init__(self, most: int, what: str) -> None:
        super().__init__(
            429,
            f"you already have {most} {what} in flight; wait for their answers before sending more",
            {"Retry-After": str(RETRY_AFTER_SECONDS)},
        )


class Shares:
    """How many calls of a pool each person has in flight. Calls finish on worker
    threads, which give their share back, hence the lock."""

    def __init__(self, most: int, what: str) -> None:
        self._most = most
        self._what = what
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, who: str) -> None:
        with self._lock:
            held = self._held.get(who, 0)
            if held >= self._most:
                raise TooMany(self._most, self._what)
            self._held[who] = held + 1

    def give_back(self, who: str) -> None:
        with self._lock:
            left = self._held[who] - 1
            if left:
                self._held[who] = left
            else:
                del self._held[who]


class Pool:
    """``slots`` calls accepted at once on ``workers`` threads; ``full`` is the refusal of
    one more, ``late`` what a caller should do once the deadline has passed."""

    def __init__(
        self,
        problem: Callable[[], str | None],
        *,
        name: str,
        workers: int,
        slots: int,
        deadline: float,
        full: str,
        late: str,
    ) -> None:
        self._problem = problem
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._slots = threading.BoundedSemaphore(slots)
        self._deadline = deadline
        self._full = full
        self._late = late

    def submit(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Start the call, or refuse it at once with 503."""
        problem = self._problem()
        if problem is not None:
            raise Unavailable(f"Kubernetes API unavailable: {problem}")
        if not self._slots.acquire(blocking=False):
            raise Unavailable(self._full)
        future: Future[T] = self._executor.submit(function, *args, **kwargs)
        future.add_done_callback(lambda _: self._slots.release())
        return future

    async def wait(self, future: Future[T], *, shared: bool = False) -> T:
        """The call's result, or 503 at the deadline. A call of this request alone that
        has not begun by then never does; a ``shared`` one is left to its other waiters."""
        waiting = asyncio.wrap_future(future)
        if shared:
            # A waiter that gives up leaves the outcome unread: read it here, so that
            # asyncio does not report it as lost.
            waiting.add_done_callback(_taken)
        try:
            return await asyncio.wait_for(
                asyncio.shield(waiting) if shared else waiting, self._deadline
            )
        except TimeoutError:
            raise Unavailable(
                f"Kubernetes API did not answer within {self._deadline:g} s; {self._late}"
            ) from None

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.wait(self.submit(function, *args, **kwargs))

    async def hold(
        self, shares: Shares, who: str, start: Callable[[], Future[T]], *, shared: bool = False
    ) -> T:
        """Wait for the call ``start`` starts or joins, holding one of ``who``'s shares
        until it has finished (not only until it answered, so that retries of calls that
        time out cannot pile up on a slow apiserver)."""
        shares.take(who)
        try:
            future = start()
        except BaseException:
            shares.give_back(who)
            raise
        future.add_done_callback(lambda _: shares.give_back(who))
        return await self.wait(future, shared=shared)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class WritePool(Pool):
    def __init__(
        self,
        problem: Callable[[], str | None],
        workers: int = WORKERS,
        slots: int = SLOTS,
        deadline: float = DEADLINE_SECONDS,
        per_person: int = PER_PERSON,
    ) -> None:
        super().__init__(
            problem,
            name="k8s-write",
            workers=workers,
            slots=slots,
            deadline=deadline,
            full="too many changes in flight while Kubernetes is slow; retry shortly",
            late="the change may still be applied, so read the box before retrying, or "
            "retry a create with the same Idempotency-Key",
        )
        self.shares = Shares(per_person, "changes")

    async def run_for(self, who: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function`` for the person ``who``, within their share of the slots."""
        return await self.hold(self.shares, who, lambda: self.submit(function, *args, **kwargs))
