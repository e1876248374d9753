"""Kubernetes Events on boxes' Deployments: what the controller did to a box, told where
``kubectl describe`` and the box's status read it.

Sent off the request path, one at a time: a slow apiserver delays the Event, never the
answer, and an Event that cannot be sent is logged and dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from ..box import naming
from ..k8s import kube
from ..k8s.kube import ApiProblem, Obj
from ..k8s.timestamps import format_timestamp

log = logging.getLogger(__name__)


class Events:
    def __init__(self, api: kube.Apis, namespace: str, clock: Callable[[], datetime]) -> None:
        self._core = api.core
        self._namespace = namespace
        self._clock = clock
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k8s-events")

    def stop(self) -> None:
        self._sender.shutdown(wait=False)

    def record(self, deployment: Obj, reason: str, message: str) -> None:
        """An Event on the box's Deployment, sent in the background."""
        metadata = deployment["metadata"]
        now = format_timestamp(self._clock())
        body = {
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": self._namespace},
            "involvedObject": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": metadata["name"],
                "namespace": self._namespace,
                "uid": metadata.get("uid"),
            },
            "reason": reason,
            "message": message,
            "type": "Normal",
            "source": {"component": naming.MANAGER},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

        def send() -> None:
            try:
                # Not a write of the box: Events are left out of the write count.
                kube.call(self._core.create_namespaced_event, self._namespace, body)
            except ApiProblem as err:
                log.warning("event not recorded", extra={"reason": reason, "error": err.detail})

        self._sender.submit(send)
