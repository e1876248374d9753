"""Warnings before the stops the controller enforces: which stop of a running box comes
next, when its owner is told, and what they read.

Pure functions. A running box stops at the end of its time to live (once it has its
device: a wait in line does not count) or at the end of its idle window, whichever
comes first. From ``stopWarnings.leadMinutes`` before that moment the box carries a
warning; the leader marks the Deployment once per stop (:data:`ANNOTATION_STOP_WARNED`
holds the stop's :attr:`NextStop.key`), so the Event, the SSH sessions' line (through the
controller's tunnel, and inside the box, :data:`ANNOTATION_STOP_NOTICE`) and the webhook
are sent once per stop, and an extend or new activity, which moves the stop,
leaves nothing more to send for the old one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from devboxes_sdk.models import StopReason, StopWarning

from ..config.settings import Settings
from ..k8s.kube import Obj
from ..k8s.timestamps import format_timestamp, parse_timestamp, time_of_day_label
from . import activity, naming

# The stop (its key) whose warning the leader has sent: Event, sessions' line, webhook.
ANNOTATION_STOP_WARNED = naming.ANNOTATION_PREFIX + "stop-warned"
# The stop (its key) whose webhook the receiver has acknowledged.
ANNOTATION_WEBHOOK_SENT = naming.ANNOTATION_PREFIX + "stop-warning-sent"
# On the box's pod: "<stop key>\n<message>" of the last warning, which the kubelet hands
# to the main container, where every open session is shown it once.
ANNOTATION_STOP_NOTICE = naming.ANNOTATION_PREFIX + "stop-notice"
# Webhook bodies say which shape they are.
WEBHOOK_KIND = "devboxes.io/stop-warning/v1"


@dataclass(frozen=True)
class NextStop:
    """The next stop the controller enforces on a running box."""

    reason: StopReason
    at: datetime
    # For an idle stop: the last GPU utilization the box reported, when known.
    gpu_utilization: float | None = None
    idle_since: datetime | None = None

    @property
    def key(self) -> str:
        """Names this stop: another reason or moment is another stop."""
        return f"{self.reason} {format_timestamp(self.at)}"


def _annotations(deployment: Obj) -> dict[str, Any]:
    return (deployment.get("metadata") or {}).get("annotations") or {}


def time_to_live_end(deployment: Obj) -> datetime | None:
    """When a running box whose time to live runs (it has its device) stops at the
    latest; None for a stopped box, one waiting in line, or an unreadable deadline (which
    its status reports)."""
    if naming.is_stopped(deployment):
        return None
    annotations = _annotations(deployment)
    expires = annotations.get(naming.ANNOTATION_EXPIRES_AT)
    if naming.ANNOTATION_WAITING_SINCE in annotations or not isinstance(expires, str):
        return None
    try:
        return parse_timestamp(expires)
    except ValueError:
        return None


def next_stop(deployment: Obj, settings: Settings, now: datetime) -> NextStop | None:
    """The earlier of the time to live's end, once it runs, and the idle window's end,
    once the box is idle; None for a stopped box or one with neither."""
    if naming.is_stopped(deployment):
        return None
    ends = time_to_live_end(deployment)
    stops = [] if ends is None else [NextStop("ttl", ends)]
    idle_stop = activity.idle_stop_at(deployment, settings, now)
    if idle_stop is not None:
        record = activity.recorded(deployment)
        stops.append(
            NextStop(
                "idle",
                idle_stop,
                gpu_utilization=record.gpu_utilization if record else None,
                idle_since=record.idle_since if record else None,
            )
        )
    # On a tie the time to live is named: extending the box moves it.
    return min(stops, key=lambda stop: (stop.at, stop.reason != "ttl"), default=None)


def lead(settings: Settings) -> timedelta | None:
    minutes = settings.stop_warnings.lead_minutes
    return timedelta(minutes=minutes) if minutes else None


def warn_at(stop: NextStop, settings: Settings) -> datetime | None:
    """When the owner is told of ``stop``; None when warnings are off."""
    ahead = lead(settings)
    return None if ahead is None else stop.at - ahead


def warned(deployment: Obj) -> str | None:
    value = _annotations(deployment).get(ANNOTATION_STOP_WARNED)
    return value if isinstance(value, str) and value else None


def webhook_sent(deployment: Obj) -> str | None:
    value = _annotations(deployment).get(ANNOTATION_WEBHOOK_SENT)
    return value if isinstance(value, str) and value else None


def due(deployment: Obj, stop: NextStop | None, settings: Settings, now: datetime) -> bool:
    """Whether the leader is to warn of ``stop`` now: it is within the lead time, not yet
    passed, and not warned of already."""
    if stop is None or stop.at <= now:
        return False
    moment = warn_at(stop, settings)
    return moment is not None and moment <= now and warned(deployment) != stop.key


def minutes_left(stop: NextStop, now: datetime) -> int:
    """Whole minutes to the stop, rounded up: "in 10 min" from 9 min 30 s before it."""
    return max(0, math.ceil((stop.at - now).total_seconds() / 60))


def message(name: str, stop: NextStop, now: datetime | None) -> str:
    """The warning in one sentence, with what keeps the box running; counting the minutes
    from ``now`` when given (a message sent once), else with the time alone (one shown
    until the box changes, whose reader counts the minutes)."""
    clock = time_of_day_label(stop.at)
    when = f"at {clock}" if now is None else f"in {minutes_left(stop, now)} min, at {clock}"
    if stop.reason == "ttl":
        return (
            f"Box {name} stops {when}: its time to live ends. "
            f"`devbox extend {name} --hours 1` keeps it running; its home volume is kept."
        )
    since = f" since {time_of_day_label(stop.idle_since)}" if stop.idle_since is not None else ""
    gpu = f", GPU {stop.gpu_utilization:g}% busy" if stop.gpu_utilization is not None else ""
    return (
        f"Box {name} stops {when}: idle{since}{gpu}. Using it, or "
        f"`devbox extend {name} --hours 1`, keeps it running; its home volume is kept."
    )


def warning(deployment: Obj, settings: Settings, now: datetime) -> StopWarning | None:
    """The box's warning as the API shows it, while within the lead time of a stop."""
    stop = next_stop(deployment, settings, now)
    if stop is None or stop.at <= now:
        return None
    moment = warn_at(stop, settings)
    if moment is None or moment > now:
        return None
    name = naming.box_name_of(deployment) or deployment["metadata"]["name"]
    return StopWarning(
        reason=stop.reason,
        stops_at=stop.at,
        message=message(name, stop, None),
        gpu_utilization=stop.gpu_utilization if stop.reason == "idle" else None,
    )


def notice(stop: NextStop, text: str) -> str:
    """The pod annotation a box's sessions are shown: the stop's key, so each stop is
    shown once, then the message."""
    return f"{stop.key}\n{text}"


def webhook_body(name: str, owner: str, stop: NextStop, text: str) -> dict[str, Any]:
    """What the webhook receives; ``id`` is the same on every delivery of one warning,
    so a receiver that keeps ids drops a repeat."""
    body: dict[str, Any] = {
        "kind": WEBHOOK_KIND,
        "id": f"{name} {stop.key}",
        "box": name,
        "owner": owner,
        "reason": stop.reason,
        "stopsAt": format_timestamp(stop.at),
        "message": text,
    }
    if stop.reason == "idle" and stop.gpu_utilization is not None:
        body["gpuUtilization"] = stop.gpu_utilization
    return body
