"""The ``usage`` block: how often the leader records what boxes hold and how long the
record is kept. Budgets of GPU-hours are in the ``limits`` block.
"""

from __future__ import annotations

from typing import Annotated

from .base import Model, WholeNumber

MIN_RECORD_SECONDS = 10
MAX_RECORD_SECONDS = 600
# A budget's window or a month's report needs the days before it.
MIN_RETENTION_DAYS = 35
MAX_RETENTION_DAYS = 3660

RecordSeconds = Annotated[int, WholeNumber(MIN_RECORD_SECONDS, MAX_RECORD_SECONDS)]
RetentionDays = Annotated[int, WholeNumber(MIN_RETENTION_DAYS, MAX_RETENTION_DAYS)]


class UsageSettings(Model):
    """Usage of GPU boxes, recorded by the leader; see docs/controller.md."""

    # A pass every this many seconds: a change of state is counted at most this late.
    record_seconds: RecordSeconds = 60
    # Days whose record is older than this are deleted.
    retention_days: RetentionDays = 400
