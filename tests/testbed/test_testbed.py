"""The testbed is a real cluster: the real scheduler, real admission, real controllers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from devboxes_testbed import L4, nodes
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.errors import TestbedError
from devboxes_testbed.rig import create_namespace
from kubernetes import client
from support import wait_for, wait_until_no_pod_requests

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda:1",
                    "resources": {
                        "requests": {"nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
            "tolerations": [GPU_TOLERATION],
            **spec,
        },
    }


def pod_ready(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    pod = core.read_namespaced_pod(name, namespace)
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
    )


def scheduling_message(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, namespace)
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return str(condition.message)
    return None


def test_nodes_advertise_gpu_pools(kube: Any) -> None:
    allocatable = {
        n.metadata.name: n.status.allocatable for n in client.CoreV1Api(kube).list_node().items
    }
    assert allocatable[f"{L4}-0"]["nvidia.com/gpu"] == "1"
    assert allocatable[f"{L4}-1"]["nvidia.com/gpu"] == "1"
    assert allocatable["nvidia-a100-mig-0"]["nvidia.com/mig-1g.10gb"] == "7"
    assert allocatable["amd-rocm-0"]["amd.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in allocatable["cpu-0"]


def test_gpu_pods_fill_capacity_and_the_scheduler_explains(kube: Any, namespace: str) -> None:
    wait_until_no_pod_requests(kube, "nvidia.com/gpu")
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, gpu_pod("first"))
    wait_for(lambda: pod_ready(core, namespace, "first"))
    assert core.read_namespaced_pod("first", namespace).spec.node_name.startswith(f"{L4}-")

    core.create_namespaced_pod(namespace, gpu_pod("second"))
    core.create_namespaced_pod(namespace, gpu_pod("third"))
    wait_for(lambda: pod_ready(core, namespace, "second") or pod_ready(core, namespace, "third"))

    def over_capacity_message() -> str | None:
        """one of the two pods reports why it cannot be scheduled"""
        for name in ("second", "third"):
            message = scheduling_message(core, namespace, name)
            if message:
                return message
        return None

    message = wait_for(over_capacity_message)
    assert "Insufficient nvidia.com/gpu" in message
    assert message.startswith("0/7 nodes are available")


def test_missing_runtime_class_is_rejected_by_admission(kube: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube)
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(namespace, gpu_pod("amd", runtimeClassName="amd"))
    assert refused.value.status == 403
    assert 'RuntimeClass "amd" not found' in json.loads(refused.value.body)["message"]


def test_deployment_with_claim_becomes_ready_and_namespace_deletes(kube: Any) -> None:
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    namespace = "deletion-check"
    create_namespace(core, namespace)
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "home"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "web",
                                "image": "example.invalid/web:1",
                                "volumeMounts": [{"name": "home", "mountPath": "/home"}],
                            }
                        ],
                        "volumes": [
                            {"name": "home", "persistentVolumeClaim": {"claimName": "home"}}
                        ],
                    },
                },
            },
        },
    )
    wait_for(lambda: apps.list_namespaced_replica_set(namespace).items)
    wait_for(
        lambda: (apps.read_namespaced_deployment("web", namespace).status.ready_replicas or 0) == 1
    )
    assert core.read_namespaced_persistent_volume_claim("home", namespace).status.phase == "Bound"

    core.delete_namespace(namespace)

    def namespace_gone() -> bool:
        """the namespace and everything in it is deleted"""
        try:
            core.read_namespace(namespace)
        except client.ApiException as err:
            return err.status == 404
        return False

    wait_for(namespace_gone, timeout=120)


def test_bad_pool_file_gives_one_clear_line(tmp_path: Path) -> None:
    pool_file = tmp_path / "pools.yaml"
    pool_file.write_text(
        "pools:\n  - name: gpu\n    count: two\n    capacity: {}\n    colour: red\n"
    )
    with pytest.raises(TestbedError) as error:
        nodes.load(pool_file)
    message = str(error.value)
    assert "pools.0.count" in message
    assert "pools.0.colour" in message
    assert "\n" not in message


def test_the_real_nodes_stand_in_offers_its_gpus_both_ways() -> None:
    """Where no real node can run, the kwok node in its place advertises the device
    plugin's GPUs and publishes the DRA plugin's devices, so the same profiles schedule."""
    real = Path(__file__).resolve().parents[1] / "data" / "nodes-real.yaml"
    pool_file = nodes.load(real).with_standin()
    (standin,) = pool_file.pools
    assert standin.capacity["nvidia.com/gpu"] == "2"
    (published,) = nodes.resource_slices(pool_file, {"real-standin-0": "uid"})
    assert published["spec"]["driver"] == "gpu.nvidia.com"
    devices = published["spec"]["devices"]
    assert [d["attributes"]["productName"] for d in devices] == [{"string": "NVIDIA L4"}] * 2
    assert {d["capacity"]["memory"]["value"] for d in devices} == {"24Gi"}


@pytest.mark.testbed
def test_testbed_stops_with_no_process_left(tmp_path: Path) -> None:
    bed = Testbed(
        tmp_path,
        Path(__file__).resolve().parents[2] / "testbed" / "nodes.yaml",
        log=lambda message: None,
    )
    bed.start()
    try:
        pids = [c.process.pid for c in bed.components if c.process]
        assert len(pids) == len(bed.components) == 6
    finally:
        bed.stop()
    assert bed.alive() == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
