"""Level-triggered reconciliation, run only by the Lease holder: TTL and idle expiry and
the warnings before them, repair, renewing activity credentials after a key rotation,
and rebuilding stopped boxes for the release.

Each pass reads the caches, stops boxes whose deadline has passed and recreates a
missing claim, Service (of a running box) or DRA ResourceClaimTemplate from the
Deployment's pinned snapshot. A stopped box holds no Service: one left from a release
that kept them is removed, its node port recorded for the next start. Passes are idempotent.
A box that changes is reconciled alone, at once; every box is reconciled when the next
deadline arrives and on a short resync. What a pass learns from a Deployment (its pinned
spec, whether its template is the release's) is kept until the Deployment changes, so a
pass over thousands of stopped boxes costs little more than reading them.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from ..box import activity, naming, ownership, status, stop_warning
from ..box.spec import BoxSpec, spec_from_deployment
from ..box.stop_warning import NextStop
from ..config.catalog import SnapshotError
from ..k8s.kube import ApiProblem, Obj
from ..k8s.lease import LeaderElector
from ..k8s.timestamps import parse_timestamp
from ..state.metrics import METRICS
from ..state.store import BoxStore
from .lifecycle import Lifecycle
from .webhook import Delivery, Webhook

log = logging.getLogger(__name__)

RESYNC_SECONDS = 5.0
# A create in flight on another replica has a Deployment but not yet its claim or Service.
REPAIR_GRACE = timedelta(seconds=5)


class Reconciler:
    def __init__(self, store: BoxStore, lifecycle: Lifecycle, elector: LeaderElector) -> None:
        self._store = store
        self._lifecycle = lifecycle
        self._elector = elector
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reconciler", daemon=True)
        # Boxes changed since the last pass, and when the next pass over every box is due
        # (monotonic seconds; 0: at once).
        self._changed: set[str] = set()
        self._changed_lock = threading.Lock()
        self._full_pass_at = 0.0
        self._deadlines: dict[str, datetime] = {}
        # By box: the Deployment version these were read from.
        self._specs: dict[str, tuple[str, BoxSpec]] = {}
        self._release_current: dict[str, str] = {}
        hook = lifecycle.settings.stop_warnings.webhook
        self._webhook = (
            None
            if hook is None
            else Webhook(
                hook, lifecycle.warnings.mark_webhook_sent, elector.is_leading, lifecycle.clock
            )
        )
        store.add_listener(self._box_changed)
        elector.add_listener(self.leadership_changed)

    def start(self) -> None:
        if self._webhook is not None:
            self._webhook.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
        if self._webhook is not None:
            self._webhook.stop()

    def leadership_changed(self, leading: bool) -> None:
        METRICS.leader.set(1 if leading else 0)
        self._full_pass_at = 0.0
        self._wake.set()

    def _box_changed(self, name: str) -> None:
        with self._changed_lock:
            self._changed.add(name)
        self._wake.set()

    def _take_changed(self) -> set[str]:
        with self._changed_lock:
            changed, self._changed = self._changed, set()
        return changed

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            timeout = RESYNC_SECONDS
            if self._elector.is_leading():
                if time.monotonic() >= self._full_pass_at:
                    # Set first: a leadership change during the pass asks for another.
                    self._full_pass_at = time.monotonic() + RESYNC_SECONDS
                    self._take_changed()
                    self.reconcile_once()
                else:
                    self.reconcile_boxes(self._take_changed())
                timeout = self._full_pass_at - time.monotonic()
                next_deadline = min(self._deadlines.values(), default=None)
                if next_deadline is not None:
                    seconds = (next_deadline - self._lifecycle.clock()).total_seconds()
                    timeout = min(timeout, seconds)
                timeout = max(0.05, timeout)
            self._wake.wait(timeout)

    def reconcile_once(self) -> datetime | None:
        """One pass over every box; returns the earliest deadline still ahead."""
        deployments = self._store.deployments()
        present = {naming.box_name_of(d) for d in deployments}
        for kept in (self._deadlines, self._specs, self._release_current):
            for name in kept.keys() - present:
                kept.pop(name, None)
        self._reconcile(deployments)
        return min(self._deadlines.values(), default=None)

    def reconcile_boxes(self, names: set[str]) -> None:
        """One pass over these boxes only."""
        found = [
            (name, self._store.deployment(naming.object_names(name))) for name in sorted(names)
        ]
        for name, deployment in found:
            if deployment is None:
                self._deadlines.pop(name, None)
        self._reconcile([d for _, d in found if d is not None])

    def _reconcile(self, deployments: list[Obj]) -> None:
        now = self._lifecycle.clock()
        for deployment in deployments:
            # Leadership can lapse during a pass (a renewal missed its deadline): from
            # then on another replica may act, so this one must not.
            if not self._elector.is_leading():
                return
            name = naming.box_name_of(deployment)
            try:
                deadline = self._reconcile_box(deployment, now)
            except ApiProblem as err:
                log.warning("reconcile failed", extra={"box": name, "error": err.detail})
                continue
            except SnapshotError as err:
                # One hand-edited Deployment must not stop expiry and repair of every other box.
                log.warning("box annotations unreadable", extra={"box": name, "error": str(err)})
                continue
            if name is None:
                continue
            if deadline is None:
                self._deadlines.pop(name, None)
            else:
                self._deadlines[name] = deadline

    def _spec(self, name: str, deployment: Obj) -> BoxSpec:
        version = str(deployment["metadata"].get("resourceVersion"))
        known = self._specs.get(name)
        if known is not None and known[0] == version:
            return known[1]
        spec = spec_from_deployment(deployment)
        self._specs[name] = (version, spec)
        return spec

    def _follow_release(self, name: str, deployment: Obj) -> None:
        """Rebuild a stopped box's template for the release, reading each version of its
        Deployment once."""
        version = str(deployment["metadata"].get("resourceVersion"))
        if self._release_current.get(name) == version:
            return
        if self._lifecycle.rebuild_if_changed(deployment) is None:
            self._release_current[name] = version

    def _reconcile_box(self, deployment: Obj, now: datetime) -> datetime | None:
        name = naming.box_name_of(deployment)
        if name is None or deployment["metadata"].get("deletionTimestamp"):
            return None
        running = not naming.is_stopped(deployment)
        annotations = deployment["metadata"].get("annotations") or {}
        # A box waiting in line for a device has not begun its time to live.
        ttl_runs = running
        if running and naming.ANNOTATION_WAITING_SINCE in annotations:
            objects = self._store.objects(naming.object_names(name))
            ttl_runs = objects is not None and not status.waits_for_node(objects)
            if ttl_runs:
                deployment = self._lifecycle.begin_time_to_live(name, deployment, now)
        spec = self._spec(name, deployment)
        if ttl_runs and spec.expires_at <= now:
            self._lifecycle.stop_box(name, expired_at=spec.expires_at)
            METRICS.expired.inc()
            log.info("box expired", extra={"box": name})
            return None
        idle_stop = (
            activity.idle_stop_at(deployment, self._lifecycle.settings, now) if running else None
        )
        limit = activity.window(deployment, self._lifecycle.settings)
        if idle_stop is not None and limit is not None and idle_stop <= now:
            self._lifecycle.stop_idle(name, limit)
            return None
        stop = stop_warning.next_stop(deployment, self._lifecycle.settings, now)
        deployment = self._warn(name, deployment, stop, now)
        created = parse_timestamp(deployment["metadata"]["creationTimestamp"])
        if now - created >= REPAIR_GRACE:
            self._repair(name, spec, deployment, running)
            if activity.credential_outdated(deployment, self._lifecycle.activity_key):
                self._lifecycle.renew_activity_secret(name, deployment)
        if not running:
            self._release_service(name, deployment, now)
            # A stopped box has no pod to disturb: it follows the release at once.
            self._follow_release(name, deployment)
            return None
        deadlines = [spec.expires_at] if ttl_runs else []
        if idle_stop is not None:
            deadlines.append(idle_stop)
        if stop is not None and stop_warning.warned(deployment) != stop.key:
            moment = stop_warning.warn_at(stop, self._lifecycle.settings)
            if moment is not None:
                deadlines.append(moment)
        return min(deadlines, default=None)

    def _warn(self, name: str, deployment: Obj, stop: NextStop | None, now: datetime) -> Obj:
        """Warn of the box's next stop once it is due, and have the webhook told until its
        receiver takes it; the Deployment as it is afterwards."""
        settings = self._lifecycle.settings
        if stop_warning.due(deployment, stop, settings, now):
            assert stop is not None
            deployment = self._lifecycle.warnings.warn_stop(deployment, stop) or deployment
        if (
            self._webhook is not None
            and stop is not None
            and stop.at > now
            and stop_warning.warned(deployment) == stop.key
            and stop_warning.webhook_sent(deployment) != stop.key
        ):
            text = stop_warning.message(name, stop, now)
            owner = ownership.owner_of(deployment)
            body = stop_warning.webhook_body(name, owner, stop, text)
            self._webhook.send(Delivery(name, stop.key, body, stop.at))
        return deployment

    def _repair(self, name: str, spec: BoxSpec, deployment: Obj, running: bool) -> None:
        # Only what this pass created counts: until the watch delivers an object written
        # by the pass before, the cache still misses it, and recreating it finds it there.
        repaired = []
        if (
            self._store.claim(spec.names) is None
            and self._lifecycle.still_present(deployment)
            and self._lifecycle.ensure_storage(spec)
        ):
            repaired.append("PersistentVolumeClaim")
        if running and self._lifecycle.ensure_service(spec, deployment):
            repaired.append("Service")
        if self._lifecycle.ensure_claim_template(spec, deployment):
            repaired.append("ResourceClaimTemplate")
        for kind in repaired:
            METRICS.repairs.labels(kind).inc()
        if repaired:
            self._lifecycle.record(
                deployment, "Repaired", f"Recreated missing {', '.join(repaired)}"
            )
            log.info("box repaired", extra={"box": name, "objects": repaired})

    def _release_service(self, name: str, deployment: Obj, now: datetime) -> None:
        """Remove the Service of a stopped box, as a stop does: boxes stopped by a
        release that kept their Services give their node ports back."""
        names = naming.object_names(name)
        service = self._store.service(names)
        if service is None or service["metadata"].get("deletionTimestamp"):
            return
        made = service["metadata"].get("creationTimestamp")
        # A start makes the Service just before it scales the box up.
        if made is None or now - parse_timestamp(made) < REPAIR_GRACE:
            return
        current = self._store.deployment(names)
        if current is None or not naming.is_stopped(current):
            return
        port = self._lifecycle.keep_ssh_port(names, current)
        if self._lifecycle.release_service(names):
            kept = f"; node port {port} is kept for its next start" if port else ""
            self._lifecycle.record(
                current, "ServiceRemoved", f"Removed the SSH Service of the stopped box{kept}"
            )
            log.info("stopped box's service removed", extra={"box": name, "node_port": port})
