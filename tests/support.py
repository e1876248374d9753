"""Helpers shared by the tests: polling, the controller's HTTP API, a box's Events and
objects, the leader's Lease, browsers, helm, the CLI, kubeconfigs."""

from __future__ import annotations

import contextlib
import http.server
import json
import secrets
import socketserver
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests
import yaml
from devboxes_controller.box import naming
from devboxes_controller.box.spec import BoxSpec
from devboxes_controller.config.gpu import GpuProfileConfig
from devboxes_controller.k8s.kube import Unavailable
from devboxes_controller.state.ended_sessions import Change, Patch
from devboxes_testbed import api
from devboxes_testbed.cluster import schedulable
from devboxes_testbed.controller import Controller, example_settings, without_gpu_profiles
from devboxes_testbed.nodes import KWOK_ANNOTATION, POOL_LABEL
from kubernetes import client

from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import BoxNotReady
from devboxes_sdk.models import API_PREFIX, IDEMPOTENCY_HEADER, GpuAvailability, GpuProfile

REPO = Path(__file__).resolve().parent.parent
# What the testbed's apiserver sent for boxes in several states (tests/data/record_box_objects.py).
RECORDED_BOXES = REPO / "tests" / "data" / "box_objects.json"
# The Lease the controllers of one namespace elect their leader with.
LEASE = "devboxes-controller"


def wait_for(predicate: Any, timeout: float = 60, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s: {predicate.__doc__ or predicate}")
        time.sleep(interval)


def wait_for_value(read: Any, expected: Any, timeout: float = 60, interval: float = 0.2) -> None:
    """Poll ``read()`` until it equals ``expected``; on timeout fail with the last value read."""
    deadline = time.monotonic() + timeout
    while (value := read()) != expected:
        if time.monotonic() > deadline:
            pytest.fail(f"still {value!r} after {timeout}s, expected {expected!r}")
        time.sleep(interval)


def recorded(kind: str, box: str) -> list[dict[str, Any]]:
    """Fresh copies of one box's recorded objects of one kind."""
    objects: list[dict[str, Any]] = json.loads(RECORDED_BOXES.read_text())[kind]
    return [o for o in objects if naming.box_name_of(o) == box]


def event_messages(kube: Any, namespace: str, name: str, reason: str) -> list[str]:
    """The messages of the box's Events of this reason, which name its Deployment."""
    deployment = naming.object_names(name).deployment
    return [
        str(e.message)
        for e in client.CoreV1Api(kube).list_namespaced_event(namespace).items
        if e.reason == reason and e.involved_object.name == deployment
    ]


def lease_holder(kube: Any, namespace: str) -> str | None:
    """The identity of the namespace's leader; None before any controller took the Lease."""
    try:
        lease = client.CoordinationV1Api(kube).read_namespaced_lease(LEASE, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    holder = lease.spec.holder_identity
    return str(holder) if holder else None


def two_hour_spec(
    name: str, gpu: GpuProfileConfig | None = None, owner: str | None = None
) -> BoxSpec:
    """A small box with two hours left, to write its objects as the controller renders them."""
    return BoxSpec(
        name=name,
        preset="small",
        ttl_hours=2,
        repository=None,
        expires_at=datetime.now(UTC) + timedelta(hours=2),
        gpu=gpu,
        owner=owner,
    )


def wait_until_no_pod_requests(kube: Any, resource: str, timeout: float = 300) -> None:
    """Wait until no pod of the cluster, pending ones included, asks for ``resource``.

    Pods outlive the test that made them while its namespace is being deleted, and a
    pending one takes the next device freed: a test that counts devices starts after them.
    """
    from kubernetes import client

    core = client.CoreV1Api(kube)

    def asks(pod: Any) -> bool:
        for container in pod.spec.containers:
            wants = {**(container.resources.limits or {}), **(container.resources.requests or {})}
            if resource in wants:
                return True
        return False

    def none_asks() -> bool:
        """no pod of the cluster asks for the resource"""
        pods = core.list_pod_for_all_namespaces().items
        return not any(asks(p) for p in pods if p.status.phase not in ("Succeeded", "Failed"))

    wait_for(none_asks, timeout=timeout)


def served_profile(controller_client: Client, name: str) -> GpuProfile:
    """The GPU profile ``name`` of the controller's catalog, which must serve it."""
    profile = controller_client.capabilities().gpu.profile(name)
    assert profile is not None, "the session's controller serves the example GPU profiles"
    return profile


# An L4 profile as the controller's catalog describes one, for the words and widgets that
# show a catalog.
L4_PROFILE = GpuProfile(
    name="nvidia-l4",
    display_name="NVIDIA L4",
    description="One dedicated L4",
    resource_name="nvidia.com/gpu",
    count=1,
    default=True,
)


class _Blocked(Exception):
    """Ends a filler box's wait: the scheduler cannot place it."""


# More boxes than any node pool of the testbed has devices of one profile.
FILL_LIMIT = 16


def fill_profile_until_blocked(
    controller_client: Client, profile: str, cleanup: list[str], prefix: str = "fill-"
) -> None:
    """Create boxes of GPU profile ``profile`` until the scheduler cannot place one.

    Afterwards every device of the profile is taken, however many the node pools have,
    and the last box created waits for one. Each box goes into ``cleanup`` as it is
    created; its name is ``prefix``, its number and a random suffix. A box that neither
    becomes ready nor is blocked fails the test, and so do ``FILL_LIMIT`` boxes that were
    all placed.
    """

    def stop_when_blocked(box: Devbox) -> None:
        if (box.message or "").startswith("Scheduling blocked"):
            raise _Blocked

    for index in range(FILL_LIMIT):
        filler = f"{prefix}{index}-{secrets.token_hex(3)}"
        controller_client.create(filler, gpu=profile, ttl_hours=1)
        cleanup.append(filler)
        try:
            controller_client.wait_ready(filler, 120, on_update=stop_when_blocked)
        except _Blocked:
            return
        except BoxNotReady as error:
            pytest.fail(f"filler box {filler} did not become ready: {error}")
    pytest.fail(f"{FILL_LIMIT} boxes of {profile} were all placed; cannot exhaust it")


# The ``start_controller`` fixture: settings (the example ones by default) and
# Controller keyword arguments in, a started controller out.
StartController = Callable[..., Controller]


class Api(api.Api):
    """One controller's /api/v1: how every test drives it over HTTP.

    ``request``, ``create``, ``get``, ``verb`` and ``delete`` return the response whatever
    its status, for tests about refusals; the others fail the test unless it succeeded.
    """

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller.url, controller.token)
        self.controller = controller

    def create(self, body: dict[str, Any], key: str | None = None) -> requests.Response:
        headers = {IDEMPOTENCY_HEADER: key} if key is not None else None
        return self.request("POST", "/devboxes", json=body, headers=headers)

    def get(self, name: str, **params: Any) -> requests.Response:
        return self.request("GET", f"/devboxes/{name}", params=params)

    def verb(self, name: str, verb: str) -> requests.Response:
        return self.request("POST", f"/devboxes/{name}/{verb}")

    def delete(self, name: str, purge: bool = False) -> requests.Response:
        return self.request("DELETE", f"/devboxes/{name}", params={"purge": str(purge).lower()})

    def call(self, method: str, path: str, timeout: float = 60, **kwargs: Any) -> Any:
        """The JSON body of a 200 answer; any other status fails the test."""
        response = self.request(method, path, timeout, **kwargs)
        assert response.status_code == 200, (
            f"{method} {path}: {response.status_code} {response.text}"
        )
        return response.json()

    def created(self, name: str, **body: Any) -> dict[str, Any]:
        """The new box; any answer but 201 fails the test."""
        response = self.create({"name": name, **body})
        assert response.status_code == 201, response.text
        return dict(response.json())

    def box(self, name: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/devboxes/{name}"))

    def wait_settled(self, name: str, timeout: float = 120) -> dict[str, Any]:
        """The box once it is ready or degraded, or as it is when the server stops holding
        the request."""
        return dict(
            self.call(
                "GET",
                f"/devboxes/{name}",
                params={"wait": "ready", "timeout": str(timeout)},
                timeout=timeout + 30,
            )
        )

    def wait_ready(self, name: str, timeout: float = 120) -> dict[str, Any]:
        """The box once it is ready; fails with what it is instead."""
        box = self.wait_settled(name, timeout)
        assert box["state"] == "ready", f"{name} is not ready after {timeout} s: {box}"
        return box

    def availability(self, preset: str | None = None) -> GpuAvailability:
        params = {"preset": preset} if preset else None
        return GpuAvailability.model_validate(self.call("GET", "/gpu/availability", params=params))

    def free(self, profile: str) -> tuple[int | None, int | None, int]:
        """The profile's available units, its capacity and how many boxes wait for it."""
        entry = self.availability().profile(profile)
        assert entry is not None, f"no availability entry for {profile}"
        return entry.available, entry.capacity, entry.waiting

    def purge(self, *names: str) -> None:
        """Delete boxes with their volumes, as cleanup: a box already gone is no failure."""
        for name in names:
            response = self.delete(name, purge=True)
            assert response.status_code in (200, 404), f"purge {name}: {response.text}"

    def purge_all(self) -> None:
        self.purge(*(box["name"] for box in self.call("GET", "/devboxes")["items"]))


ServerT = TypeVar("ServerT", bound=socketserver.BaseServer)


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A stub server's handler: it answers JSON and logs nothing, the tests read what it
    recorded or what its client made of the answer."""

    def send_json(self, status: int, value: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, header in (headers or {}).items():
            self.send_header(name, header)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class OutageServer(http.server.ThreadingHTTPServer):
    """A stub server on loopback whose ``mode`` makes it answer (``up``), answer 503
    (``failing``) or hold every request until it closes (``hanging``)."""

    def __init__(self, handler: type[OutageHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.mode = "up"
        self.closing = threading.Event()

    def server_close(self) -> None:
        # Held requests end first: closing waits for the threads that answer them.
        self.closing.set()
        super().server_close()


class OutageHandler(JsonHandler):
    server: OutageServer

    def in_outage(self, failure: Any) -> bool:
        """Answer as the server's outage mode says; True when it did (``failure`` is the
        body of a 503)."""
        if self.server.mode == "hanging":
            self.server.closing.wait(60)
            return True
        if self.server.mode == "failing":
            self.send_json(503, failure)
            return True
        return False


@contextlib.contextmanager
def serving(server: ServerT) -> Iterator[ServerT]:
    """``server`` answering on a thread of its own until the block ends, then closed."""
    # A short poll interval: shutdown() waits for the serving loop to look.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# Debian's Chromium, never a downloaded browser build; flags for a closed network.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def need_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.skip(
            f"Debian's chromium is not installed at {CHROMIUM} (make system-packages installs it)"
        )


def launch_chromium(playwright: Any) -> Any:
    """Debian's Chromium, with assertions that wait as long as the controller and
    Kubernetes may take on a loaded machine (Playwright's own default is 5 s)."""
    from playwright.sync_api import expect

    expect.set_options(timeout=60_000)
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


@contextlib.contextmanager
def chromium_browser() -> Iterator[Any]:
    """:func:`launch_chromium`'s browser until the block ends; without Debian's Chromium
    the test is skipped."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            yield browser
        finally:
            browser.close()


def service_account_kubeconfig(
    testbed: Any, kube: Any, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig that authenticates as ``account``, with a token from the TokenRequest API."""
    from kubernetes import client

    token = (
        client.CoreV1Api(kube)
        .create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": 3600}}
        )
        .status.token
    )
    config = yaml.safe_load(testbed.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = account
    path.write_text(yaml.safe_dump(config))
    return path


def helm_binary() -> str:
    """The testbed's helm; the test is skipped when the testbed binaries are not built."""
    from devboxes_testbed import build

    directory = build.installed()
    if directory is None:
        pytest.skip("the testbed binaries (helm) are not built: run `make testbed`")
    return str(directory / "helm")


def helm_run(testbed: Any, *args: str) -> str:
    """Run helm against the testbed and return its output; any failure fails the test."""
    result = subprocess.run(
        [helm_binary(), *args, "--kubeconfig", str(testbed.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_cli(
    script: str, env: Mapping[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The CLI's console script ``script`` run to its end in exactly ``env``: its output,
    whatever its exit code."""
    return subprocess.run(
        [script, *args],
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=timeout,
        check=False,
    )


class MemoryRecord:
    """The shared record of ended sessions as a plain dict, for tests without a cluster.

    Writes apply merge-patch semantics, as the apiserver does; with ``down`` set they fail
    as when the apiserver is unreachable.
    """

    def __init__(self, loaded: bool = True) -> None:
        self.entries: dict[str, str] = {}
        self.loaded = loaded
        self.down = False
        self.patches: list[Patch] = []

    def synced(self) -> bool:
        return self.loaded

    def data(self) -> dict[str, str]:
        return self.entries

    def update(self, change: Change) -> None:
        if self.down:
            raise Unavailable("Kubernetes API unreachable")
        patch = change(self.entries)
        if not patch:
            return
        self.patches.append(patch)
        for key, mark in patch.items():
            if mark is None:
                self.entries.pop(key, None)
            else:
                self.entries[key] = mark


def named_cluster(settings: dict[str, Any], name: str) -> dict[str, Any]:
    """``settings`` of a controller that names its cluster ``name``."""
    return {**settings, "cluster": {"name": name}}


class DevicePool:
    """One kwok node offering ``devices`` devices of a resource of its own, and settings whose
    one GPU profile asks for one of them: nothing else takes or frees them."""

    PROFILE = "pool-gpu"
    DISPLAY = "Pool GPU"

    def __init__(self, kube: Any, devices: int) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.node = f"pool-{suffix}"
        self.resource = f"example.com/pool-{suffix}"
        self.core = client.CoreV1Api(kube)
        offered = {"cpu": "32", "memory": "128Gi", "pods": "110", self.resource: str(devices)}
        self.core.create_node(
            {
                "metadata": {
                    "name": self.node,
                    "annotations": {KWOK_ANNOTATION: "fake"},
                    "labels": {POOL_LABEL: self.node, "type": "kwok"},
                },
                # Given at creation: kwok fills in a large default allocatable for a node it
                # finds without one, which a later patch of ours could race with and lose.
                "status": {"capacity": offered, "allocatable": offered},
            }
        )

        def ready_as_offered() -> bool:
            node = self.core.read_node(self.node)
            return schedulable(node) and node.status.allocatable == offered

        wait_for(ready_as_offered)

    def settings(self, namespace: str) -> dict[str, Any]:
        base = example_settings(namespace)
        settings = without_gpu_profiles(base, *(p["name"] for p in base["gpu"]["profiles"]))
        settings["gpu"]["profiles"] = [
            {
                "name": self.PROFILE,
                "displayName": self.DISPLAY,
                "resourceName": self.resource,
                "count": 1,
                "nodeSelector": {POOL_LABEL: self.node},
            }
        ]
        settings["gpu"]["defaultProfile"] = self.PROFILE
        return settings

    def delete(self) -> None:
        self.core.delete_node(self.node)


class Clock:
    """Time that moves only when the test says so, for code that takes a ``clock``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Person:
    """One person's bearer token against one controller."""

    def __init__(self, controller: Controller, token: str) -> None:
        self.base = controller.url + API_PREFIX
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def __call__(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.session.request(method, self.base + path, timeout=60, **kwargs)

    def close(self) -> None:
        self.session.close()
