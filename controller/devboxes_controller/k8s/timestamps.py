"""Times as Kubernetes writes them: RFC 3339 in UTC with a 'Z'.

Every time the controller writes (annotations, Events, the Lease) or shows in a message
comes from :func:`format_timestamp`, and every time it reads back goes through
:func:`parse_timestamp`.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_timestamp(moment: datetime, *, microseconds: bool = False) -> str:
    """``2030-05-17T09:30:00Z``: to the second, or to the microsecond for the MicroTime
    fields of a Lease, which Kubernetes reads only with six fractional digits."""
    if moment.tzinfo is None:
        raise ValueError("a timestamp needs a time zone")
    utc = moment.astimezone(UTC).replace(tzinfo=None)
    return utc.isoformat(timespec="microseconds" if microseconds else "seconds") + "Z"


def parse_timestamp(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(UTC)


def minute_label(moment: datetime) -> str:
    """``2030-05-17 09:30 UTC``: a moment as messages give it to people."""
    return f"{format_timestamp(moment)[:16].replace('T', ' ')} UTC"


def time_of_day_label(moment: datetime) -> str:
    """``09:30 UTC``: a moment of the coming hours as messages give it to people."""
    return f"{format_timestamp(moment)[11:16]} UTC"
