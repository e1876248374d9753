"""A thread of passes: one pass when something wakes it, and, given a resync period, at
least that often, so that a change no listener reports is still acted on. A pass that
fails is logged and the next one goes on; passes never overlap."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod

log = logging.getLogger(__name__)


class Passes(ABC):
    """Runs :meth:`pass_once` on its own thread named ``name``: at start, when
    :meth:`wake` is called, and every ``resync_seconds`` when given."""

    def __init__(self, name: str, resync_seconds: float | None = None) -> None:
        self._resync_seconds = resync_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)

    @abstractmethod
    def pass_once(self) -> object:
        """One pass; what it did, for its callers and tests."""

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.pass_once()
            except Exception:
                log.exception("%s pass failed", self._thread.name)
            self._wake.wait(self._resync_seconds)
