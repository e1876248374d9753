"""The HTTP API: ``/api/v1`` serving exactly the models of ``devboxes_sdk.models``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from devboxes_sdk.models import (
    Capabilities,
    DeleteResult,
    Devbox,
    DevboxCreate,
    DevboxList,
    ErrorBody,
    Health,
    WhoAmI,
    normalize_name,
)

from .auth import require_operator
from .boxes import Boxes
from .dashboard import mount_dashboard
from .kube import ApiProblem, Invalid
from .metrics import METRICS

log = logging.getLogger(__name__)

MAX_WAIT_SECONDS = 300
WAIT_HEADER = "X-Devboxes-Wait"
API_CSP = "default-src 'none'; frame-ancestors 'none'"
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (401, 403, 404, 409, 422, 503)
}

Operator = Annotated[str, Depends(require_operator)]


def _boxes(request: Request) -> Boxes:
    boxes: Boxes = request.app.state.boxes
    return boxes


BoxesDep = Annotated[Boxes, Depends(_boxes)]


def _name(name: str) -> str:
    try:
        return normalize_name(name)
    except ValueError as err:
        raise Invalid(str(err)) from None


router = APIRouter(prefix="/api/v1", responses=ERRORS)


@router.get("/whoami")
def whoami(user: Operator) -> WhoAmI:
    return WhoAmI(user=user, mode="token")


@router.get("/capabilities")
def capabilities(_: Operator, boxes: BoxesDep) -> Capabilities:
    return boxes.settings.gpu.capabilities()


@router.get("/devboxes", response_model=DevboxList)
def list_devboxes(_: Operator, boxes: BoxesDep) -> Response:
    return Response(boxes.list_json(), media_type="application/json")


@router.post("/devboxes", status_code=201)
async def create_devbox(body: DevboxCreate, _: Operator, boxes: BoxesDep) -> Devbox:
    return await run_in_threadpool(boxes.create, body)


@router.get("/devboxes/{name}")
async def get_devbox(
    name: str,
    _: Operator,
    boxes: BoxesDep,
    response: Response,
    wait: Annotated[
        Literal["ready"] | None,
        Query(description="Hold the request until the box is ready or degraded"),
    ] = None,
    timeout: Annotated[
        float, Query(ge=0, le=MAX_WAIT_SECONDS, description="Seconds to hold a waiting request")
    ] = 60,
) -> Devbox:
    name = _name(name)
    if wait is None:
        return boxes.get(name)
    response.headers[WAIT_HEADER] = wait
    return await boxes.wait_settled(name, timeout)


@router.post("/devboxes/{name}/start")
async def start_devbox(name: str, _: Operator, boxes: BoxesDep) -> Devbox:
    return await run_in_threadpool(boxes.start_box, _name(name))


@router.post("/devboxes/{name}/stop")
async def stop_devbox(name: str, _: Operator, boxes: BoxesDep) -> Devbox:
    return await run_in_threadpool(boxes.stop_box, _name(name))


@router.delete("/devboxes/{name}")
async def delete_devbox(
    name: str, _: Operator, boxes: BoxesDep, purge: bool = False
) -> DeleteResult:
    return await run_in_threadpool(boxes.delete, _name(name), purge)


def _field_errors(err: RequestValidationError | ValidationError) -> list[dict[str, Any]]:
    errors = []
    for error in err.errors():
        message = str(error.get("msg", "invalid value"))
        errors.append(
            {
                "type": error.get("type", "value_error"),
                "loc": [str(p) if not isinstance(p, int) else p for p in error["loc"]],
                "msg": message.removeprefix("Value error, "),
            }
        )
    return errors


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiProblem)
    async def problem(request: Request, err: ApiProblem) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
        return JSONResponse({"detail": err.detail}, status_code=err.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        # FastAPI decodes a JSON body before it runs dependencies; an unauthenticated
        # caller must learn nothing about its request, not even that the body is malformed.
        try:
            require_operator(request)
        except ApiProblem as refused:
            return await problem(request, refused)
        return JSONResponse({"detail": _field_errors(err)}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("unexpected error", extra={"path": request.url.path})
        return JSONResponse({"detail": "internal error; see the controller log"}, status_code=500)


def _route_template(request: Request) -> str:
    route = request.scope.get("route")
    return str(getattr(route, "path", "unmatched"))


def _install_middleware(app: FastAPI) -> None:
    @app.middleware("http")
    async def headers_and_metrics(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        path = request.url.path
        response.headers.setdefault("Content-Security-Policy", API_CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        if path.startswith("/api/"):
            response.headers["Cache-Control"] = "no-store"
        route = _route_template(request)
        METRICS.requests.labels(request.method, route, str(response.status_code)).inc()
        METRICS.latency.labels(request.method, route).observe(time.perf_counter() - started)
        return response


def create_app(
    boxes: Boxes, token: str, lifecycle: Callable[[], AsyncIterator[None]] | None = None
) -> FastAPI:
    """The ASGI app. ``lifecycle`` starts and stops the watches and the reconciler."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        boxes.bind_loop(asyncio.get_running_loop())
        if lifecycle is None:
            yield
            return
        async with asynccontextmanager(lifecycle)():
            yield

    app = FastAPI(
        title="Devboxes API",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.boxes = boxes
    app.state.token = token
    app.include_router(router)
    mount_dashboard(app, boxes)
    _install_handlers(app)
    _install_middleware(app)

    @app.get("/health", include_in_schema=False)
    def health() -> Health:
        return Health(status="ok")

    @app.get("/ready", include_in_schema=False)
    def ready() -> JSONResponse:
        if boxes.synced() and boxes.healthy():
            return JSONResponse({"status": "ready"})
        return JSONResponse(
            {"status": "not ready", "detail": "waiting for the Kubernetes caches to sync"},
            status_code=503,
        )

    @app.get("/metrics", include_in_schema=False)
    def metrics(_: Operator) -> Response:
        for state, count in boxes.counts().items():
            METRICS.boxes.labels(state).set(count)
        return Response(generate_latest(METRICS.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi.json", include_in_schema=False)
    def openapi(_: Operator) -> JSONResponse:
        if app.openapi_schema is None:
            app.openapi_schema = get_openapi(
                title=app.title, version=app.version, routes=app.routes
            )
        return JSONResponse(app.openapi_schema)

    return app
