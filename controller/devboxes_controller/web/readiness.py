"""What this replica may do right now, from the apiserver probe and the watch caches.

- serve reads: always (from memory, possibly stale, which ``/ready`` then says);
- accept writes: while the apiserver answers and the caches have loaded once;
- report ready and lead: while the apiserver answers, takes this replica's writes (they
  have not all failed for a sustained time) and every watch is established, the ended
  dashboard sessions' included.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..k8s.probe import ApiserverProbe
from ..k8s.write_health import WRITES
from ..state.ended_sessions import SharedEndedSessions
from ..state.store import BoxStore


@dataclass(frozen=True)
class Readiness:
    probe: ApiserverProbe
    store: BoxStore
    ended: SharedEndedSessions

    def write_problem(self) -> str | None:
        if not self.store.synced():
            return "the controller is still loading its caches"
        return self.probe.problem()

    def problem(self) -> str | None:
        """Why this replica is not ready, or None."""
        stale = self.store.stale_kinds()
        if not self.ended.informer.healthy.is_set():
            stale.append(self.ended.informer.kind)
        if not (self.store.synced() and self.ended.synced()):
            return "waiting for the Kubernetes caches to sync"
        problem = self.probe.problem() or WRITES.problem()
        if problem is not None:
            return problem
        if stale:
            return f"reconnecting the watches of {', '.join(stale)}"
        return None
