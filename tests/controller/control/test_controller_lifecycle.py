"""Box lifecycle against the real testbed: GPU scheduling, pinned contracts, storage, races."""

from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from devboxes_controller.box import host_key, naming, status
from devboxes_testbed import L4, MIG, ROCM
from devboxes_testbed.controller import example_settings, without_gpu_profiles
from kubernetes import client
from live_objects import live_object
from support import Api, StartController, wait_for


def box_pod(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    """The box's one live pod, as raw JSON."""
    pods = client.CoreV1Api(kube).list_namespaced_pod(
        namespace, label_selector=f"{naming.LABEL_BOX}={name}", _preload_content=False
    )
    live = [p for p in json.loads(pods.data)["items"] if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 1, [p["metadata"]["name"] for p in live]
    return dict(live[0])


def main_container(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == naming.MAIN_CONTAINER)


def node_labels(kube: Any, node: str) -> dict[str, str]:
    return dict(client.CoreV1Api(kube).read_node(node).metadata.labels or {})


def claim_size(kube: Any, namespace: str, name: str) -> str | None:
    claim = live_object(
        client.CoreV1Api(kube).read_namespaced_persistent_volume_claim,
        naming.object_names(name).pvc,
        namespace,
    )
    return None if claim is None else str(claim.spec.resources.requests["storage"])


@pytest.fixture
def purge_after() -> Iterator[list[tuple[Api, str]]]:
    """Boxes to purge after the test, so GPU capacity is free for the next one; each
    through the controller that serves its namespace by then."""
    boxes: list[tuple[Api, str]] = []
    yield boxes
    for api, name in boxes:
        api.purge(name)


def test_l4_boxes_fill_the_nodes_then_wait_for_a_free_gpu(
    start_controller: StartController, kube: Any, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    api = Api(start_controller())
    for name in ("l4-first", "l4-second", "l4-third"):
        purge_after.append((api, name))

    first = api.created("l4-first", gpu={})
    assert first["gpu"] == {
        "profile": L4,
        "display_name": "NVIDIA L4",
        "kind": "extended-resource",
        "resource_name": "nvidia.com/gpu",
        "devices": None,
        "count": 1,
        "allocated": None,
    }
    first = api.wait_ready("l4-first")
    assert first["state"] == "ready", first
    assert first["ssh_command"]
    assert first["pod_ready"] is True

    pod = box_pod(kube, namespace, "l4-first")
    assert node_labels(kube, pod["spec"]["nodeName"])["accelerator"] == L4
    resources = main_container(pod)["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == "1"
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert pod["spec"]["runtimeClassName"] == "nvidia"

    api.created("l4-second", gpu={"profile": L4})
    assert api.wait_ready("l4-second")["state"] == "ready"
    # Both L4 nodes now hold one box each: the third cannot be placed anywhere.
    api.created("l4-third", gpu={"profile": L4})

    def blocked() -> dict[str, Any] | None:
        """the third L4 box reports that it waits in line for a GPU"""
        box = api.box("l4-third")
        return box if "in line for a device" in box["message"] else None

    third = wait_for(blocked, timeout=60)
    assert third["state"] == "starting"
    # The pod waits behind the line's gate, where the scheduler has nothing to say yet.
    assert third["message"] == status.SCHEDULING_BLOCKED.format(reason=status.IN_LINE)
    assert naming.QUEUE_GATE in [
        g["name"] for g in box_pod(kube, namespace, "l4-third")["spec"]["schedulingGates"]
    ]

    stopped = api.call("POST", "/devboxes/l4-first/stop")
    assert stopped["state"] == "stopped"
    third = api.wait_ready("l4-third", timeout=90)
    assert third["state"] == "ready", third
    assert box_pod(kube, namespace, "l4-third")["spec"]["nodeName"] == pod["spec"]["nodeName"]


def test_mig_and_amd_profiles_render_and_schedule(
    start_controller: StartController, kube: Any, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    api = Api(start_controller())
    purge_after.extend([(api, "mig"), (api, "rocm")])
    api.created("mig", gpu={"profile": MIG})
    api.created("rocm", gpu={"profile": ROCM}, preset="medium")
    assert api.wait_ready("mig")["state"] == "ready"
    rocm = api.wait_ready("rocm")
    assert rocm["state"] == "ready", rocm
    assert rocm["gpu"]["resource_name"] == "amd.com/gpu"

    mig = box_pod(kube, namespace, "mig")
    assert node_labels(kube, mig["spec"]["nodeName"])["accelerator"] == "nvidia-a100-mig"
    container = main_container(mig)
    assert container["resources"]["requests"]["nvidia.com/mig-1g.10gb"] == "1"
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert container["image"] == "devboxes/workspace-cuda:12.8"
    assert mig["spec"]["runtimeClassName"] == "nvidia"

    amd = box_pod(kube, namespace, "rocm")
    assert node_labels(kube, amd["spec"]["nodeName"])["accelerator"] == ROCM
    assert amd["spec"]["securityContext"]["supplementalGroups"] == [44, 109]
    assert amd["spec"]["nodeSelector"] == {"accelerator": ROCM}
    assert "runtimeClassName" not in amd["spec"]
    container = main_container(amd)
    assert container["resources"]["limits"]["amd.com/gpu"] == "1"
    assert container["image"] == "devboxes/workspace-rocm:6.4"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DEVBOX_GPU_PROFILE"] == ROCM
    assert env["DEVBOX_GPU_SUPPLEMENTAL_GROUPS"] == "44,109"


def test_missing_runtime_class_is_degraded_with_the_admission_message(
    start_controller: StartController, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    settings = example_settings(namespace)
    rocm = next(p for p in settings["gpu"]["profiles"] if p["name"] == ROCM)
    rocm["runtimeClassName"] = "amd"
    api = Api(start_controller(settings))
    purge_after.append((api, "no-runtime"))
    api.created("no-runtime", gpu={"profile": ROCM})
    box = api.wait_settled("no-runtime")
    assert box["state"] == "degraded", box
    assert 'RuntimeClass "amd" not found' in box["message"]
    assert box["pod_name"] is None


def test_pinned_contract_survives_profile_removal_and_gpu_disabled(
    start_controller: StartController, kube: Any, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    settings = example_settings(namespace)
    first = start_controller(settings)
    api = Api(first)
    purge_after.append((api, "pinned"))
    api.created("pinned", gpu={"profile": MIG}, ttl_hours=3)
    assert api.wait_ready("pinned")["state"] == "ready"
    pinned_gpu = api.call("POST", "/devboxes/pinned/stop")["gpu"]
    first.stop()

    removed = without_gpu_profiles(settings, MIG)
    api = Api(start_controller(removed))
    purge_after[0] = (api, "pinned")
    refused = api.create({"name": "another", "gpu": {"profile": MIG}})
    assert refused.status_code == 422, refused.text
    [error] = refused.json()["detail"]
    assert error["loc"] == ["body", "gpu", "profile"]
    assert L4 in error["msg"]
    assert api.box("pinned")["gpu"] == pinned_gpu
    api.call("POST", "/devboxes/pinned/start")
    box = api.wait_ready("pinned")
    assert box["state"] == "ready", box
    assert box["gpu"] == pinned_gpu
    limits = main_container(box_pod(kube, namespace, "pinned"))["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "1"
    api.call("POST", "/devboxes/pinned/stop")
    api.controller.stop()

    disabled = copy.deepcopy(settings)
    disabled["gpu"]["enabled"] = False
    api = Api(start_controller(disabled))
    purge_after[0] = (api, "pinned")
    refused = api.create({"name": "another", "gpu": {}})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == [
        {
            "type": "value_error",
            "loc": ["body", "gpu"],
            "msg": "GPU acceleration is disabled by the operator",
        }
    ]
    api.call("POST", "/devboxes/pinned/start")
    box = api.wait_ready("pinned")
    assert box["state"] == "ready", box
    assert box["gpu"] == pinned_gpu
    assert (
        "nvidia.com/mig-1g.10gb"
        in main_container(box_pod(kube, namespace, "pinned"))["resources"]["requests"]
    )


def test_start_renews_the_ttl_from_the_stored_hours(
    start_controller: StartController, kube: Any, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    api = Api(start_controller())
    purge_after.append((api, "renewed"))
    api.created("renewed", ttl_hours=2)
    assert api.call("POST", "/devboxes/renewed/stop")["state"] == "stopped"
    # An old deadline, as if the box had been stopped long ago.
    client.AppsV1Api(kube).patch_namespaced_deployment(
        "devbox-renewed",
        namespace,
        {"metadata": {"annotations": {naming.ANNOTATION_EXPIRES_AT: "2020-01-01T00:00:00Z"}}},
    )
    before = datetime.now(UTC).replace(microsecond=0)
    restarted = api.call("POST", "/devboxes/renewed/start")
    after = datetime.now(UTC)
    assert restarted["state"] == "starting"
    expires = datetime.fromisoformat(restarted["expires_at"])
    assert before + timedelta(hours=2) <= expires <= after + timedelta(hours=2)
    assert api.box("renewed")["expires_at"] == restarted["expires_at"]


def test_a_stopped_box_names_its_leaving_pod_and_a_start_waits_until_it_is_gone(
    start_controller: StartController, kube: Any, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    api = Api(start_controller())
    purge_after.append((api, "handover"))
    api.created("handover")
    api.wait_ready("handover")
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    previous = box_pod(kube, namespace, "handover")
    old, node = previous["metadata"]["name"], previous["spec"]["nodeName"]
    # A finalizer keeps the pod shutting down, as a container slow to stop would.
    hold = {"metadata": {"finalizers": ["devboxes.io/test-hold"]}}
    core.patch_namespaced_pod(old, namespace, hold)
    try:
        assert api.call("POST", "/devboxes/handover/stop")["state"] == "stopped"
        wait_for(lambda: core.read_namespaced_pod(old, namespace).metadata.deletion_timestamp)
        leaving = f"{status.STOPPED} Its pod {old} is still shutting down on {node}."
        wait_for(lambda: api.box("handover")["message"] == leaving)
        assert api.box("handover")["state"] == "stopped"
        assert api.call("POST", "/devboxes/handover/start")["state"] == "starting"
        waiting = f"Waiting for the previous pod {old} to shut down on {node}."
        wait_for(lambda: api.box("handover")["message"] == waiting)

        def observed() -> bool:
            deployment = apps.read_namespaced_deployment("devbox-handover", namespace)
            return bool(deployment.status.observed_generation == deployment.metadata.generation)

        # Kubernetes has seen the start and holds the new pod back: no ReplicaSet of the
        # box asks for one, and the only pod is the previous one.
        wait_for(observed)
        replicasets = apps.list_namespaced_replica_set(
            namespace, label_selector=f"{naming.LABEL_BOX}=handover"
        ).items
        assert [rs.spec.replicas for rs in replicasets if rs.spec.replicas] == []
        pods = core.list_namespaced_pod(namespace, label_selector=f"{naming.LABEL_BOX}=handover")
        assert [p.metadata.name for p in pods.items] == [old]
    finally:
        core.patch_namespaced_pod(old, namespace, {"metadata": {"finalizers": None}})
    ready = api.wait_ready("handover")
    assert ready["pod_name"] not in (None, old)


def test_concurrent_creates_of_one_name_have_exactly_one_winner(
    start_controller: StartController, kube: Any, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    api = Api(start_controller())
    purge_after.append((api, "race"))
    barrier = threading.Barrier(6)
    codes: list[int] = []

    def create() -> None:
        racer = Api(api.controller)
        barrier.wait()
        codes.append(racer.create({"name": "race"}).status_code)

    threads = [threading.Thread(target=create) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [201] + [409] * 5
    deployments = (
        client.AppsV1Api(kube)
        .list_namespaced_deployment(namespace, label_selector=naming.MANAGED_SELECTOR)
        .items
    )
    assert [d.metadata.name for d in deployments] == ["devbox-race"]


def test_retained_claim_is_reused_and_grown_never_shrunk(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    api = Api(start_controller())
    api.created("keep", preset="small")
    wait_for(lambda: claim_size(kube, namespace, "keep") == "20Gi", timeout=60)

    kept = api.delete("keep")
    assert kept.status_code == 200, kept.text
    assert kept.json()["purged"] is False
    assert claim_size(kube, namespace, "keep") == "20Gi"
    assert api.get("keep").status_code == 404

    api.created("keep", preset="medium")
    assert claim_size(kube, namespace, "keep") == "30Gi"
    assert wait_for(lambda: api.box("keep")["storage_size"] == "30Gi", timeout=60)
    api.delete("keep")

    api.created("keep", preset="small")
    assert claim_size(kube, namespace, "keep") == "30Gi"
    assert api.box("keep")["storage_size"] == "30Gi"

    purged = api.delete("keep", purge=True)
    assert purged.status_code == 200, purged.text
    assert purged.json()["purged"] is True
    wait_for(lambda: claim_size(kube, namespace, "keep") is None, timeout=60)
    assert api.delete("keep").status_code == 404


def test_create_right_after_a_purge_says_the_old_volume_is_still_going(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    api = Api(start_controller())
    api.created("again")
    claim = naming.object_names("again").pvc
    core = client.CoreV1Api(kube)
    # A finalizer of the test's own holds the old claim in deletion, as a slow storage
    # driver or a pod still using it would.
    core.patch_namespaced_persistent_volume_claim(
        claim, namespace, {"metadata": {"finalizers": ["devboxes.test/hold"]}}
    )
    assert api.delete("again", purge=True).status_code == 200
    wait_for(
        lambda: (
            core.read_namespaced_persistent_volume_claim(
                claim, namespace
            ).metadata.deletion_timestamp
        )
    )

    refused = api.create({"name": "again"})
    assert refused.status_code == 409, refused.text
    assert "still being deleted" in refused.json()["detail"]
    assert refused.headers["Retry-After"]

    core.patch_namespaced_persistent_volume_claim(
        claim, namespace, {"metadata": {"finalizers": None}}
    )
    wait_for(lambda: claim_size(kube, namespace, "again") is None, timeout=60)

    def recreated() -> bool:
        """the create goes through once the old claim is gone"""
        return api.create({"name": "again"}).status_code == 201

    wait_for(recreated, timeout=60)
    assert api.delete("again", purge=True).status_code == 200


def _host_key_secret(kube: Any, namespace: str, name: str) -> dict[str, str]:
    secret = client.CoreV1Api(kube).read_namespaced_secret(
        naming.object_names(name).host_key_secret, namespace
    )
    return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


def test_a_box_publishes_the_host_key_its_sshd_is_given_and_keeps_it_until_deleted(
    start_controller: StartController, kube: Any, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    api = Api(start_controller())
    purge_after.append((api, "keyed"))
    created = api.created("keyed")
    (published,) = created["ssh_host_keys"]
    assert published.startswith("ssh-ed25519 ")
    private = wait_for(lambda: _host_key_secret(kube, namespace, "keyed"))[host_key.KEY_FILE]
    key = serialization.load_ssh_private_key(private.encode(), password=None)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert public.decode() == published
    pod = box_pod(kube, namespace, "keyed")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == host_key.VOLUME)
    assert volume["secret"]["secretName"] == naming.object_names("keyed").host_key_secret
    assert {"name": host_key.VOLUME, "mountPath": host_key.MOUNT_PATH, "readOnly": True} in (
        main_container(pod)["volumeMounts"]
    )
    # Kept across stop and start.
    api.call("POST", "/devboxes/keyed/stop")
    assert api.call("POST", "/devboxes/keyed/start")["ssh_host_keys"] == [published]
    assert _host_key_secret(kube, namespace, "keyed")[host_key.KEY_FILE] == private
    # A box deleted and made again under its name is another box, with another key.
    api.delete("keyed")
    wait_for(lambda: api.delete("keyed").status_code == 404)

    def made_again() -> dict[str, Any] | None:
        response = api.create({"name": "keyed"})
        return dict(response.json()) if response.status_code == 201 else None

    again = wait_for(made_again)
    assert len(again["ssh_host_keys"]) == 1
    assert again["ssh_host_keys"] != [published]


def test_a_host_key_secret_left_under_the_box_s_name_is_taken_over_never_read(
    start_controller: StartController, kube: Any, namespace: str, purge_after: list[tuple[Api, str]]
) -> None:
    """As an earlier box's Secret not yet collected: the new box writes its own key over
    it and owns it."""
    left = naming.object_names("inherits").host_key_secret
    client.CoreV1Api(kube).create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": left, "labels": {"left": "behind"}},
            "stringData": {host_key.KEY_FILE: "an earlier box's key", "extra": "not kept"},
        },
    )
    api = Api(start_controller())
    purge_after.append((api, "inherits"))
    (published,) = api.created("inherits")["ssh_host_keys"]
    private = _host_key_secret(kube, namespace, "inherits")[host_key.KEY_FILE]
    key = serialization.load_ssh_private_key(private.encode(), password=None)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert public.decode() == published
    owners = (
        client.CoreV1Api(kube).read_namespaced_secret(left, namespace).metadata.owner_references
    )
    assert [o.name for o in owners] == ["devbox-inherits"]
