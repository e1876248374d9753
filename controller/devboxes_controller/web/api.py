"""The ``/api/v1`` router, serving exactly the models of ``devboxes_sdk.models``.

Reads are answered from the watch caches on the event loop. Writes go through the
:class:`~.writes.WritePool`, so a slow apiserver can delay writes but never reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.openapi.utils import get_openapi

from devboxes_sdk.models import (
    API_PREFIX,
    MAX_WAIT_SECONDS,
    NAME_INPUT_PATTERN,
    WAIT_HEADER,
    Capabilities,
    DeleteResult,
    Devbox,
    DevboxCreate,
    DevboxExtend,
    DevboxList,
    DoctorReport,
    ErrorBody,
    GpuAvailability,
    Preset,
    VolumeList,
    WhoAmI,
    normalize_name,
)

from ..config.settings import Settings
from ..control import volumes
from ..control.lifecycle import Lifecycle
from ..k8s.kube import rule_broken
from ..placement import doctor
from ..state.bodies import Body, respond
from ..state.store import BoxStore
from .auth import operator
from .writes import WritePool

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 413, 422, 503)
}

Operator = Annotated[str, Depends(operator)]
# The pattern is documented, not enforced here: upper-case ASCII is folded by
# normalize_name, which then enforces the rule with a message naming it.
BoxName = Annotated[str, Path(json_schema_extra={"pattern": NAME_INPUT_PATTERN})]


# Async, like every dependency here: FastAPI runs plain functions on a worker thread.
async def _store(request: Request) -> BoxStore:
    store: BoxStore = request.app.state.store
    return store


async def _lifecycle(request: Request) -> Lifecycle:
    lifecycle: Lifecycle = request.app.state.lifecycle
    return lifecycle


async def _writes(request: Request) -> WritePool:
    writes: WritePool = request.app.state.writes
    return writes


StoreDep = Annotated[BoxStore, Depends(_store)]
LifecycleDep = Annotated[Lifecycle, Depends(_lifecycle)]
WritesDep = Annotated[WritePool, Depends(_writes)]


def _name(name: str) -> str:
    try:
        return normalize_name(name)
    except ValueError as err:
        raise rule_broken(["path", "name"], str(err)) from None


router = APIRouter(prefix=API_PREFIX, responses=ERRORS)
TITLE = "Devboxes API"
VERSION = "1"


def contract() -> dict[str, Any]:
    """The OpenAPI document of ``/api/v1`` as the code defines it, before any operator's
    limits are written in: the source of the extension's generated TypeScript types."""
    return get_openapi(title=TITLE, version=VERSION, routes=router.routes)


def describe_settings(document: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The served document states this operator's own limits (the longest TTL, the
    profiles on offer), so that clients see exactly which creates are accepted."""
    schemas = document["components"]["schemas"]
    create = schemas["DevboxCreate"]["properties"]
    create["ttl_hours"]["maximum"] = settings.ttl.max_hours
    schemas["DevboxExtend"]["properties"]["hours"]["maximum"] = settings.ttl.max_hours
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
    return document


@router.get("/whoami")
async def whoami(user: Operator) -> WhoAmI:
    return WhoAmI(user=user, mode="token")


@router.get("/capabilities", response_model=Capabilities)
async def capabilities(request: Request, _: Operator) -> Response:
    answer: Body = request.app.state.capabilities
    return respond(request, answer)


@router.get("/gpu/availability", response_model=GpuAvailability)
async def gpu_availability(
    request: Request,
    _: Operator,
    store: StoreDep,
    preset: Annotated[
        Preset | None,
        Query(description="Count only boxes whose preset's CPU and memory also fit"),
    ] = None,
) -> Response:
    return respond(request, store.availability.body(preset))


@router.get("/gpu/doctor")
async def gpu_doctor(_: Operator, lifecycle: LifecycleDep, writes: WritesDep) -> DoctorReport:
    # The checks read the apiserver, so they run off the event loop like a write does.
    return await writes.run(doctor.examine, lifecycle.settings, lifecycle.api)


@router.get("/devboxes", response_model=DevboxList)
async def list_devboxes(request: Request, _: Operator, store: StoreDep) -> Response:
    return respond(request, store.list_body())


@router.post("/devboxes", status_code=201)
async def create_devbox(
    body: DevboxCreate, _: Operator, lifecycle: LifecycleDep, writes: WritesDep
) -> Devbox:
    return await writes.run(lifecycle.create, body)


@router.get("/devboxes/{name}", response_model=Devbox)
async def get_devbox(
    request: Request,
    name: BoxName,
    _: Operator,
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
        return respond(request, store.get_body(name))
    box = await store.wait_settled(name, timeout)
    return Response(
        box.model_dump_json(), media_type="application/json", headers={WAIT_HEADER: wait}
    )


@router.post("/devboxes/{name}/start")
async def start_devbox(
    name: BoxName, _: Operator, lifecycle: LifecycleDep, writes: WritesDep
) -> Devbox:
    return await writes.run(lifecycle.start_box, _name(name))


@router.post("/devboxes/{name}/stop")
async def stop_devbox(
    name: BoxName, _: Operator, lifecycle: LifecycleDep, writes: WritesDep
) -> Devbox:
    return await writes.run(lifecycle.stop_box, _name(name))


@router.delete("/devboxes/{name}")
async def delete_devbox(
    name: BoxName, _: Operator, lifecycle: LifecycleDep, writes: WritesDep, purge: bool = False
) -> DeleteResult:
    return await writes.run(lifecycle.delete, _name(name), purge)


@router.post("/devboxes/{name}/extend")
async def extend_devbox(
    name: BoxName, body: DevboxExtend, _: Operator, lifecycle: LifecycleDep, writes: WritesDep
) -> Devbox:
    return await writes.run(lifecycle.extend_box, _name(name), body.hours)


@router.get("/volumes")
async def list_volumes(_: Operator, store: StoreDep) -> VolumeList:
    return volumes.retained(store)


@router.delete("/volumes/{name}")
async def purge_volume(
    name: BoxName, _: Operator, lifecycle: LifecycleDep, writes: WritesDep
) -> DeleteResult:
    return await writes.run(volumes.purge, lifecycle, _name(name))
