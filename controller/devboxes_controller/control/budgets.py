"""The Lease holder's watch over GPU-hour budgets: about every minute, and whenever the
usage record changes, each running GPU box whose owner, or a group recorded on it, has used
up a budget of its profile (:mod:`..placement.budgets`) gets the Event ``BudgetExceeded``
once per crossing, and with ``limits.stopOverBudget`` is stopped like an idle box: replicas
0, never deleted, its home volume untouched.

Once per crossing across leaders: the budgets a box has crossed are written on its
Deployment (:data:`..box.budget_stop.ANNOTATION_BUDGETS_EXCEEDED`) over the version read,
before the Event is sent, so a new leader, or a replica that led for a moment beside the
old one, does not tell of them again. A budget whose usage has dropped below it again
leaves the record, so crossing it again is told again; a start begins afresh.
"""

from __future__ import annotations

import logging
from datetime import UTC, date

from ..box import activity, budget_stop, naming, ownership
from ..k8s.kube import ApiProblem, Obj
from ..k8s.lease import LeaderElector
from ..placement import budgets
from ..state.cache import Informer
from ..state.store import BoxStore
from .lifecycle import Lifecycle
from .passes import Passes

log = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0


class BudgetKeeper(Passes):
    def __init__(
        self, store: BoxStore, lifecycle: Lifecycle, elector: LeaderElector, usage: Informer
    ) -> None:
        super().__init__("budgets", RESYNC_SECONDS)
        self._store = store
        self._lifecycle = lifecycle
        self._elector = elector
        self._limits = store.settings.limits
        elector.add_listener(lambda _leading: self.wake())
        if self._limits.has_budgets:
            # The record changes at every usage pass: a crossing is seen right after it.
            usage.subscribe(on_update=self.wake)

    def pass_once(self) -> list[str]:
        """While leading, the boxes found over a budget (each told once, and stopped with
        ``stopOverBudget``)."""
        if (
            not self._limits.has_budgets
            or not self._elector.is_leading()
            or not self._store.synced()
            or not self._store.usage.synced()
        ):
            return []
        today = self._store.clock().astimezone(UTC).date()
        tally = budgets.Tally(self._store.usage.rows(budgets.first_day(self._limits, today)))
        return [
            name
            for deployment in self._store.deployments()
            if (name := naming.box_name_of(deployment)) is not None
            and self._keep(name, deployment, tally, today)
        ]

    def _keep(self, name: str, deployment: Obj, tally: budgets.Tally, today: date) -> bool:
        """Whether the running box is over a budget: the budgets newly crossed are told,
        and with ``stopOverBudget`` the box is stopped."""
        if naming.is_stopped(deployment) or deployment["metadata"].get("deletionTimestamp"):
            return False
        person = ownership.person(ownership.owner_of(deployment))
        groups = ownership.groups_of(deployment)
        spent = budgets.used_up(
            self._limits, tally, person, groups, activity.gpu_profile(deployment), today
        )
        told = budget_stop.exceeded(deployment)
        crossed = frozenset(s.key for s in spent)
        if crossed != told:
            updated = self._lifecycle.note_budgets(deployment, crossed)
            if updated is None:
                return bool(spent)  # changed in between: the next pass looks again
            for found in spent:
                if found.key not in told:
                    self._lifecycle.record(updated, "BudgetExceeded", found.sentence(own=False))
                    log.info("box over budget", extra={"box": name, "budget": found.key})
        if spent and self._limits.stop_over_budget:
            try:
                self._lifecycle.stop_over_budget(name, spent[0].stopped())
            except ApiProblem as err:
                log.warning("box over budget not stopped", extra={"box": name, "error": err})
        return bool(spent)
