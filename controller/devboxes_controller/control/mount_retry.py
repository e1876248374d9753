"""A box pod whose volumes its node could not read yet, retried by the kubelet at once.

When a pod lands on a node, the node's kubelet reads the claim its home volume names, and
the apiserver's node authorizer allows the read only once its graph links the pod to the
node. When the apiserver is busy (several boxes starting together) the graph lags behind
the kubelet's own watch: the read is refused ("no relationship found between node ... and
this object"), the kubelet reports ``FailedMount`` and tries the pod again only after its
back-off of 10 to 15 s, though the graph catches up within a second. A change of the
pod's annotations makes the kubelet sync the pod at once, so the leader writes one for
each such report of a box pod still waiting on its node, at most ``MAX_RETRIES`` times.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..box import naming
from ..k8s import kube
from ..k8s.kube import ApiProblem, Obj
from ..k8s.lease import LeaderElector
from ..state.cache import Informer
from ..state.metrics import METRICS
from .passes import Passes

log = logging.getLogger(__name__)

# The node authorizer's words when its graph has not yet linked the object to the node.
NOT_YET_RELATED = "no relationship found between node"
# A node whose reads stay refused is misconfigured, not lagging: past this, the kubelet's
# own back-off paces it.
MAX_RETRIES = 10


@dataclass(frozen=True)
class Retry:
    """One retry of ``pod``, for the report (an Event's version) that asks for it."""

    pod: str
    report: str
    number: int


def waiting_on_node(pod: Obj | None) -> bool:
    """Placed on a node and not yet started: the kubelet is preparing it."""
    if pod is None or not (pod.get("spec") or {}).get("nodeName"):
        return False
    return (pod.get("status") or {}).get("phase") == "Pending"


def retries(
    reports: Iterable[Obj], waiting: Callable[[str], bool], done: Mapping[str, tuple[int, str]]
) -> list[Retry]:
    """The retries ``reports`` (the kubelet's FailedMount Events) call for: one per report
    of a refused read the node authorizer would allow a moment later, of a pod that is
    still ``waiting``, none past ``MAX_RETRIES`` of a pod. ``done`` holds, by pod, the
    retries made and the report of the last."""
    found = []
    for report in reports:
        involved = report.get("involvedObject") or {}
        if involved.get("kind") != "Pod" or NOT_YET_RELATED not in str(report.get("message")):
            continue
        pod = str(involved.get("name"))
        version = str(report["metadata"].get("resourceVersion"))
        made, last = done.get(pod, (0, ""))
        if version != last and made < MAX_RETRIES and waiting(pod):
            found.append(Retry(pod, version, made + 1))
    return found


class MountRetry(Passes):
    """Retries, while this replica holds the Lease, the box pods whose volumes the node
    authorizer refused for a moment."""

    def __init__(
        self, api: kube.ApiClient, namespace: str, reports: Informer, pods: Informer,
        elector: LeaderElector,
    ) -> None:  # fmt: skip
        super().__init__("mount-retry")
        self._core = kube.apis(api).core
        self._namespace = namespace
        self._reports = reports
        self._pods = pods
        self._elector = elector
        self._done: dict[str, tuple[int, str]] = {}
        # A report can come before this replica's cache sees its pod on the node.
        reports.subscribe(on_update=self.wake)
        pods.subscribe(on_update=self.wake)
        elector.add_listener(lambda _leading: self.wake())

    def pass_once(self) -> list[Retry]:
        """Retry, while leading, the pods the kept reports call for; the retries made."""
        if not self._elector.is_leading():
            return []
        reports = self._reports.all()
        reported = {str((r.get("involvedObject") or {}).get("name")) for r in reports}
        self._done = {pod: done for pod, done in self._done.items() if pod in reported}
        made = []
        for retry in retries(reports, lambda pod: waiting_on_node(self._pods.get(pod)), self._done):
            patch = {
                "metadata": {"annotations": {naming.ANNOTATION_MOUNT_RETRY: str(retry.number)}}
            }
            try:
                kube.write(self._core.patch_namespaced_pod, retry.pod, self._namespace, patch)
            except ApiProblem as err:
                log.warning("mount not retried", extra={"pod": retry.pod, "error": err.detail})
                continue
            self._done[retry.pod] = (retry.number, retry.report)
            METRICS.mount_retries.inc()
            log.info("mount retried", extra={"pod": retry.pod, "retry": retry.number})
            made.append(retry)
        return made
