"""The ``stopWarnings`` block: how long before a box's time to live or idle window ends
its owner is told, and the webhook that is told too.
"""

from __future__ import annotations

from typing import Annotated

from .base import Model, WholeNumber
from .formats import HttpUrl

# A day: a warning earlier than that is news, not a warning.
MAX_LEAD_MINUTES = 1440
MAX_WEBHOOK_SECONDS = 60
MAX_WEBHOOK_ATTEMPTS = 20

LeadMinutes = Annotated[int, WholeNumber(0, MAX_LEAD_MINUTES)]
WebhookSeconds = Annotated[int, WholeNumber(1, MAX_WEBHOOK_SECONDS)]
WebhookAttempts = Annotated[int, WholeNumber(1, MAX_WEBHOOK_ATTEMPTS)]


class WebhookSettings(Model):
    """Where each warning is also posted, as JSON; see docs/operator-guide.md."""

    # Never shown in logs, Events or messages: such URLs often carry their own secret.
    url: HttpUrl
    # One attempt's bound; a slow receiver never delays a stop.
    timeout_seconds: WebhookSeconds = 5
    # Tries of one warning, one second apart at first and twice as long each time.
    attempts: WebhookAttempts = 6


class StopWarningSettings(Model):
    """Warnings before the controller stops a running box at the end of its time to live
    or of its idle window: an Event, a line in each SSH session through the controller, a
    notification in the Lab, and in the CLI and the dashboard."""

    # 0 warns of nothing.
    lead_minutes: LeadMinutes = 10
    webhook: WebhookSettings | None = None
