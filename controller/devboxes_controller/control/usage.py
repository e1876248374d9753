"""The leader's recording of usage: every ``usage.recordSeconds``, what each GPU box held
since the last pass is added to its row of the day (:mod:`.ledger`) and written to the
day's ConfigMaps in the box namespace, ``devboxes-usage-YYYY-MM-DD-S``.

Each ConfigMap is replaced over the version the pass read, so a write that raced another
(a leader that had just lost its Lease) is refused and the next pass counts again from
the cursors that were written: nothing is counted twice. The days a span touches are
written oldest first, and a refused write ends the pass, so a box's latest row is always
its cursor. Days older than ``usage.retentionDays`` are deleted.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta

from ..box import naming
from ..k8s import kube
from ..k8s.kube import ApiClient, ApiProblem, NotFound, Obj
from ..k8s.lease import LeaderElector
from ..placement import usage_ledger as ledger
from ..placement.usage_ledger import Held, Row
from ..state.metrics import METRICS
from ..state.store import BoxStore
from ..state.usage import History
from .passes import Passes

log = logging.getLogger(__name__)

# A box's cursor is looked for this many days back; a box seen first or again after
# longer starts counting at the pass that sees it.
LOOKBACK_DAYS = 2


@dataclass
class Recorded:
    """What one pass did."""

    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    refused: str | None = None


class Recorder(Passes):
    def __init__(
        self, store: BoxStore, history: History, api: ApiClient, elector: LeaderElector
    ) -> None:
        settings = store.settings
        super().__init__("usage", resync_seconds=settings.usage.record_seconds)
        self._store = store
        self._history = history
        self._core = kube.apis(api).core
        self._elector = elector
        self._namespace = settings.namespace
        self._threshold = settings.idle.gpu_utilization_percent
        self._retention = settings.usage.retention_days
        elector.add_listener(lambda _leading: self.wake())

    def pass_once(self) -> Recorded:
        if not self._elector.is_leading() or not self._history.synced() or not self._store.synced():
            return Recorded()
        return self.record()

    def record(self) -> Recorded:
        """One pass, as the leader."""
        moment = self._store.clock()
        now = int(moment.timestamp())
        today = ledger.day_of(now)
        configmaps = self._history.configmaps()
        recent = [
            c
            for name, c in configmaps.items()
            if (day := ledger.day_of_configmap(name)) is not None
            and day >= today - timedelta(days=LOOKBACK_DAYS)
        ]
        cursors = ledger.cursors(recent)
        seen_now: dict[str, ledger.Seen] = {}
        for deployment in self._store.deployments():
            box = naming.box_name_of(deployment)
            if box is None:
                continue
            pods = self._store.pods(naming.object_names(box))
            seen = ledger.seen(deployment, pods, self._threshold, moment)
            if seen is not None:
                seen_now[seen.key] = seen
        changes: dict[str, dict[str, Row]] = defaultdict(dict)
        before: dict[str, dict[str, Row]] = defaultdict(dict)
        for key in set(cursors) | set(seen_now):
            latest, by_day = cursors.get(key, (None, {}))
            for day, row in ledger.advance(latest, by_day, seen_now.get(key), now).items():
                name = ledger.configmap_name(day, ledger.shard_of(key))
                changes[name][key] = row
                if day in by_day:
                    before[name][key] = by_day[day]
        done = Recorded()
        for name in sorted(changes):
            if not self._elector.is_leading():
                done.refused = "lost the lease"
                break
            try:
                self._write(name, configmaps.get(name), changes[name])
            except ApiProblem as err:
                done.refused = err.detail
                log.warning("usage not recorded", extra={"configmap": name, "error": err.detail})
                break
            done.written.append(name)
            _count(changes[name], before[name])
        _waiting(seen_now, [p.name for p in self._store.settings.gpu.profiles])
        done.deleted = self._forget(configmaps, today)
        return done

    def _write(self, name: str, found: Obj | None, rows: Mapping[str, Row]) -> None:
        day = ledger.day_of_configmap(name)
        data = dict((found or {}).get("data") or {})
        data.update({key: row.to_json() for key, row in rows.items()})
        body: Obj = {
            "metadata": {
                "name": name,
                "namespace": self._namespace,
                "labels": {**ledger.LABELS, ledger.LABEL_DAY: str(day)},
            },
            "data": data,
        }
        if found is None:
            written = kube.write(self._core.create_namespaced_config_map, self._namespace, body)
        else:
            body["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
            written = kube.write(
                self._core.replace_namespaced_config_map, name, self._namespace, body
            )
        self._history.took(written)

    def _forget(self, configmaps: Mapping[str, Obj], today: date) -> list[str]:
        oldest = today - timedelta(days=self._retention)
        deleted = []
        for name in sorted(configmaps):
            day = ledger.day_of_configmap(name)
            if day is None or day >= oldest:
                continue
            try:
                kube.write(self._core.delete_namespaced_config_map, name, self._namespace)
            except NotFound:
                pass
            except ApiProblem as err:
                log.warning("old usage not deleted", extra={"configmap": name, "error": err.detail})
                continue
            self._history.forgot(name)
            deleted.append(name)
        return deleted


def _count(rows: Mapping[str, Row], before: Mapping[str, Row]) -> None:
    """The counters of what a written ConfigMap added."""
    for key, row in rows.items():
        old = before.get(key)
        for held in (Held.BUSY, Held.IDLE, Held.UNKNOWN):
            added = getattr(row, held.value) - (getattr(old, held.value) if old else 0)
            if added > 0:
                METRICS.usage_device_seconds.labels(row.owner, row.profile, held.value).inc(added)
                for group in row.groups:
                    METRICS.usage_group_device_seconds.labels(group, row.profile, held.value).inc(
                        added
                    )
        waited = row.waiting - (old.waiting if old else 0)
        if waited > 0:
            METRICS.usage_waiting_seconds.labels(row.owner, row.profile).inc(waited)


def _waiting(seen: Mapping[str, ledger.Seen], profiles: list[str]) -> None:
    people: dict[str, set[str]] = {profile: set() for profile in profiles}
    for box in seen.values():
        if box.held is Held.WAITING and box.profile in people:
            people[box.profile].add(box.owner)
    for profile, waiting in people.items():
        METRICS.usage_people_waiting.labels(profile).set(len(waiting))
