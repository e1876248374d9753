"""The activity agents' route: each box's agent reports what it sees, with its own credential.

Not part of the public API: it is left out of the OpenAPI document, refuses the operator
token and any session, and takes only a small, bounded body. A credential is good for
one box only, so an agent can neither read anything nor speak for another box.
"""

from __future__ import annotations

import re
import threading
import time

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from devboxes_sdk.models import API_PREFIX, ActivityReport, field_errors, normalize_name

from ..box import activity, naming
from ..control.lifecycle import Lifecycle
from ..k8s.kube import ApiProblem, Invalid
from ..state.store import BoxStore
from .identity.base import Unauthorized, bearer
from .writes import WritePool

ACTIVITY_ROUTE = re.compile(f"^{re.escape(API_PREFIX)}/devboxes/[^/]+/activity$")
MAX_REPORT_BYTES = 1024
# Agents report every minute; faster than this is refused, per box and replica.
MIN_REPORT_SECONDS = 5.0


class RateLimiter:
    """At most one accepted report per box every ``interval`` seconds."""

    def __init__(self, interval: float = MIN_REPORT_SECONDS) -> None:
        self._interval = interval
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def allow(self, box: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(box, float("-inf")) < self._interval:
                return False
            self._last[box] = now
            return True


def is_activity_route(path: str) -> bool:
    return bool(ACTIVITY_ROUTE.match(path))


router = APIRouter(include_in_schema=False)


def _authenticated_box(request: Request, name: str) -> str:
    """The box the credential belongs to; 401 for anything else, unknown boxes included,
    so the route tells an unauthenticated caller nothing."""
    store: BoxStore = request.app.state.store
    lifecycle: Lifecycle = request.app.state.lifecycle
    presented = bearer(request)
    try:
        box = normalize_name(name)
    except ValueError:
        raise Unauthorized("invalid box credential") from None
    deployment = store.deployment(naming.object_names(box))
    if (
        presented is None
        or deployment is None
        or not activity.credential_matches(lifecycle.activity_key, deployment, presented)
    ):
        raise Unauthorized("invalid box credential")
    return box


@router.post(f"{API_PREFIX}/devboxes/{{name}}/activity", status_code=204)
async def report_activity(name: str, request: Request) -> Response:
    box = _authenticated_box(request, name)
    limiter: RateLimiter = request.app.state.activity_limiter
    if not limiter.allow(box):
        raise ApiProblem(
            429,
            f"one report per {MIN_REPORT_SECONDS:g} s per box",
            {"Retry-After": str(int(MIN_REPORT_SECONDS))},
        )
    try:
        report = ActivityReport.model_validate_json(await request.body())
    except ValidationError as err:
        raise Invalid(field_errors(err.errors(), "body")) from None
    lifecycle: Lifecycle = request.app.state.lifecycle
    writes: WritePool = request.app.state.writes
    await writes.run(lifecycle.record_activity, box, report)
    return Response(status_code=204)
