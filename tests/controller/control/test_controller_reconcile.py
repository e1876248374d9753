"""Reconciliation on the real testbed: TTL expiry, repair of partial creates, leader election."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import requests
from devboxes_controller.box import naming, render
from devboxes_controller.box.spec import BoxSpec
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.k8s.timestamps import format_timestamp
from devboxes_testbed import MIG
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from live_objects import live_object
from support import DevicePool, StartController, lease_holder, two_hour_spec, wait_for


def api_call(process: Controller, method: str, path: str, **kwargs: Any) -> Any:
    response = requests.request(
        method, f"{process.url}/api/v1{path}", headers=process.headers(), timeout=150, **kwargs
    )
    assert response.ok, response.text
    return response.json()


def box(process: Controller, name: str) -> dict[str, Any]:
    return dict(api_call(process, "GET", f"/devboxes/{name}"))


def expire_now(kube: Any, namespace: str, name: str) -> None:
    """Move the stored deadline into the past, as if the TTL had run out."""
    past = format_timestamp(datetime.now(UTC) - timedelta(minutes=1))
    client.AppsV1Api(kube).patch_namespaced_deployment(
        naming.object_names(name).deployment,
        namespace,
        {"metadata": {"annotations": {naming.ANNOTATION_EXPIRES_AT: past}}},
    )


def events(kube: Any, namespace: str, name: str, reason: str) -> list[Any]:
    found = client.CoreV1Api(kube).list_namespaced_event(namespace).items
    deployment = naming.object_names(name).deployment
    return [
        e
        for e in found
        if e.reason == reason
        and e.involved_object.name == deployment
        and e.involved_object.kind == "Deployment"
    ]


def replicas(kube: Any, namespace: str, name: str) -> int:
    deployment = client.AppsV1Api(kube).read_namespaced_deployment(
        naming.object_names(name).deployment, namespace
    )
    return int(deployment.spec.replicas)


def exists(read: Callable[[str, str], Any], name: str, namespace: str) -> bool:
    return live_object(read, name, namespace) is not None


def expired_in_log(process: Controller, name: str) -> bool:
    for line in process.log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("message") == "box expired" and entry.get("box") == name:
            return True
    return False


def test_ttl_expiry_stops_the_box_and_records_an_event(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    process = start_controller()
    api_call(process, "POST", "/devboxes", json={"name": "brief", "ttl_hours": 1})
    ready = api_call(process, "GET", "/devboxes/brief", params={"wait": "ready", "timeout": 120})
    assert ready["state"] == "ready", ready

    # A Deployment whose record was edited by hand must not stall the other boxes.
    broken = render.render_deployment(
        BoxSpec(
            name="broken",
            preset="small",
            ttl_hours=1,
            repository=None,
            expires_at=datetime.now(UTC),
            gpu=None,
        ),
        settings_from_mapping(example_settings(namespace)),
        replicas=0,
    )
    del broken["metadata"]["annotations"][naming.ANNOTATION_TTL_HOURS]
    client.AppsV1Api(kube).create_namespaced_deployment(namespace, broken)
    expire_now(kube, namespace, "brief")

    def stopped() -> dict[str, Any] | None:
        """the reconciler stops the box once its deadline has passed"""
        current = box(process, "brief")
        return current if current["state"] == "stopped" else None

    stopped_box = wait_for(stopped, timeout=60)
    assert "time to live" in stopped_box["message"]
    assert replicas(kube, namespace, "brief") == 0
    annotations = (
        client.AppsV1Api(kube)
        .read_namespaced_deployment("devbox-brief", namespace)
        .metadata.annotations
    )
    assert naming.ANNOTATION_EXPIRED_AT in annotations
    assert naming.ANNOTATION_EXPIRES_AT in annotations
    assert exists(
        client.CoreV1Api(kube).read_namespaced_persistent_volume_claim,
        "devbox-brief-home",
        namespace,
    )

    expired = wait_for(lambda: events(kube, namespace, "brief", "Expired"), timeout=60)
    assert expired[0].source.component == naming.MANAGER

    # Starting again renews the deadline; the reconciler leaves the box running.
    restarted = api_call(process, "POST", "/devboxes/brief/start")
    assert restarted["expires_at"] > ready["expires_at"]
    assert (
        api_call(process, "GET", "/devboxes/brief", params={"wait": "ready", "timeout": 120})[
            "state"
        ]
        == "ready"
    )
    assert replicas(kube, namespace, "brief") == 1


def test_deleted_service_is_recreated(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    process = start_controller()
    api_call(process, "POST", "/devboxes", json={"name": "lost-service"})
    core = client.CoreV1Api(kube)
    wait_for(lambda: exists(core.read_namespaced_service, "devbox-lost-service-ssh", namespace))
    core.delete_namespaced_service("devbox-lost-service-ssh", namespace)

    wait_for(
        lambda: exists(core.read_namespaced_service, "devbox-lost-service-ssh", namespace),
        timeout=60,
    )
    assert wait_for(lambda: events(kube, namespace, "lost-service", "Repaired"), timeout=60)
    ready = api_call(
        process, "GET", "/devboxes/lost-service", params={"wait": "ready", "timeout": 120}
    )
    assert ready["state"] == "ready", ready


def test_create_interrupted_after_the_deployment_is_completed(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    """Only the Deployment was written, as if the controller died right after it."""
    process = start_controller()
    settings = settings_from_mapping(example_settings(namespace))
    spec = two_hour_spec("half", settings.gpu.profile(MIG))
    client.AppsV1Api(kube).create_namespaced_deployment(
        namespace, render.render_deployment(spec, settings)
    )
    core = client.CoreV1Api(kube)

    def completed() -> bool:
        """the reconciler writes the missing claim and Service"""
        return exists(
            core.read_namespaced_persistent_volume_claim, "devbox-half-home", namespace
        ) and exists(core.read_namespaced_service, "devbox-half-ssh", namespace)

    wait_for(completed, timeout=60)
    ready = api_call(process, "GET", "/devboxes/half", params={"wait": "ready", "timeout": 120})
    assert ready["state"] == "ready", ready
    assert ready["gpu"]["profile"] == MIG

    # One pass usually repairs both; under load a failed write leaves one for the next pass.
    def repaired() -> str:
        """Repaired events name both recreated objects"""
        messages = " ".join(e.message for e in events(kube, namespace, "half", "Repaired"))
        return messages if "PersistentVolumeClaim" in messages and "Service" in messages else ""

    messages = wait_for(repaired, timeout=60)
    # One event per repair: a pass that runs before the cache has seen the objects the
    # pass before created finds them on the apiserver and records nothing.
    assert messages.count("PersistentVolumeClaim") == messages.count("Service") == 1, messages
    # The repair never duplicates: one claim, one Service, one Deployment.
    selector = f"{naming.LABEL_BOX}=half"
    assert (
        len(core.list_namespaced_persistent_volume_claim(namespace, label_selector=selector).items)
        == 1
    )
    assert len(core.list_namespaced_service(namespace, label_selector=selector).items) == 1
    api_call(process, "DELETE", "/devboxes/half", params={"purge": "true"})


def test_create_interrupted_after_the_claim_is_finished_by_the_next_create(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    """Only the claim was written: no box exists, and creating it again reuses the claim."""
    process = start_controller()
    settings = settings_from_mapping(example_settings(namespace))
    spec = two_hour_spec("claimed")
    core = client.CoreV1Api(kube)
    claim = core.create_namespaced_persistent_volume_claim(
        namespace, render.render_pvc(spec, settings)
    )
    response = requests.get(
        f"{process.url}/api/v1/devboxes/claimed", headers=process.headers(), timeout=10
    )
    assert response.status_code == 404

    api_call(process, "POST", "/devboxes", json={"name": "claimed"})
    ready = api_call(process, "GET", "/devboxes/claimed", params={"wait": "ready", "timeout": 120})
    assert ready["state"] == "ready", ready
    reused = core.read_namespaced_persistent_volume_claim("devbox-claimed-home", namespace)
    assert reused.metadata.uid == claim.metadata.uid


def test_only_the_leader_expires_boxes_and_a_survivor_takes_over(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    first = start_controller(lease_seconds=10)
    second = start_controller(lease_seconds=10)
    by_identity = {first.identity: first, second.identity: second}
    holder = wait_for(
        lambda: lease_holder(kube, namespace) in by_identity and lease_holder(kube, namespace),
        timeout=60,
    )
    leader = by_identity[holder]
    follower = second if leader is first else first

    # Every replica serves lifecycle calls; only the leader reconciles.
    api_call(follower, "POST", "/devboxes", json={"name": "first-expiry"})
    wait_for(lambda: box(leader, "first-expiry")["state"] == "ready", timeout=60)
    expire_now(kube, namespace, "first-expiry")
    wait_for(lambda: box(follower, "first-expiry")["state"] == "stopped", timeout=60)
    assert wait_for(lambda: expired_in_log(leader, "first-expiry"), timeout=60)
    assert not expired_in_log(follower, "first-expiry")
    assert len(wait_for(lambda: events(kube, namespace, "first-expiry", "Expired"))) == 1

    # The leader dies without handing the Lease back; the survivor takes it when it lapses.
    leader.stop(kill=True)
    wait_for(lambda: lease_holder(kube, namespace) == follower.identity, timeout=60)
    api_call(follower, "POST", "/devboxes", json={"name": "second-expiry"})
    wait_for(lambda: box(follower, "second-expiry")["state"] == "ready", timeout=60)
    expire_now(kube, namespace, "second-expiry")
    wait_for(lambda: box(follower, "second-expiry")["state"] == "stopped", timeout=60)
    assert wait_for(lambda: expired_in_log(follower, "second-expiry"), timeout=60)
    assert wait_for(lambda: events(kube, namespace, "second-expiry", "Expired"))


def test_time_to_live_waits_while_the_box_waits_for_a_device(
    start_controller: StartController, pool: DevicePool, kube: Any, namespace: str
) -> None:
    process = start_controller(pool.settings(namespace))
    gpu = {"profile": DevicePool.PROFILE}
    api_call(process, "POST", "/devboxes", json={"name": "holder", "gpu": gpu})
    api_call(process, "GET", "/devboxes/holder", params={"wait": "ready", "timeout": 120})
    api_call(process, "POST", "/devboxes", json={"name": "waiter", "gpu": gpu, "ttl_hours": 1})
    wait_for(lambda: "in line" in (box(process, "waiter")["message"] or ""), timeout=60)

    # Its time to live runs out while it waits: it keeps its place and is not stopped.
    expire_now(kube, namespace, "waiter")
    deadline = datetime.now(UTC) - timedelta(minutes=1)
    for _ in range(10):
        time.sleep(1)
        waiting = box(process, "waiter")
        assert waiting["state"] == "starting", waiting
        assert replicas(kube, namespace, "waiter") == 1
    assert not expired_in_log(process, "waiter")

    # The device frees: once the box is ready, its deadline has moved later by its wait, so
    # the time to live that ran out while it waited still stops it, at once.
    freed_at = datetime.now(UTC)
    api_call(process, "POST", "/devboxes/holder/stop")
    stopped = wait_for(lambda: (b := box(process, "waiter"))["state"] == "stopped" and b, 120)
    assert "time to live" in stopped["message"], stopped
    annotations = (
        client.AppsV1Api(kube)
        .read_namespaced_deployment(naming.object_names("waiter").deployment, namespace)
        .metadata.annotations
    )
    assert naming.ANNOTATION_WAITING_SINCE not in annotations
    moved = datetime.fromisoformat(annotations[naming.ANNOTATION_EXPIRES_AT])
    waited = freed_at - datetime.fromisoformat(stopped["created_at"])
    assert moved >= deadline + waited - timedelta(seconds=3), (moved, deadline, waited)
