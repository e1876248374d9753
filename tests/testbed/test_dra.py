"""The testbed's DRA pools (testbed/nodes-dra.yaml): simulated nodes publish their GPUs as
ResourceSlices with the vendors' attributes, and the real kube-scheduler allocates claims
from them, by CEL selectors, by prioritized alternatives, and for pods that ask for
``nvidia.com/gpu`` through the DeviceClass's extended-resource name; kwok runs the pods."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.rig import create_namespace
from support import wait_for

NVIDIA = "gpu.nvidia.com"
IS_H100 = f"device.attributes['{NVIDIA}'].productName.startsWith('NVIDIA H100')"
AT_LEAST_40G = f"device.capacity['{NVIDIA}'].memory.compareTo(quantity('40Gi')) >= 0"
# "An H100 if one is free, else any NVIDIA GPU with at least 40 GiB."
H100_ELSE_40G = [
    {"name": "h100", "deviceClassName": NVIDIA, "selectors": [{"cel": {"expression": IS_H100}}]},
    {
        "name": "40g",
        "deviceClassName": NVIDIA,
        "selectors": [{"cel": {"expression": AT_LEAST_40G}}],
    },
]


@pytest.fixture
def space(dra_testbed: Testbed, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own. Its pods go at the end, and with them their claims,
    which gives the devices back to the next test; the namespace goes in the background."""
    from kubernetes import client

    api = dra_testbed.api_client()
    core = client.CoreV1Api(api)
    resource = client.ResourceV1Api(api)
    name = f"dra-{request.node.name.removeprefix('test_')[:40].rstrip('_').replace('_', '-')}"
    create_namespace(core, name)
    try:
        yield name
    finally:
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        wait_for(lambda: not resource.list_namespaced_resource_claim(name).items, timeout=120)
        core.delete_namespace(name)


def pod(
    name: str, resources: dict[str, Any], claims: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "devboxes/workspace:0.1.0", "resources": resources}
            ],
            **({"resourceClaims": claims} if claims else {}),
        },
    }


def running(core: Any, namespace: str, name: str) -> Any:
    def is_running() -> Any:
        found = core.read_namespaced_pod(name, namespace)
        return found if found.status.phase == "Running" else None

    return wait_for(is_running, timeout=60)


def allocation(resource: Any, namespace: str, claim: str) -> list[dict[str, Any]]:
    """The devices allocated to ``claim``, as the scheduler wrote them."""
    found = resource.read_namespaced_resource_claim(claim, namespace).to_dict()
    return found["status"]["allocation"]["devices"]["results"]


def test_every_dra_node_publishes_its_gpus_with_the_vendors_attributes(
    dra_testbed: Testbed,
) -> None:
    from kubernetes import client

    resource = client.ResourceV1Api(dra_testbed.api_client())
    slices = {s.spec.node_name: s for s in resource.list_resource_slice().items}
    assert sorted(slices) == ["dra-a100-0", "dra-amd-0", "dra-h100-0", "dra-l4-0"]
    h100 = slices["dra-h100-0"]
    assert h100.spec.driver == NVIDIA
    assert h100.metadata.owner_references[0].kind == "Node"
    assert [d.name for d in h100.spec.devices] == ["gpu-0", "gpu-1"]
    attributes = h100.spec.devices[0].attributes
    assert attributes["productName"].string == "NVIDIA H100 80GB HBM3"
    assert attributes["cudaComputeCapability"].version == "9.0.0"
    assert attributes["uuid"].string == "GPU-dra-h100-0-0"
    assert h100.spec.devices[0].capacity["memory"].value == "80Gi"
    assert slices["dra-amd-0"].spec.driver == "gpu.amd.com"
    classes = {c.metadata.name: c for c in resource.list_device_class().items}
    assert classes[NVIDIA].spec.extended_resource_name == "nvidia.com/gpu"
    assert classes["gpu.amd.com"].spec.extended_resource_name is None


def test_claims_take_the_first_alternative_that_is_free(dra_testbed: Testbed, space: str) -> None:
    from kubernetes import client

    api = dra_testbed.api_client()
    core = client.CoreV1Api(api)
    resource = client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim_template(
        space,
        {
            "metadata": {"name": "h100-else-40g"},
            "spec": {
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "firstAvailable": H100_ELSE_40G}]}
                }
            },
        },
    )
    claims = [{"name": "gpu", "resourceClaimTemplateName": "h100-else-40g"}]
    got = []
    for index in range(5):
        name = f"box-{index}"
        core.create_namespaced_pod(space, pod(name, {"claims": [{"name": "gpu"}]}, claims))
        if index < 4:
            placed = running(core, space, name)
            (status,) = placed.status.resource_claim_statuses
            (result,) = allocation(resource, space, status.resource_claim_name)
            got.append((placed.spec.node_name, result["request"]))
    # Two H100s first, then the two A100s of 40 GiB; never an L4 of 24 GiB.
    assert got == [
        ("dra-h100-0", "gpu/h100"),
        ("dra-h100-0", "gpu/h100"),
        ("dra-a100-0", "gpu/40g"),
        ("dra-a100-0", "gpu/40g"),
    ]

    def refused() -> str | None:
        conditions = core.read_namespaced_pod("box-4", space).status.conditions or []
        return next((c.message for c in conditions if c.reason == "Unschedulable"), None)

    assert "cannot allocate all claims" in wait_for(refused, timeout=60)


def test_a_pod_asking_for_nvidia_gpus_is_served_through_dra(
    dra_testbed: Testbed, space: str
) -> None:
    from kubernetes import client

    api = dra_testbed.api_client()
    core = client.CoreV1Api(api)
    resource = client.ResourceV1Api(api)
    asking = pod("bridged", {"limits": {"nvidia.com/gpu": "1"}})
    asking["spec"]["nodeSelector"] = {"accelerator": "dra-l4"}
    core.create_namespaced_pod(space, asking)
    placed = running(core, space, "bridged")
    assert placed.spec.node_name == "dra-l4-0"
    claim = placed.status.extended_resource_claim_status
    assert claim.request_mappings[0].resource_name == "nvidia.com/gpu"
    (result,) = allocation(resource, space, claim.resource_claim_name)
    assert (result["driver"], result["pool"]) == (NVIDIA, "dra-l4-0")
