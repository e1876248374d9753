"""The controller's real application served by uvicorn with the controller's own protocol
and options, on loopback, over a store whose caches a test fills by hand: no cluster runs,
the caches are never started."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import uvicorn
import yaml
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.control.lifecycle import Lifecycle
from devboxes_controller.k8s.probe import ApiserverProbe
from devboxes_controller.state import slim
from devboxes_controller.state.ended_sessions import EndedSessions, SharedEndedSessions
from devboxes_controller.state.store import BoxStore
from devboxes_controller.state.watches import DEPLOYMENTS, PODS, SERVICES, Watches
from devboxes_controller.web.app import create_app
from devboxes_controller.web.connections import server_options
from devboxes_controller.web.identity.base import Verifier
from devboxes_controller.web.readiness import Readiness
from kubernetes import client
from support import REPO, recorded, wait_for


def settings_with_connections(connections: Mapping[str, Any]) -> Settings:
    """The testbed's settings (testbed/settings.yaml) with these ``connections`` settings
    (camelCase keys)."""
    data = yaml.safe_load((REPO / "testbed" / "settings.yaml").read_text())
    return settings_from_mapping({**data, "connections": connections})


def recorded_store(
    settings: Settings,
    api: client.ApiClient,
    boxes: Sequence[str],
    ready_box: str,
    pod_address: str,
    annotations: Mapping[str, Mapping[str, str]],
) -> BoxStore:
    """A store of the recorded ``boxes``: their Deployments, with the ``annotations`` given
    for each box added, their Services, and the pod of ``ready_box``, whose address is
    moved to ``pod_address`` where the test serves what stands in for the box."""
    watches = Watches(settings, api)
    store = BoxStore(settings, watches)
    for box in boxes:
        (deployment,) = recorded("deployments", box)
        deployment["metadata"]["annotations"].update(annotations.get(box, {}))
        watches[DEPLOYMENTS]._put(slim.deployment(deployment))
        for service in recorded("services", box):
            watches[SERVICES]._put(slim.service(service))
    (pod,) = recorded("pods", ready_box)
    pod["status"]["podIP"] = pod_address
    watches[PODS]._put(slim.pod(pod))
    for box in boxes:
        store._changed_box(box)
    return store


class _Ready(Readiness):
    def write_problem(self) -> str | None:
        return None

    def problem(self) -> str | None:
        return None


class Served:
    """Applications served for one test; each ``start`` answers its port."""

    def __init__(self) -> None:
        self._servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(
        self,
        settings: Settings,
        store: BoxStore,
        api: client.ApiClient,
        token: str,
        verifiers: Sequence[Verifier] = (),
        ended: EndedSessions | None = None,
        port: int = 0,
    ) -> int:
        """Serve the app on loopback (on ``port``, any free one when 0); answers the port.
        Without ``ended``, sign-outs are recorded as the controller records them, which
        needs a cluster."""
        lifecycle = Lifecycle(store, api, activity_key=b"k" * 32)
        shared = SharedEndedSessions(settings.namespace, api)
        readiness = _Ready(ApiserverProbe(api), store, shared)
        app = create_app(store, lifecycle, token, readiness, ended or shared, verifiers=verifiers)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="error",
            **server_options(settings.connections),
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        self._servers.append((server, thread))
        wait_for(lambda: server.started, timeout=60, interval=0.05)
        port: int = server.servers[0].sockets[0].getsockname()[1]
        return port

    def stop(self) -> None:
        for server, thread in self._servers:
            server.should_exit = True
            thread.join(10)
