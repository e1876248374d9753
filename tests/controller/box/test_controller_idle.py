"""Idle boxes go back to the pool: the real GPU sampler, run on this machine with a stub
nvidia-smi, writes samples that the real activity agent reads and reports to the
controller on the testbed, which stops boxes nobody uses."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from devboxes_controller.box import activity, naming, render
from devboxes_controller.box.spec import BoxSpec
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.k8s import timestamps
from devboxes_controller.state import slim
from devboxes_testbed import MIG
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from support import StartController, event_messages, wait_for

WORKSPACE = Path(__file__).resolve().parents[3] / "workspace"
AGENT = WORKSPACE / "devbox-activity-agent"
SAMPLER = WORKSPACE / "devbox-gpu-sampler"
MIG_REQUEST = {"profile": MIG}
# Six seconds: short enough to watch, while the agent reports every few seconds.
WINDOW_MINUTES = 0.1


def call(process: Controller, method: str, path: str, **kwargs: Any) -> requests.Response:
    kwargs.setdefault("headers", process.headers())
    return requests.request(method, f"{process.url}/api/v1{path}", timeout=30, **kwargs)


def box(process: Controller, name: str) -> dict[str, Any]:
    response = call(process, "GET", f"/devboxes/{name}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def credential(kube: Any, namespace: str, name: str) -> str:
    secret = client.CoreV1Api(kube).read_namespaced_secret(
        naming.object_names(name).activity_secret, namespace
    )
    return base64.b64decode(secret.data["credential"]).decode()


def report(
    process: Controller, name: str, token: str | None, body: Any = None
) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return call(
        process,
        "POST",
        f"/devboxes/{name}/activity",
        headers=headers,
        json={"ssh_sessions": 0, "busy_kernels": 0, "gpu_utilization": 1} if body is None else body,
    )


class Agents:
    """Per box, as in its pod: the sampler with a stub nvidia-smi on its PATH (the main
    container, which has the GPU) and the agent reading the samples it writes (the
    sidecar, which has none), both real processes on this machine."""

    def __init__(self, process: Controller, kube: Any, namespace: str, tmp: Path) -> None:
        self.process, self.kube, self.namespace, self.tmp = process, kube, namespace, tmp
        self.running: list[subprocess.Popen[bytes]] = []

    def utilization(self, name: str, percent: int) -> None:
        (self.tmp / f"{name}-gpu").write_text(f"{percent}\n")

    def credential_file(self, name: str) -> Path:
        return self.tmp / f"{name}-credential"

    def start(self, name: str, percent: int) -> None:
        self.utilization(name, percent)
        tools = self.tmp / f"{name}-bin"
        tools.mkdir()
        stub = tools / "nvidia-smi"
        stub.write_text(f'#!/bin/sh\ncat "{self.tmp / f"{name}-gpu"}"\n')
        stub.chmod(0o755)
        samples = self.tmp / f"{name}-samples"
        samples.mkdir()
        self.running.append(
            subprocess.Popen(
                ["sh", str(SAMPLER), str(samples)],
                env={
                    **os.environ,
                    "PATH": f"{tools}:{os.environ['PATH']}",
                    "DEVBOX_GPU_SAMPLE_SECONDS": "1",
                },
                stderr=(self.tmp / f"{name}-sampler.log").open("wb"),
            )
        )
        # What the kubelet projects from the box's Secret.
        self.credential_file(name).write_text(credential(self.kube, self.namespace, name))
        self.running.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(AGENT),
                    "--url",
                    f"{self.process.url}/api/v1/devboxes/{name}/activity",
                    "--credential-file",
                    str(self.credential_file(name)),
                    "--interval",
                    "6",
                    "--gpu-samples",
                    str(samples),
                    # Nothing listens on the discard port: no Jupyter, no busy kernel.
                    "--jupyter-url",
                    "http://127.0.0.1:9",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(self.tmp / f"{name}-agent.log").open("wb"),
            )
        )

    def stop(self) -> None:
        for process in self.running:
            process.terminate()
            process.wait(10)


def idle_settings(namespace: str, minutes: float) -> dict[str, Any]:
    settings = example_settings(namespace)
    settings["idle"] = {
        "stopAfterMinutes": minutes,
        "gpuUtilizationPercent": 10,
        "controllerUrl": "http://devboxes.devboxes.svc:8080",
    }
    return settings


@pytest.fixture
def idle_controller(start_controller: StartController, namespace: str) -> Controller:
    return start_controller(idle_settings(namespace, WINDOW_MINUTES))


@pytest.fixture
def agents(
    idle_controller: Controller, kube: Any, namespace: str, tmp_path: Path
) -> Iterator[Agents]:
    running = Agents(idle_controller, kube, namespace, tmp_path)
    yield running
    running.stop()


def test_idle_boxes_stop_busy_and_silent_ones_keep_running(
    idle_controller: Controller, agents: Agents, kube: Any, namespace: str
) -> None:
    process = idle_controller
    for name in ("busy", "quiet", "silent"):
        assert call(process, "POST", "/devboxes", json={"name": name, "gpu": MIG_REQUEST}).ok
    assert call(process, "POST", "/devboxes", json={"name": "cpu"}).ok

    # The agent is a sidecar of the release image, without the GPU, holding the credential.
    template = client.AppsV1Api(kube).read_namespaced_deployment("devbox-quiet", namespace)
    sidecar = next(c for c in template.spec.template.spec.containers if c.name == "activity")
    assert sidecar.image == "devboxes/workspace:0.1.0"
    assert not (sidecar.resources and (sidecar.resources.limits or sidecar.resources.requests))
    # It reads the GPU samples that the main container, which has the GPU, writes.
    main = next(c for c in template.spec.template.spec.containers if c.name == "devbox")
    assert {m.name: m.read_only for m in main.volume_mounts}["gpu-samples"] is None
    assert {m.name: m.read_only for m in sidecar.volume_mounts}["gpu-samples"] is True
    cpu = client.AppsV1Api(kube).read_namespaced_deployment("devbox-cpu", namespace)
    assert [c.name for c in cpu.spec.template.spec.containers] == ["devbox"], (
        "CPU boxes are never stopped for idleness by default, so they run no agent"
    )

    agents.start("busy", 80)
    agents.start("quiet", 2)

    def stopped(name: str) -> Callable[[], dict[str, Any] | None]:
        def check() -> dict[str, Any] | None:
            current = box(process, name)
            return current if current["state"] == "stopped" else None

        check.__doc__ = f"{name} is stopped for idleness"
        return check

    quiet = wait_for(stopped("quiet"), timeout=120)
    # Its pod may still be shutting down, which the message then adds.
    assert quiet["message"].startswith(
        f"Stopped after {WINDOW_MINUTES:g} min idle; start to continue."
    )
    assert quiet["activity"] is None
    assert wait_for(lambda: event_messages(kube, namespace, "quiet", "IdleStopped"), timeout=60)
    # Warned first, once, with the utilization that made it idle: the window is shorter
    # than the warning time, so the warning came as soon as the box was idle.
    (warning,) = event_messages(kube, namespace, "quiet", "StopWarning")
    assert warning.startswith("Box quiet stops in 1 min, at "), warning
    assert ": idle since " in warning
    assert ", GPU 2% busy. " in warning
    # Like any stop, an idle stop frees the box's node port and keeps it for its next start.
    services = client.CoreV1Api(kube).list_namespaced_service(namespace).items
    assert "devbox-quiet-ssh" not in [s.metadata.name for s in services]
    annotations = (
        client.AppsV1Api(kube).read_namespaced_deployment("devbox-quiet", namespace)
    ).metadata.annotations
    assert annotations["devboxes.io/ssh-node-port"].isdigit()

    busy = box(process, "busy")
    assert busy["state"] != "stopped", busy
    assert busy["activity"]["state"] == "active"
    silent = box(process, "silent")
    assert silent["state"] != "stopped", silent
    assert silent["activity"] == {"state": "unknown", "idle_since": None, "stops_at": None}

    # The busy box was only kept because it was busy: once its GPU idles, and the busy
    # samples have left the agent's window, it stops too.
    agents.utilization("busy", 3)
    wait_for(stopped("busy"), timeout=180)
    assert box(process, "silent")["state"] != "stopped"
    assert not event_messages(kube, namespace, "silent", "IdleStopped")
    assert not event_messages(kube, namespace, "silent", "StopWarning")
    for name in ("busy", "quiet", "silent", "cpu"):
        call(process, "DELETE", f"/devboxes/{name}", params={"purge": "true"})


def test_only_the_boxs_own_credential_may_report(
    idle_controller: Controller, kube: Any, namespace: str
) -> None:
    process = idle_controller
    for name in ("mine", "theirs"):
        assert call(process, "POST", "/devboxes", json={"name": name, "gpu": MIG_REQUEST}).ok
    mine = credential(kube, namespace, "mine")
    theirs = credential(kube, namespace, "theirs")
    assert mine != theirs

    refusals = {
        "no credential": report(process, "mine", None),
        "a forged credential": report(process, "mine", "A" * len(mine)),
        "another box's credential": report(process, "mine", theirs),
        "the operator token": report(process, "mine", process.token),
        "an unknown box": report(process, "nobody", mine),
        "a bad name": report(process, "Not_A_Box", mine),
    }
    for why, response in refusals.items():
        assert response.status_code == 401, (why, response.text)
        assert response.json() == {"detail": "invalid box credential"} or why == "no credential"
    assert box(process, "mine")["activity"]["state"] == "unknown"

    oversize = report(process, "mine", mine, {"ssh_sessions": 0, "pad": "x" * 2048})
    assert oversize.status_code == 413, oversize.text
    invalid = report(process, "mine", mine, {"ssh_sessions": -1, "busy_kernels": 0})
    assert invalid.status_code == 422, invalid.text
    assert [e["loc"] for e in invalid.json()["detail"]] == [["body", "ssh_sessions"]]
    too_soon = report(process, "mine", mine)
    assert too_soon.status_code == 429, too_soon.text
    assert too_soon.headers["Retry-After"] == "5"

    accepted = report(process, "theirs", theirs, {"ssh_sessions": 2, "busy_kernels": 0})
    assert accepted.status_code == 204, accepted.text
    assert wait_for(lambda: box(process, "theirs")["activity"]["state"] == "active", timeout=60)

    # Not part of the public API: the operator's OpenAPI document does not list it.
    openapi = requests.get(f"{process.url}/openapi.json", headers=process.headers(), timeout=30)
    paths = openapi.json()["paths"]
    assert not [path for path in paths if path.endswith("/activity")]
    log = process.log.read_text()
    assert mine not in log
    assert theirs not in log
    for name in ("mine", "theirs"):
        call(process, "DELETE", f"/devboxes/{name}", params={"purge": "true"})


def test_a_rotated_key_reaches_running_boxes_without_a_restart(
    start_controller: StartController, kube: Any, namespace: str, tmp_path: Path
) -> None:
    settings = idle_settings(namespace, 60)
    first = start_controller(settings)
    assert call(first, "POST", "/devboxes", json={"name": "rotor", "gpu": MIG_REQUEST}).ok
    apps = client.AppsV1Api(kube)

    def key_noted() -> str | None:
        deployment = apps.read_namespaced_deployment("devbox-rotor", namespace)
        return (deployment.metadata.annotations or {}).get("devboxes.io/activity-key")

    first_key = wait_for(key_noted, timeout=60)
    old = credential(kube, namespace, "rotor")
    agents = Agents(first, kube, namespace, tmp_path)
    try:
        agents.start("rotor", 80)
        wait_for(lambda: box(first, "rotor")["activity"]["state"] == "active", timeout=60)
        before = apps.read_namespaced_deployment("devbox-rotor", namespace)

        # A new operator token: the replicas restart with it, behind the same address.
        first.stop()
        second = start_controller(settings, port=first.port)
        assert second.token != first.token

        def renewed() -> str | None:
            current = credential(kube, namespace, "rotor")
            return current if current != old else None

        new = wait_for(renewed, timeout=60)
        assert wait_for(lambda: key_noted() not in (None, first_key), timeout=60)
        after = apps.read_namespaced_deployment("devbox-rotor", namespace)
        assert after.metadata.uid == before.metadata.uid
        # The same pod template, so the same ReplicaSet and pod: no restart. (The
        # Deployment's generation counts annotation changes too, so it says nothing here.)
        assert after.spec.template == before.spec.template
        revision = "deployment.kubernetes.io/revision"
        assert after.metadata.annotations[revision] == before.metadata.annotations[revision]
        assert after.spec.replicas == 1
        assert box(second, "rotor")["restart_required"] is False

        assert report(second, "rotor", old).status_code == 401
        # The running agent still holds the old credential: refused, so it cannot tell the
        # controller that the GPU went quiet.
        agents.utilization("rotor", 2)
        log = tmp_path / "rotor-agent.log"
        wait_for(lambda: "the controller answered 401" in log.read_text(), timeout=60)
        accepted = report(second, "rotor", new, {"ssh_sessions": 1, "busy_kernels": 0})
        assert accepted.status_code == 204, accepted.text
        assert box(second, "rotor")["activity"]["state"] == "active"

        # The kubelet updates the mounted Secret in place; the agent reads the file before
        # each report, so its reports count again and the quiet GPU shows.
        agents.credential_file("rotor").write_text(new)
        wait_for(lambda: box(second, "rotor")["activity"]["state"] == "idle", timeout=120)
        assert box(second, "rotor")["state"] != "stopped"
        assert old not in log.read_text()
        assert new not in log.read_text()
    finally:
        agents.stop()
    call(second, "DELETE", "/devboxes/rotor", params={"purge": "true"})


def test_which_boxes_need_their_credential_written() -> None:
    settings = settings_from_mapping(
        {"idle": {"cpuStopAfterMinutes": 30, "controllerUrl": "http://devboxes:8080"}}
    )
    spec = BoxSpec(
        name="atlas",
        preset="small",
        ttl_hours=1,
        repository=None,
        expires_at=timestamps.parse_timestamp("2030-01-01T00:00:00Z"),
        gpu=None,
    )
    with_agent = render.render_deployment(spec, settings)
    without_agent = render.render_deployment(spec, settings_from_mapping({}))
    old, new = activity.activity_key("o" * 32), activity.activity_key("n" * 32)
    assert activity.key_id(old) != activity.key_id(new)

    # The reconciler sees the watch cache's slim Deployments, which drop the pod template.
    assert activity.credential_outdated(slim.deployment(with_agent), new), "never written"
    with_agent["metadata"]["annotations"][activity.ANNOTATION_CREDENTIAL_KEY] = activity.key_id(old)
    for seen in (with_agent, slim.deployment(with_agent)):
        assert activity.credential_outdated(seen, new), "written with the rotated key"
        assert not activity.credential_outdated(seen, old)
    for seen in (without_agent, slim.deployment(without_agent)):
        assert not activity.credential_outdated(seen, new), "no agent, nothing to write"
