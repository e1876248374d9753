"""The kubelet's probes on a port of their own.

The API's port refuses new connections once it holds ``connections.maxTotal`` of them,
and a slowloris from many addresses can keep it there; probes sent to it would then fail
and the kubelet would restart a replica that is working. The probe port answers only
``GET /health`` and ``GET /ready``, without credentials, with caps and deadlines of its
own, sized for the kubelet: it sends one short request per probe and closes. No Service
or Ingress leads to it, so clients of the API cannot fill it.

The port is served by the API's own process and event loop, so a replica whose loop is
stuck fails its liveness probe as it should.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator

import uvicorn
from fastapi.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from devboxes_sdk.models import Health

from ..config.connections import ConnectionSettings
from .connections import server_options

# The kubelet's probe sends its request at once and closes the connection after the
# answer, and a node probes a pod a few times at once at most; anything slower or more
# numerous is not a kubelet.
PROBE_CONNECTIONS = ConnectionSettings(
    header_timeout_seconds=2,
    body_timeout_seconds=2,
    keep_alive_timeout_seconds=2,
    max_total=32,
    max_per_client=8,
)
PROBE_PATHS = ("/health", "/ready")
ONLY_PROBES = "this port answers only " + " and ".join(f"GET {path}" for path in PROBE_PATHS)


def health_answer() -> JSONResponse:
    return JSONResponse(Health(status="ok").model_dump())


def ready_answer(problem: str | None) -> JSONResponse:
    """``/ready``'s answer, given why this replica is not ready (None: it is)."""
    if problem is None:
        return JSONResponse({"status": "ready"})
    return JSONResponse({"status": "not ready", "detail": problem}, status_code=503)


class ProbeApp:
    """The probe port's application: ``/health`` and ``/ready``, answered as the API's
    port answers them, and a precise 404 or 405 for anything else."""

    def __init__(self, readiness_problem: Callable[[], str | None]) -> None:
        self.readiness_problem = readiness_problem

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path not in PROBE_PATHS:
            answer = JSONResponse({"detail": f"not found: {ONLY_PROBES}"}, status_code=404)
        elif scope["method"] != "GET":
            answer = JSONResponse(
                {"detail": f"method {scope['method']} not allowed: {path} answers only GET"},
                status_code=405,
                headers={"Allow": "GET"},
            )
        elif path == "/health":
            answer = health_answer()
        else:
            answer = ready_answer(self.readiness_problem())
        await answer(scope, receive, send)


def probe_socket(host: str, port: int) -> socket.socket:
    """The probe port's listening socket, bound before anything starts, so that a port
    that cannot be had stops the controller with a message instead of leaving it running
    without probes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


class _ProbeServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The API's server takes the signals, and stops this one when it stops.
        yield


class ServerWithProbes(uvicorn.Server):
    """The API's server, which also serves the probe port on ``sock`` from the moment the
    API's port listens until the API's server has stopped."""

    def __init__(
        self,
        config: uvicorn.Config,
        readiness_problem: Callable[[], str | None],
        sock: socket.socket,
    ) -> None:
        super().__init__(config)
        probes = uvicorn.Config(
            ProbeApp(readiness_problem),
            lifespan="off",
            log_config=None,
            access_log=False,
            # Its answers are immediate: nothing is left to wait for when it stops.
            timeout_graceful_shutdown=1,
            **server_options(PROBE_CONNECTIONS, metered=False),
        )
        self.probes = _ProbeServer(probes)
        self.probe_sockets = [sock]
        self._probing: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self._probing = asyncio.create_task(self.probes.serve(self.probe_sockets))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().shutdown(sockets)
        finally:
            if self._probing is not None:
                self.probes.should_exit = True
                await self._probing
