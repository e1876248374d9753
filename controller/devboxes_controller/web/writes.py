"""Kubernetes writes on their own bounded pool, with a deadline per request.

Reads are answered from memory on the event loop and must never wait behind a write
that is stuck on a frozen apiserver. Writes therefore run on a small pool of their own;
a request gets a slot or an immediate 503, and a write that has not finished by the
deadline answers 503 with Retry-After while its worker runs on to its own call timeouts.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ..k8s.kube import Unavailable

T = TypeVar("T")

WORKERS = 8
# Writes accepted at once, running or queued; more are refused rather than queued behind
# an apiserver that is not answering.
SLOTS = 32
DEADLINE_SECONDS = 4.5


class WritePool:
    def __init__(
        self,
        problem: Callable[[], str | None],
        workers: int = WORKERS,
        slots: int = SLOTS,
        deadline: float = DEADLINE_SECONDS,
    ) -> None:
        self._problem = problem
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="k8s-write")
        self._slots = threading.BoundedSemaphore(slots)
        self._deadline = deadline

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        problem = self._problem()
        if problem is not None:
            raise Unavailable(f"Kubernetes API unavailable: {problem}")
        if not self._slots.acquire(blocking=False):
            raise Unavailable("too many changes in flight while Kubernetes is slow; retry shortly")
        future: Future[T] = self._executor.submit(function, *args, **kwargs)
        future.add_done_callback(lambda _: self._slots.release())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self._deadline)
        except TimeoutError:
            raise Unavailable(
                f"Kubernetes API did not answer within {self._deadline:g} s; the change may "
                "still be applied, so read the box before retrying, or retry a create with "
                "the same Idempotency-Key"
            ) from None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
