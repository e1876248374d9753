"""The usage record as this replica sees it: every day's rows, read from the watch of the
usage ConfigMaps, each ConfigMap parsed once per version.

A write of the leader's own is taken at once, before its watch event arrives, so that
the next pass starts from the cursors it wrote.
"""

from __future__ import annotations

import threading
from datetime import date

from ..k8s.kube import Obj, resource_version
from ..placement import usage_ledger as ledger
from ..placement.usage_ledger import Row
from ..placement.usage_report import DayRows
from .cache import Informer


class History:
    def __init__(self, informer: Informer) -> None:
        self._informer = informer
        self._lock = threading.Lock()
        # ConfigMap name: (version, day, rows).
        self._parsed: dict[str, tuple[int, date, dict[str, Row]]] = {}
        self._own: dict[str, Obj] = {}

    def synced(self) -> bool:
        return self._informer.synced.is_set()

    def configmaps(self) -> dict[str, Obj]:
        """Every usage ConfigMap by name, this replica's own writes included."""
        found = {str(c["metadata"]["name"]): c for c in self._informer.all()}
        with self._lock:
            for name, written in list(self._own.items()):
                seen = found.get(name)
                if seen is None or resource_version(seen) < resource_version(written):
                    found[name] = written
                else:
                    del self._own[name]
        return found

    def took(self, written: Obj) -> None:
        with self._lock:
            self._own[str(written["metadata"]["name"])] = written

    def forgot(self, name: str) -> None:
        with self._lock:
            self._own.pop(name, None)

    def rows(self, since: date | None = None) -> DayRows:
        """The rows of every day from ``since`` on, by day and key."""
        configmaps = self.configmaps()
        days: dict[date, dict[str, Row]] = {}
        with self._lock:
            for name in set(self._parsed) - set(configmaps):
                del self._parsed[name]
            for name, configmap in configmaps.items():
                day = ledger.day_of_configmap(name)
                # Days before the span are never parsed: what a replica keeps parsed
                # grows with the spans asked for, not with the retention.
                if day is None or (since is not None and day < since):
                    continue
                version = resource_version(configmap)
                kept = self._parsed.get(name)
                if kept is None or kept[0] != version:
                    kept = self._parsed[name] = (version, day, ledger.rows_of(configmap))
                days.setdefault(day, {}).update(kept[2])
        return days
