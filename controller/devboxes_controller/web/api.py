"""The ``/api/v1`` router, serving exactly the models of ``devboxes_sdk.models``.

Reads are answered from the watch caches on the event loop. Writes go through the
:class:`~.writes.WritePool`, so a slow apiserver can delay writes but never reads; the
few reads that must ask the apiserver go through the :class:`~.reads.ReadPool`, with a
share per person.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.openapi.utils import get_openapi

from devboxes_sdk.models import (
    API_PREFIX,
    BOOKING_NAME_PATTERN,
    IDEMPOTENCY_HEADER,
    MAX_LIST_LIMIT,
    MAX_USAGE_DAYS,
    MAX_USER_LENGTH,
    MAX_WAIT_SECONDS,
    NAME_INPUT_PATTERN,
    WAIT_HEADER,
    Booking,
    BookingCreate,
    BookingList,
    Capabilities,
    DeleteResult,
    Devbox,
    DevboxCreate,
    DevboxExtend,
    DevboxList,
    DevboxState,
    DoctorReport,
    ErrorBody,
    GpuAvailability,
    GpuTimeline,
    GpuWhen,
    Preset,
    ProfileAvailability,
    SshKey,
    SshKeyAdd,
    SshKeyList,
    UsageGroupBy,
    UsageReport,
    VolumeList,
    WhoAmI,
    normalize_name,
)

from ..box import idempotency, stop_warning
from ..box.ownership import OPERATOR
from ..config.catalog import CPU_ACCELERATOR, PROFILE_NAME_RE
from ..config.gpu import GpuProfileConfig
from ..config.images import ImageProfileConfig
from ..config.settings import Settings
from ..control import volumes
from ..control.bookings import Desk
from ..control.lifecycle import Lifecycle
from ..control.promises import Promises
from ..control.ssh_keys import Keys
from ..k8s.kube import NotFound, rule_broken
from ..placement import doctor, limits, when
from ..placement.ledger import MIN_RUN
from ..placement.usage_report import report as usage_report_of
from ..state.bodies import CapabilitiesBody, body, respond
from ..state.index import CPU
from ..state.store import BoxStore
from .identity.base import Forbidden, Identity, owner_scope
from .identity.chooser import admin, caller
from .paging import ListTokens, Position
from .reads import ReadPool, Shared
from .writes import WritePool

Responses = dict[int | str, dict[str, Any]]


def _errors(*codes: int) -> Responses:
    return {code: {"model": ErrorBody} for code in codes}


# Every route: the token (401) and the body limit (413), both checked before routing.
GUARDED = _errors(401, 413)
# A route with a name in its path: a bad name (422), no such box (404).
NAMED = _errors(404, 422)
# A route with a JSON body: undecodable bytes (400), a broken rule (422).
WITH_BODY = _errors(400, 422)
# A route that writes to Kubernetes: every outcome of ``kube.translate``, and a person's
# share of the write pool taken (429).
WRITES = _errors(403, 404, 409, 422, 429, 502, 503)
# A read answered by ``bodies.respond``.
CONDITIONAL: Responses = {
    304: {"description": "Not Modified: the client's If-None-Match names this version"}
}

Caller = Annotated[Identity, Depends(caller)]
Admin = Annotated[Identity, Depends(admin)]
# The pattern is documented, not enforced here: upper-case ASCII is folded by
# normalize_name, which then enforces the rule with a message naming it.
BoxName = Annotated[str, Path(json_schema_extra={"pattern": NAME_INPUT_PATTERN})]
# Documented here, checked by ``idempotency.check_key`` with a message naming the rule.
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        description=(
            "Makes the create safe to retry: a retry with the same key and body answers "
            "201 with the box it made, for as long as that box exists"
        ),
        json_schema_extra={"pattern": idempotency.KEY_PATTERN},
    ),
]


T = TypeVar("T")


def _kept(attribute: str, kind: type[T]) -> Callable[[Request], Awaitable[T]]:
    """A dependency answering what the app keeps under ``attribute`` of its state. Async,
    like every dependency here: FastAPI runs plain functions on a worker thread."""

    async def kept(request: Request) -> T:
        found = getattr(request.app.state, attribute)
        if not isinstance(found, kind):
            raise TypeError(f"app.state.{attribute} is not a {kind.__name__}")
        return found

    return kept


StoreDep = Annotated[BoxStore, Depends(_kept("store", BoxStore))]
TokensDep = Annotated[ListTokens, Depends(_kept("list_tokens", ListTokens))]
LifecycleDep = Annotated[Lifecycle, Depends(_kept("lifecycle", Lifecycle))]
WritesDep = Annotated[WritePool, Depends(_kept("writes", WritePool))]
KeysDep = Annotated[Keys, Depends(_kept("keys", Keys))]
BookingsDep = Annotated[Desk, Depends(_kept("bookings", Desk))]
ReadsDep = Annotated[ReadPool, Depends(_kept("reads", ReadPool))]
DoctorDep = Annotated[Shared[DoctorReport], Depends(_kept("doctor", Shared))]


def _owner(identity: Identity) -> str | None:
    """The owner a box the caller creates records; None for the operator's."""
    return None if identity.user == OPERATOR else identity.user


def _asker(identity: Identity) -> limits.Asker | None:
    """The person whose limits a create or start counts against; None for the operator."""
    owner = _owner(identity)
    return None if owner is None else limits.Asker(owner, frozenset(identity.groups))


def _name(name: str) -> str:
    try:
        return normalize_name(name)
    except ValueError as err:
        raise rule_broken(["path", "name"], str(err)) from None


router = APIRouter(prefix=API_PREFIX, responses=GUARDED)
# How far ahead the timeline of a profile's devices reaches.
TIMELINE = timedelta(hours=24)
TITLE = "Devboxes API"
VERSION = "1"


def contract() -> dict[str, Any]:
    """The OpenAPI document of ``/api/v1`` as the code defines it, before any operator's
    limits are written in: the source of the extension's generated TypeScript types."""
    return get_openapi(title=TITLE, version=VERSION, routes=router.routes)


def describe_settings(document: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The served document states this operator's own limits (the longest TTL, the
    GPU and image profiles on offer), so that clients see exactly which creates and list
    filters are accepted."""
    schemas = document["components"]["schemas"]
    create = schemas["DevboxCreate"]["properties"]
    create["ttl_hours"]["maximum"] = settings.ttl.max_hours
    schemas["DevboxExtend"]["properties"]["hours"]["maximum"] = settings.ttl.max_hours
    offered = [profile.name for profile in settings.gpu.profiles] if settings.gpu.enabled else []
    for parameter in document["paths"][f"{API_PREFIX}/devboxes"]["get"]["parameters"]:
        if parameter["name"] == "profile":
            parameter["schema"]["anyOf"][0]["enum"] = [*offered, CPU]
    if settings.gpu.enabled:
        names = [profile.name for profile in settings.gpu.profiles]
        schemas["GpuRequest"]["properties"]["profile"] = {
            "anyOf": [{"type": "string", "enum": names}, {"type": "null"}],
            "title": "Profile",
            "description": "A profile of the catalog; null for the operator's default",
        }
    else:
        create["gpu"] = {
            "type": "null",
            "default": None,
            "description": "GPU acceleration is disabled by the operator",
        }
    if settings.images.enabled:
        rules = {p.name: _accelerator_rule(p, settings) for p in settings.images.profiles}
        offered = [name for name, rule in rules.items() if rule != _NEVER]
        create["image"] = {
            "anyOf": [{"type": "string", "enum": offered}, {"type": "null"}],
            "title": "Image",
            "description": "An image profile of the catalog; null for the workspace image",
        }
        conditions = [rule for rule in rules.values() if rule not in (_ALWAYS, _NEVER)]
        if conditions:
            schemas["DevboxCreate"]["allOf"] = conditions
    else:
        create["image"] = {
            "type": "null",
            "default": None,
            "description": "Image profiles are disabled by the operator",
        }
    return document


# An image profile any box may have, and one no box can have with these settings.
_ALWAYS: dict[str, Any] = {}
_NEVER: dict[str, Any] = {"not": {}}


def _accelerator_rule(profile: ImageProfileConfig, settings: Settings) -> dict[str, Any]:
    """The ``gpu`` a create naming this image profile may have, as JSON Schema."""
    if profile.mode == "sidecar":
        return _ALWAYS
    gpu = settings.gpu
    choices: list[dict[str, Any]] = []
    if CPU_ACCELERATOR in profile.accelerators:
        choices.append({"type": "null"})
    if gpu.enabled:
        listed = [p.name for p in gpu.profiles if p.name in profile.accelerators]
        if listed:
            choices.append(
                {
                    "type": "object",
                    "properties": {"profile": {"enum": listed}},
                    "required": ["profile"],
                }
            )
        if gpu.default_profile in listed:
            # {} and {"profile": null}: the default profile.
            choices.append({"type": "object", "properties": {"profile": {"type": "null"}}})
    if not choices:
        return _NEVER
    then: dict[str, Any] = {"properties": {"gpu": {"anyOf": choices}}}
    if CPU_ACCELERATOR not in profile.accelerators:
        then["required"] = ["gpu"]
    return {
        "if": {"properties": {"image": {"const": profile.name}}, "required": ["image"]},
        "then": then,
    }


@router.get("/whoami")
async def whoami(identity: Caller) -> WhoAmI:
    return WhoAmI(
        user=identity.user,
        mode=identity.mode,
        groups=list(identity.groups),
        admin=identity.admin,
    )


@router.get("/capabilities", response_model=Capabilities, responses=CONDITIONAL)
async def capabilities(request: Request, _: Caller) -> Response:
    answer: CapabilitiesBody = request.app.state.capabilities
    return respond(request, answer.current())


@router.get(
    "/gpu/availability",
    response_model=GpuAvailability,
    responses={**CONDITIONAL, **_errors(422)},
)
async def gpu_availability(
    request: Request,
    _: Caller,
    store: StoreDep,
    preset: Annotated[
        Preset | None,
        Query(description="Count only boxes whose preset's CPU and memory also fit"),
    ] = None,
) -> Response:
    return respond(request, store.availability.body(preset))


@router.get("/gpu/when", response_model=GpuWhen)
async def gpu_when(_: Caller, store: StoreDep, desk: BookingsDep) -> GpuWhen:
    """When a new box of each GPU profile would get a device, as things stand."""
    settings = store.settings
    return _when(store, desk.promises, settings.gpu.profiles if settings.gpu.enabled else [])


@router.get("/gpu/when/{profile}", response_model=GpuWhen, responses=_errors(404, 422))
async def gpu_when_of(
    _: Caller,
    store: StoreDep,
    desk: BookingsDep,
    profile: Annotated[
        str, Path(pattern=PROFILE_NAME_RE.pattern, description="A GPU profile of the catalog")
    ],
) -> GpuWhen:
    """When a new box of this GPU profile would get a device, as things stand."""
    settings = store.settings
    offered = settings.gpu.profiles if settings.gpu.enabled else []
    chosen = [p for p in offered if p.name == profile]
    if not chosen:
        listed = ", ".join(p.name for p in offered) or "none"
        raise NotFound(f"no GPU profile '{profile}' is offered; the profiles: {listed}")
    return _when(store, desk.promises, chosen)


def _when(store: BoxStore, promises: Promises, profiles: list[GpuProfileConfig]) -> GpuWhen:
    now = datetime.now(UTC)
    latest = now + timedelta(days=store.settings.bookings.days_ahead)
    counts = store.availability.current()
    answers = []
    for profile in profiles:
        holders = [
            ends
            for deployment in store.running_boxes_of(profile.name)
            if (ends := stop_warning.time_to_live_end(deployment)) is not None
        ]
        answer = when.when(
            counts.profile(profile.name) or ProfileAvailability(name=profile.name),
            holders,
            now,
            shared=bool(store.settings.gpu.sharing_devices(profile)),
            dra=profile.is_dra,
        )
        ledger = promises.ledger(profile.name, now) if promises.records(profile.name, now) else None
        if ledger is not None:
            answer = when.after_bookings(answer, ledger, MIN_RUN, latest)
        answers.append(answer)
    return GpuWhen(observed_at=now, profiles=answers)


@router.get("/gpu/timeline", response_model=GpuTimeline)
async def gpu_timeline(identity: Caller, store: StoreDep, desk: BookingsDep) -> GpuTimeline:
    """The next 24 hours of each GPU profile: per unit of it, the running boxes until
    their time to live ends and the bookings; others' boxes unnamed."""
    settings = store.settings
    now = datetime.now(UTC)
    end = now + TIMELINE
    return GpuTimeline(
        starts_at=now,
        ends_at=end,
        profiles=[
            desk.promises.timeline(p.name, identity.scope, identity.user, now, end)
            for p in (settings.gpu.profiles if settings.gpu.enabled else [])
        ],
    )


@router.get("/gpu/doctor", responses=_errors(429, 503))
async def gpu_doctor(identity: Caller, report: DoctorDep) -> DoctorReport:
    found = await report.get(identity.user)
    return found if identity.admin else doctor.for_people(found)


def _profile(store: BoxStore, profile: str) -> str:
    # A profile gone from the catalog stays a valid filter while boxes of it remain.
    known = {p.name for p in store.settings.gpu.profiles} | store.profiles() | {CPU}
    if profile not in known:
        offered = ", ".join(sorted(known))
        raise rule_broken(["query", "profile"], f"unknown profile '{profile}'; one of {offered}")
    return profile


@router.get(
    "/devboxes",
    response_model=DevboxList,
    responses={**CONDITIONAL, **_errors(400, 403, 410, 422)},
)
async def list_devboxes(
    request: Request,
    identity: Caller,
    store: StoreDep,
    tokens: TokensDep,
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_LIST_LIMIT,
            description="Answer in pages of at most this many boxes, in name order",
        ),
    ] = None,
    continue_: Annotated[
        str | None,
        Query(
            alias="continue",
            description="The continue token of the previous page, sent with the same filters",
        ),
    ] = None,
    state: Annotated[DevboxState | None, Query(description="Only boxes in this state")] = None,
    profile: Annotated[
        str | None, Query(description=f"Only boxes of this GPU profile, or '{CPU}'")
    ] = None,
    owner: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_USER_LENGTH,
            description="Only this person's boxes; people other than admins see only their own",
        ),
    ] = None,
) -> Response:
    wanted = state.value if state is not None else None
    if profile is not None:
        profile = _profile(store, profile)
    whose = owner_scope(identity, owner)
    # As in Kubernetes, an empty continue is none at all: the list starts at its beginning.
    token = continue_ or None
    if limit is None and token is None:
        if wanted is None and profile is None:
            return respond(request, store.list_body(whose))
        return respond(request, store.filtered_body(wanted, profile, whose))
    after = tokens.read(token, whose, wanted, profile).after if token is not None else ""
    parts, last = store.page((whose, wanted, profile), after, limit)
    following = tokens.issue(Position(last, wanted, profile, whose)) if last is not None else None
    tail = f'],"continue":{json.dumps(following)}}}'.encode()
    return respond(request, body(b'{"items":[' + b",".join(parts) + tail, compress=True))


@router.post("/devboxes", status_code=201, responses={**WITH_BODY, **WRITES})
async def create_devbox(
    body: DevboxCreate,
    identity: Caller,
    lifecycle: LifecycleDep,
    writes: WritesDep,
    key: IdempotencyKey = None,
) -> Devbox:
    checked = idempotency.check_key(key) if key is not None else None
    return await writes.run_for(identity.user, lifecycle.create, body, checked, _asker(identity))


@router.get("/devboxes/{name}", response_model=Devbox, responses={**CONDITIONAL, **NAMED})
async def get_devbox(
    request: Request,
    name: BoxName,
    identity: Caller,
    store: StoreDep,
    wait: Annotated[
        Literal["ready"] | None,
        Query(description="Hold the request until the box is ready or degraded"),
    ] = None,
    timeout: Annotated[
        float, Query(ge=0, le=MAX_WAIT_SECONDS, description="Seconds to hold a waiting request")
    ] = 60,
) -> Response:
    name = _name(name)
    if wait is None:
        return respond(request, store.get_body(name, identity.scope))
    box = await store.wait_settled(name, timeout, identity.scope)
    return Response(
        box.model_dump_json(), media_type="application/json", headers={WAIT_HEADER: wait}
    )


@router.post("/devboxes/{name}/start", responses={**NAMED, **WRITES})
async def start_devbox(
    name: BoxName, identity: Caller, lifecycle: LifecycleDep, writes: WritesDep
) -> Devbox:
    return await writes.run_for(
        identity.user,
        lifecycle.start_box,
        _name(name),
        scope=identity.scope,
        asker=_asker(identity),
    )


@router.post("/devboxes/{name}/stop", responses={**NAMED, **WRITES})
async def stop_devbox(
    name: BoxName, identity: Caller, lifecycle: LifecycleDep, writes: WritesDep
) -> Devbox:
    return await writes.run_for(
        identity.user, lifecycle.stop_box, _name(name), scope=identity.scope
    )


@router.delete("/devboxes/{name}", responses={**NAMED, **WRITES})
async def delete_devbox(
    name: BoxName,
    identity: Caller,
    lifecycle: LifecycleDep,
    writes: WritesDep,
    purge: bool = False,
) -> DeleteResult:
    return await writes.run_for(
        identity.user, lifecycle.delete, _name(name), purge, scope=identity.scope
    )


@router.post("/devboxes/{name}/extend", responses={**NAMED, **WITH_BODY, **WRITES})
async def extend_devbox(
    name: BoxName,
    body: DevboxExtend,
    identity: Caller,
    lifecycle: LifecycleDep,
    writes: WritesDep,
) -> Devbox:
    return await writes.run_for(
        identity.user, lifecycle.extend_box, _name(name), body.hours, scope=identity.scope
    )


@router.get("/volumes")
async def list_volumes(identity: Caller, store: StoreDep) -> VolumeList:
    return volumes.retained(store, identity.scope)


@router.delete("/volumes/{name}", responses={**NAMED, **WRITES})
async def purge_volume(
    name: BoxName, identity: Caller, lifecycle: LifecycleDep, writes: WritesDep
) -> DeleteResult:
    return await writes.run_for(
        identity.user, volumes.purge, lifecycle, _name(name), identity.scope
    )


# A person's SSH keys: read and written on the apiserver, off the event loop.
@router.get("/keys", responses=_errors(409, 429, 503))
async def list_keys(identity: Caller, keys: KeysDep, reads: ReadsDep) -> SshKeyList:
    return await reads.run(identity.user, keys.listed, _owner(identity))


@router.post("/keys", status_code=201, responses={**WITH_BODY, **WRITES})
async def add_key(body: SshKeyAdd, identity: Caller, keys: KeysDep, writes: WritesDep) -> SshKey:
    return await writes.run_for(identity.user, keys.add, _owner(identity), body.key)


@router.delete("/keys", responses={**_errors(404, 409, 422), **WRITES})
async def remove_key(
    identity: Caller,
    keys: KeysDep,
    writes: WritesDep,
    fingerprint: Annotated[
        str,
        Query(
            min_length=1,
            max_length=128,
            description="The key's fingerprint as listed, e.g. SHA256:FRANtL/pZZX1BIm1...",
        ),
    ],
) -> SshKey:
    return await writes.run_for(identity.user, keys.remove, _owner(identity), fingerprint)


# Bookings: written on the apiserver, off the event loop; listed from the watch.
@router.get("/bookings", responses=_errors(422))
async def list_bookings(
    identity: Caller,
    desk: BookingsDep,
    profile: Annotated[
        str | None,
        Query(pattern=PROFILE_NAME_RE.pattern, description="Only this GPU profile's bookings"),
    ] = None,
) -> BookingList:
    """The caller's bookings (an admin's: everyone's), earliest window first, until a day
    after each ended."""
    return desk.listing(identity.scope, profile)


@router.get("/usage", responses=_errors(403, 422))
async def usage_report(
    identity: Caller,
    store: StoreDep,
    since: Annotated[
        date | None,
        Query(description="The first UTC day of the report; default six days before until"),
    ] = None,
    until: Annotated[
        date | None, Query(description="The last UTC day of the report; default today")
    ] = None,
    group_by: Annotated[
        UsageGroupBy, Query(description="What the report's lines add up by")
    ] = "profile",
    everyone: Annotated[
        bool,
        Query(alias="all", description="Everyone's usage rather than the caller's (admins only)"),
    ] = False,
) -> UsageReport:
    """GPU usage over whole UTC days: the caller's own, or with ``all`` everyone's."""
    if everyone and not identity.admin:
        raise Forbidden("only admins may see everyone's usage; leave out all for your own")
    today = store.clock().date()
    # Days no record can hold; tomorrow allows for a client's clock ahead of ours.
    earliest, latest = date(2000, 1, 1), today + timedelta(days=1)
    for where, day in (("since", since), ("until", until)):
        if day is not None and not earliest <= day <= latest:
            raise rule_broken(["query", where], f"must be a UTC day from {earliest} to {latest}")
    last = until or today
    first = since or last - timedelta(days=6)
    if first > last:
        raise rule_broken(["query", "since"], f"must not be after until ({last.isoformat()})")
    if (last - first).days + 1 > MAX_USAGE_DAYS:
        raise rule_broken(["query", "since"], f"a report covers at most {MAX_USAGE_DAYS} days")
    # Off the event loop: a month of a large cluster's record is many rows to add up.
    return await asyncio.to_thread(
        lambda: usage_report_of(
            store.usage.rows(first),
            first,
            last,
            group_by,
            None if everyone else identity.user,
            store.settings.usage.record_seconds,
        )
    )


@router.post("/bookings", status_code=201, responses={**WITH_BODY, **WRITES})
async def book(
    body: BookingCreate, identity: Caller, desk: BookingsDep, writes: WritesDep
) -> Booking:
    """Book one unit of a GPU profile for a window; 409 with the earliest window that fits
    when it does not."""
    return await writes.run_for(identity.user, desk.book, body, _asker(identity))


@router.delete("/bookings/{name}", responses={**NAMED, **WRITES})
async def cancel_booking(
    name: Annotated[str, Path(pattern=BOOKING_NAME_PATTERN, description="The booking's name")],
    identity: Caller,
    desk: BookingsDep,
    writes: WritesDep,
) -> Booking:
    """Cancel a booking of the caller's (an admin: anyone's); it keeps nothing from now."""
    return await writes.run_for(identity.user, desk.cancel, name, identity.scope)
