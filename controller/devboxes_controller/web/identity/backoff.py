"""When an identity provider that failed may be asked again.

Shared by the OIDC issuer's and JupyterHub's verifiers: while a provider fails, it is asked
again 1 s after the first failure, then after waits that double up to 60 s, so an outage
costs the provider one question per wait instead of one per request. One success forgets
the failures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .base import IdentityUnavailable

FIRST_WAIT_SECONDS = 1.0
MAX_WAIT_SECONDS = 60.0

log = logging.getLogger(__name__)


class Backoff:
    """The failures of one provider, by ``clock`` (seconds, monotonic)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._wait = 0.0
        self._retry_at = 0.0
        # The last failure, while the provider has not answered since.
        self.failure: IdentityUnavailable | None = None

    @property
    def waiting(self) -> bool:
        """Whether the provider failed and may not be asked again yet."""
        return self.failure is not None and self._clock() < self._retry_at

    def failed(self, failure: IdentityUnavailable) -> None:
        self.failure = failure
        now = self._clock()
        # Questions that were already out when the first of them failed belong to the same
        # failure: only a question asked after the wait lengthens the next one.
        if now < self._retry_at:
            return
        self._wait = min(2 * self._wait, MAX_WAIT_SECONDS) or FIRST_WAIT_SECONDS
        self._retry_at = now + self._wait
        log.warning("%s; asking again in %g s at the earliest", failure.detail, self._wait)

    def succeeded(self) -> None:
        self.failure = None
        self._wait = 0.0
        self._retry_at = 0.0
