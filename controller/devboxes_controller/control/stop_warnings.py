"""The writes that warn a box's owner of its coming stop: the mark that it was warned
(once per stop, across replicas), the Event, the note the box's own terminals show, and the
webhook's receipt. When a stop is due a warning is the reconciler's; what it says is
:mod:`..box.stop_warning`'s."""

from __future__ import annotations

import logging

from ..box import naming, stop_warning
from ..k8s.kube import Conflict, Obj
from ..k8s.timestamps import format_timestamp
from ..state.metrics import METRICS
from ..state.store import BoxStore
from .events import Events
from .writer import BoxWriter

log = logging.getLogger(__name__)


class StopWarnings:
    def __init__(self, store: BoxStore, writer: BoxWriter, events: Events) -> None:
        self._store = store
        self._writer = writer
        self._events = events

    def warn_stop(self, deployment: Obj, stop: stop_warning.NextStop) -> Obj | None:
        """Mark the box warned of ``stop`` and say so in an Event; None when another
        writer changed the box in between, which the next pass looks at afresh."""
        name = naming.box_name_of(deployment) or deployment["metadata"]["name"]
        text = stop_warning.message(name, stop, self._store.clock())
        try:
            updated = self._writer.patch(
                deployment,
                {
                    "metadata": {
                        "annotations": {stop_warning.ANNOTATION_STOP_WARNED: stop.key},
                        # Once per stop, even when two replicas briefly both lead.
                        "resourceVersion": deployment["metadata"]["resourceVersion"],
                    }
                },
            )
        except Conflict:
            return None
        self._events.record(updated, "StopWarning", text)
        self._writer.annotate_pods(
            naming.object_names(name),
            {stop_warning.ANNOTATION_STOP_NOTICE: stop_warning.notice(stop, text)},
        )
        METRICS.stop_warnings.labels(reason=stop.reason).inc()
        log.info(
            "box warned of its stop",
            extra={"box": name, "reason": stop.reason, "stops_at": format_timestamp(stop.at)},
        )
        return updated

    def mark_webhook_sent(self, name: str, key: str) -> None:
        """Note that the webhook's receiver took the warning of the stop ``key``."""
        deployment = self._store.deployment(naming.object_names(name))
        if deployment is None or stop_warning.webhook_sent(deployment) == key:
            return
        self._writer.patch(
            deployment,
            {"metadata": {"annotations": {stop_warning.ANNOTATION_WEBHOOK_SENT: key}}},
        )
