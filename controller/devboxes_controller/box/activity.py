"""Box activity: agent credentials, what a report means, and when an idle box stops.

Pure functions. An agent proves which box it reports for with a credential derived from
the controller's key, the box name and the Deployment's uid, so one box's credential is
worthless for any other box (or for a box re-created under the same name), and a new key
invalidates every credential at once. What the reports say is kept in one annotation of
the Deployment, so every replica, and the leader that stops idle boxes, sees the same.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from devboxes_sdk.models import Activity, ActivityReport

from ..config.boxes import ACTIVITY_SIDECAR
from ..config.settings import Settings
from ..k8s.kube import Obj
from ..k8s.timestamps import format_timestamp, parse_timestamp
from . import naming, template

ANNOTATION_ACTIVITY = naming.ANNOTATION_PREFIX + "activity"
# Which key made the credential last written to the box's Secret, as :func:`key_id`.
ANNOTATION_CREDENTIAL_KEY = naming.ANNOTATION_PREFIX + "activity-key"
# Written when a box is stopped for idleness: the idle window in minutes.
ANNOTATION_IDLE_STOPPED = naming.ANNOTATION_PREFIX + "idle-stopped-after"
# A box whose agent has not reported for this long counts as unknown, never as idle.
REPORT_STALE = timedelta(minutes=5)
# An unchanged state is written back at most this often, to keep the record fresh.
HEARTBEAT = timedelta(minutes=2)
_KEY_CONTEXT = b"devboxes activity credentials v1"
_KEY_ID_CONTEXT = b"devboxes activity key id v1"


def activity_key(operator_token: str) -> bytes:
    """The key of every agent credential; rotating the operator token rotates it."""
    return hmac.new(operator_token.encode(), _KEY_CONTEXT, hashlib.sha256).digest()


def credential(key: bytes, box: str, uid: str) -> str:
    digest = hmac.new(key, f"{box}\n{uid}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def key_id(key: bytes) -> str:
    """Names a key without giving it away."""
    return hmac.new(key, _KEY_ID_CONTEXT, hashlib.sha256).hexdigest()[:16]


def credential_outdated(deployment: Obj, key: bytes) -> bool:
    """Whether the box runs an agent whose credential was not written with ``key``: the
    operator token was rotated since, or the credential was never confirmed written."""
    if ACTIVITY_SIDECAR not in template.container_names(deployment):
        return False
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_CREDENTIAL_KEY) != key_id(key)


def credential_matches(key: bytes, deployment: Obj, presented: str) -> bool:
    box = naming.box_name_of(deployment)
    uid = (deployment.get("metadata") or {}).get("uid")
    if box is None or not isinstance(uid, str):
        return False
    return hmac.compare_digest(credential(key, box, uid).encode(), presented.encode())


@dataclass(frozen=True)
class Record:
    """The last report that was written back: when, since when the box is idle, and the
    GPU utilization it gave (percent; None for a CPU box or when unknown)."""

    reported_at: datetime
    idle_since: datetime | None
    gpu_utilization: float | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "reportedAt": format_timestamp(self.reported_at),
            "idleSince": (format_timestamp(self.idle_since) if self.idle_since else None),
        }
        if self.gpu_utilization is not None:
            data["gpuUtilization"] = self.gpu_utilization
        return naming.canonical_json(data)


def recorded(deployment: Obj) -> Record | None:
    """The box's activity record, or None when there is none or it cannot be read."""
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    try:
        data: Any = json.loads(annotations.get(ANNOTATION_ACTIVITY) or "null")
        if not isinstance(data, dict):
            return None
        idle = data.get("idleSince")
        utilization = data.get("gpuUtilization")
        return Record(
            reported_at=parse_timestamp(str(data["reportedAt"])),
            idle_since=parse_timestamp(str(idle)) if idle else None,
            gpu_utilization=(
                float(utilization)
                if isinstance(utilization, int | float) and not isinstance(utilization, bool)
                else None
            ),
        )
    except (KeyError, ValueError):
        return None


def gpu_profile(deployment: Obj) -> str | None:
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    profile = annotations.get(naming.ANNOTATION_GPU_PROFILE)
    return profile if isinstance(profile, str) and profile else None


def is_idle(report: ActivityReport, gpu_box: bool, threshold: int) -> bool:
    """No session, no busy kernel and, on a GPU box, a known utilization under the
    threshold: an unknown utilization is never taken for an idle GPU."""
    if report.ssh_sessions or report.busy_kernels:
        return False
    if not gpu_box:
        return True
    return report.gpu_utilization is not None and report.gpu_utilization < threshold


def next_record(
    previous: Record | None, idle: bool, now: datetime, gpu_utilization: float | None = None
) -> Record:
    if not idle:
        return Record(reported_at=now, idle_since=None, gpu_utilization=gpu_utilization)
    fresh = previous is not None and now - previous.reported_at <= REPORT_STALE
    # A gap in the reports is time nobody watched: idleness counts again from now.
    since = previous.idle_since if fresh and previous and previous.idle_since else now
    return Record(reported_at=now, idle_since=since, gpu_utilization=gpu_utilization)


def gpu_busy(record: Record, threshold: int) -> bool | None:
    """Whether the record's GPU was busy (at or above the idle threshold); None unknown."""
    if record.gpu_utilization is None:
        return None
    return record.gpu_utilization >= threshold


def needs_write(previous: Record | None, new: Record, now: datetime, threshold: int) -> bool:
    """A change of idleness, or of whether the GPU is busy (which usage counts), is
    written at once; an unchanged record every ``HEARTBEAT``."""
    return (
        previous is None
        or previous.idle_since != new.idle_since
        or gpu_busy(previous, threshold) != gpu_busy(new, threshold)
        or now - previous.reported_at >= HEARTBEAT
    )


def window(deployment: Obj, settings: Settings) -> timedelta | None:
    minutes = settings.idle.window(gpu_profile(deployment))
    return None if minutes is None else timedelta(minutes=minutes)


def idle_stop_at(deployment: Obj, settings: Settings, now: datetime) -> datetime | None:
    """When a running box is to be stopped for idleness, or None while it is not idle
    (or its activity is unknown, or idle boxes of its kind are never stopped)."""
    record = recorded(deployment)
    limit = window(deployment, settings)
    if record is None or record.idle_since is None or limit is None:
        return None
    if now - record.reported_at > REPORT_STALE:
        return None
    return record.idle_since + limit


def of(deployment: Obj, settings: Settings, now: datetime) -> Activity:
    """The activity of a running box as the API shows it."""
    record = recorded(deployment)
    if record is None or now - record.reported_at > REPORT_STALE:
        return Activity(state="unknown")
    if record.idle_since is None:
        return Activity(state="active")
    return Activity(
        state="idle",
        idle_since=record.idle_since,
        stops_at=idle_stop_at(deployment, settings, now),
    )


def stopped_message(deployment: Obj) -> str | None:
    """The message of a box stopped for idleness."""
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    minutes = annotations.get(ANNOTATION_IDLE_STOPPED)
    if not isinstance(minutes, str) or not minutes:
        return None
    return f"Stopped after {minutes} min idle; start to continue."


def minutes_text(limit: timedelta) -> str:
    """``60`` for an hour, ``0.5`` for thirty seconds."""
    return f"{limit.total_seconds() / 60:g}"
