"""What each devbox kernel start is doing, for the sidebar to show while the user waits.

The provisioner runs in the Jupyter server's process, so a process-wide registry is
enough; the server extension publishes it with the box list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from devboxes_jupyter.models import KernelProgress

# The phase of a start that ended without a kernel; it stays listed until dismissed.
FAILED = "failed"


class ProgressRegistry:
    """The latest step of every devbox kernel start, told to listeners on each change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, KernelProgress] = {}
        # When each start began and when its message last changed (monotonic seconds).
        self._began: dict[str, float] = {}
        self._since: dict[str, float] = {}
        # The cluster each kernel's box is on, when the kernel pinned one.
        self._clusters: dict[str, str | None] = {}
        # Called after every change, from whichever thread made it.
        self.listeners: list[Callable[[], None]] = []

    def update(
        self,
        kernel_id: str,
        box: str,
        profile: str,
        phase: str,
        message: str,
        cluster: str | None = None,
    ) -> None:
        now = time.monotonic()
        with self._lock:
            self._began.setdefault(kernel_id, now)
            self._clusters[kernel_id] = cluster
            known = self._items.get(kernel_id)
            if known is None or known.message != message:
                self._since[kernel_id] = now
            self._items[kernel_id] = KernelProgress(
                kernel_id=kernel_id,
                box=box,
                profile=profile,
                phase=phase,
                message=message,
                updated=time.time(),
            )
        self._notify()

    def forget(self, kernel_id: str) -> None:
        with self._lock:
            known = self._items.pop(kernel_id, None) is not None
            self._began.pop(kernel_id, None)
            self._since.pop(kernel_id, None)
            self._clusters.pop(kernel_id, None)
        if known:
            self._notify()

    def dismiss(self, kernel_id: str) -> bool:
        """Forget a failed start the user has read; False when there is no such failure.

        Starts still in progress stay: they end by themselves, as running or failed.
        """
        with self._lock:
            known = self._items.get(kernel_id)
            if known is None or known.phase != FAILED:
                return False
            del self._items[kernel_id]
            self._began.pop(kernel_id, None)
            self._since.pop(kernel_id, None)
            self._clusters.pop(kernel_id, None)
        self._notify()
        return True

    def _notify(self) -> None:
        for listener in list(self.listeners):
            listener()

    def cluster_of(self, kernel_id: str) -> str | None:
        """The cluster the kernel's box is on, when the kernel pinned one."""
        with self._lock:
            return self._clusters.get(kernel_id)

    def boxes_in_use(self) -> set[tuple[str | None, str]]:
        """``(cluster, box)`` of every kernel starting or running (not failed); the
        cluster is None for a kernel that pinned none."""
        with self._lock:
            return {
                (self._clusters.get(kernel_id), item.box)
                for kernel_id, item in self._items.items()
                if item.phase != FAILED
            }

    def snapshot(self) -> list[KernelProgress]:
        """Every start, with its seconds as of now."""
        now = time.monotonic()
        with self._lock:
            return [
                item.model_copy(
                    update={
                        "step_seconds": now - self._since[kernel_id],
                        "total_seconds": now - self._began[kernel_id],
                    }
                )
                for kernel_id, item in self._items.items()
            ]


REGISTRY = ProgressRegistry()
