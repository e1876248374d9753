"""REST routes under ``/devboxes/api/``: the browser's way to the controller.

The browser authenticates to Jupyter; the server extension talks to the controller
with its own token, which is never part of any response. SDK calls block, so each one
runs on the extension's thread pool, off the event loop.

A server that serves the several clusters of the SDK configuration file takes
``?cluster=NAME`` on every route that reaches a controller (none: the default cluster);
the reads of boxes, capabilities, whoami and GPU availability also take ``?cluster=*``,
every cluster's answer at once, and a create ``?cluster=auto``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import Executor
from http import HTTPStatus
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from devboxes_jupyter import box_start, progress
from devboxes_jupyter.client_factory import ClientFactory, ClusterSet
from devboxes_jupyter.models import (
    ALL_CLUSTERS,
    RequestRejected,
    answers_json,
    devbox_json,
    error_body,
    parse_cluster,
    parse_create,
    parse_extend,
    parse_name,
    parse_preset,
    parse_purge,
    parse_wait,
    parse_watch,
)
from devboxes_jupyter.watcher import Watcher
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import ConfigurationError, DevboxesError
from devboxes_sdk.models import API_PREFIX, DevboxCreate

API_ROOT = "/devboxes/api"
FACTORY_SETTING = "devboxes_client_factory"
EXECUTOR_SETTING = "devboxes_executor"
WATCHER_SETTING = "devboxes_watcher"
# The clusters of the SDK configuration file, on a server that serves several; absent
# on a server of one controller.
CLUSTERS_SETTING = "devboxes_clusters"
AUTH_RESOURCE = "devboxes"
_NAME = r"(?P<name>[^/]+)"


class DevboxesHandler(ExtensionHandlerMixin, APIHandler):
    """Shared plumbing: run an SDK call off the loop and answer JSON either way."""

    auth_resource = AUTH_RESOURCE

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Jupyter's own refusals (403, 404, ...) in the same ``{"detail"}`` shape."""
        try:
            detail = HTTPStatus(status_code).phrase
        except ValueError:
            detail = "Error"
        exc_info = kwargs.get("exc_info")
        if exc_info is not None and isinstance(exc_info[1], web.HTTPError):
            detail = exc_info[1].log_message or detail
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"detail": detail}))

    def _reply(self, status: int, body: Any) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    @property
    def _clusters(self) -> ClusterSet | None:
        several: ClusterSet | None = self.settings.get(CLUSTERS_SETTING)
        return several

    def _cluster(self, *, every: bool = False, auto: bool = False) -> str | None:
        """The cluster the request names, checked (see :func:`parse_cluster`)."""
        several = self._clusters
        try:
            names = several.names() if several is not None else None
        except ConfigurationError as error:
            status, body = error_body(error)
            raise RequestRejected(status, body["detail"]) from None
        return parse_cluster(self.request.query_arguments, names, every=every, auto=auto)

    def _client(self, cluster: str | None, wait_seconds: float) -> Client:
        several = self._clusters
        if several is not None:
            return several.client(cluster, wait_seconds)
        factory: ClientFactory = self.settings[FACTORY_SETTING]
        return factory(wait_seconds)

    async def _respond(
        self,
        action: Callable[[Client], Any],
        *,
        status: int = 200,
        wait_seconds: float = 0.0,
        cluster: str | None = None,
    ) -> None:
        """``action`` with the client of ``cluster``; with ``*``, with every cluster's at
        once, each answer or error an entry of one 200 answer."""
        if cluster == ALL_CLUSTERS:
            several = self._clusters
            assert several is not None, "parse_cluster takes * only with several clusters"
            await self._run(lambda: answers_json(several.merged().ask(action)), status)
            return
        await self._run(lambda: action(self._client(cluster, wait_seconds)), status)

    async def _run(self, run: Callable[[], Any], status: int) -> None:
        executor: Executor = self.settings[EXECUTOR_SETTING]
        try:
            payload = await asyncio.get_running_loop().run_in_executor(executor, run)
            if self.request.method != "GET":
                watcher: Watcher = self.settings[WATCHER_SETTING]
                watcher.refresh_now()
        except DevboxesError as error:
            status, body = error_body(error)
            # Status and class are enough for an operator; the detail may quote user
            # input. Nothing here can hold the token.
            self.log.info(
                "devboxes: %s %s -> %s %s",
                self.request.method,
                self.request.path,
                status,
                type(error).__name__,
            )
            self._reply(status, body)
            return
        self._reply(status, payload)

    def _reject(self, error: RequestRejected) -> None:
        self._reply(error.status, error.body())


def _box_json(box: Devbox) -> dict[str, Any]:
    return box.model_dump(mode="json")


class CapabilitiesHandler(DevboxesHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        try:
            cluster = self._cluster(every=True)
        except RequestRejected as error:
            self._reject(error)
            return
        await self._respond(
            lambda client: client.capabilities().model_dump(mode="json"), cluster=cluster
        )


class WhoAmIHandler(DevboxesHandler):
    """Whom the controller takes this server's requests for, so the sidebar can say so."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        try:
            cluster = self._cluster(every=True)
        except RequestRejected as error:
            self._reject(error)
            return
        await self._respond(lambda client: client.whoami().model_dump(mode="json"), cluster=cluster)


class AvailabilityHandler(DevboxesHandler):
    """The free devices of each GPU profile, as the controller counts them (``?preset=``
    counts only where that preset's CPU and memory fit too)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        try:
            cluster = self._cluster(every=True)
            preset = parse_preset(self.request.query_arguments)
        except RequestRejected as error:
            self._reject(error)
            return
        await self._respond(
            lambda client: client.gpu.availability(preset).model_dump(mode="json"),
            cluster=cluster,
        )


def _gpu_choice(request: DevboxCreate) -> bool | str | None:
    """A create's accelerator as ``Clusters.create`` takes it: a profile's name, True for
    each cluster's default profile, None for CPU only."""
    if request.gpu is None:
        return None
    return request.gpu.profile or True


class DevboxCollectionHandler(DevboxesHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        try:
            cluster = self._cluster(every=True)
        except RequestRejected as error:
            self._reject(error)
            return
        await self._respond(
            lambda client: {"items": [_box_json(box) for box in client.list()]}, cluster=cluster
        )

    @web.authenticated
    @authorized
    async def post(self) -> None:
        try:
            request = parse_create(self.request.body)
            cluster = self._cluster(auto=True)
        except RequestRejected as error:
            self._reject(error)
            return
        several = self._clusters
        if cluster is not None and several is not None:
            # Where the box went and why: a named cluster "as asked", or where auto
            # found a free device.
            def placed() -> dict[str, Any]:
                made = several.merged().create(
                    request.name,
                    cluster=cluster,
                    preset=request.preset,
                    ttl_hours=request.ttl_hours,
                    repository=request.repository,
                    gpu=_gpu_choice(request),
                    image=request.image,
                )
                return {"cluster": made.cluster, "reason": made.reason, "box": _box_json(made.box)}

            await self._run(placed, 201)
            return

        def action(client: Client) -> dict[str, Any]:
            box = client.create(
                request.name,
                preset=request.preset,
                ttl_hours=request.ttl_hours,
                repository=request.repository,
                gpu=request.gpu,
                image=request.image,
            )
            return _box_json(box)

        await self._respond(action, status=201)


class DevboxHandler(DevboxesHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        try:
            name = parse_name(name)
            wait = parse_wait(self.request.query_arguments)
            cluster = self._cluster()
        except RequestRejected as error:
            self._reject(error)
            return
        if wait is None:
            await self._respond(lambda client: _box_json(client.get(name)), cluster=cluster)
            return

        def action(client: Client) -> dict[str, Any]:
            data = client.request_json(
                "GET",
                f"{API_PREFIX}/devboxes/{name}",
                params={"wait": wait.wait, "timeout": wait.timeout},
            )
            return devbox_json(data)

        await self._respond(action, wait_seconds=wait.timeout, cluster=cluster)

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        try:
            name = parse_name(name)
            purge = parse_purge(self.request.query_arguments)
            cluster = self._cluster()
        except RequestRejected as error:
            self._reject(error)
            return
        await self._respond(
            lambda client: client.delete(name, purge=purge).model_dump(mode="json"),
            cluster=cluster,
        )


# What POST .../start and .../stop do; the route takes exactly these words.
ACTIONS: dict[str, Callable[[Client, str], Devbox]] = {"start": Client.start, "stop": Client.stop}


class DevboxActionHandler(DevboxesHandler):
    @web.authenticated
    @authorized
    async def post(self, name: str, action: str) -> None:
        try:
            name = parse_name(name)
            cluster = self._cluster()
        except RequestRejected as error:
            self._reject(error)
            return
        call = ACTIONS[action]
        await self._respond(lambda client: _box_json(call(client, name)), cluster=cluster)


class ExtendHandler(DevboxesHandler):
    """Pushes a running box's auto-stop time back, as a stop warning's Extend asks."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        try:
            name = parse_name(name)
            request = parse_extend(self.request.body)
            cluster = self._cluster()
        except RequestRejected as error:
            self._reject(error)
            return
        await self._respond(
            lambda client: _box_json(client.extend(name, request.hours)), cluster=cluster
        )


class WatchHandler(DevboxesHandler):
    """The boxes, GPU availability and devbox kernel starts, held until they change."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        try:
            query = parse_watch(self.request.query_arguments)
        except RequestRejected as error:
            self._reject(error)
            return
        watcher: Watcher = self.settings[WATCHER_SETTING]
        view = await watcher.wait(query.after, query.timeout)
        self._reply(200, view.model_dump(mode="json"))


class KernelProgressHandler(DevboxesHandler):
    """A devbox kernel start the user is done with: one still waiting for its box is
    cancelled, a failed one is dismissed.

    The record lives in the server, so a dismissed failure is gone from every page and
    stays gone after a reload; dismissing never reaches the controller.
    """

    @web.authenticated
    @authorized
    async def delete(self, kernel_id: str) -> None:
        # The start ends on its own thread, where it gives back the box it took and
        # then fails the kernel start with the reason.
        if box_start.STARTS.cancel(kernel_id):
            self._reply(202, {"kernel_id": kernel_id, "cancelled": True})
            return
        if not progress.REGISTRY.dismiss(kernel_id):
            self._reply(404, {"detail": "no devbox kernel start of that id waits or failed"})
            return
        self._reply(200, {"kernel_id": kernel_id, "dismissed": True})


class FailedKernelsHandler(DevboxesHandler):
    """Every failed devbox kernel start, dismissed at once (the sidebar's Clear failures).

    Starts still under way stay, as a single dismissal leaves them.
    """

    @web.authenticated
    @authorized
    async def delete(self) -> None:
        failed = [k.kernel_id for k in progress.REGISTRY.snapshot() if k.phase == progress.FAILED]
        dismissed = [kernel_id for kernel_id in failed if progress.REGISTRY.dismiss(kernel_id)]
        self._reply(200, {"dismissed": dismissed})


_ACTION = f"(?P<action>{'|'.join(ACTIONS)})"


def routes() -> list[tuple[str, type[DevboxesHandler]]]:
    """Every route of the extension, relative to the server's base URL."""
    return [
        (f"{API_ROOT}/capabilities", CapabilitiesHandler),
        (f"{API_ROOT}/whoami", WhoAmIHandler),
        (f"{API_ROOT}/gpu/availability", AvailabilityHandler),
        (f"{API_ROOT}/watch", WatchHandler),
        (f"{API_ROOT}/kernels", FailedKernelsHandler),
        (f"{API_ROOT}/kernels/(?P<kernel_id>[^/]+)", KernelProgressHandler),
        (f"{API_ROOT}/devboxes", DevboxCollectionHandler),
        (f"{API_ROOT}/devboxes/{_NAME}", DevboxHandler),
        (f"{API_ROOT}/devboxes/{_NAME}/{_ACTION}", DevboxActionHandler),
        (f"{API_ROOT}/devboxes/{_NAME}/extend", ExtendHandler),
    ]
