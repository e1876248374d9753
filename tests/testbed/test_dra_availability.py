"""Free devices of DRA profiles on the testbed's DRA pools (testbed/nodes-dra.yaml), after
the real kube-scheduler allocated claims: availability equals what the cluster's slices
and claims say is free, for profiles with selectors and alternatives, for the
extended resource a DeviceClass serves, and for partitions that share counters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import example_settings, without_gpu_profiles
from devboxes_testbed.rig import Rig
from dra_profiles import DRA_PROFILES, NVIDIA
from support import Api, wait_for, wait_for_value

NAMESPACE = "dra-free"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
# A GPU of the L4 node split into partitions, as NVIDIA's driver publishes MIG devices:
# seven 1g slices or one 7g, all drawing on one counter set of 7 memory slices.
MIG_POOL = "dra-l4-0-mig"
MIG_CLASS = "mig.nvidia.com"
IS_MIG = f"device.driver == '{NVIDIA}' && device.attributes['{NVIDIA}'].type == 'mig'"
PROFILE = f"device.attributes['{NVIDIA}'].profile"


def mig_profile(size: str) -> dict[str, Any]:
    return {
        "name": f"mig-{size}",
        "displayName": f"NVIDIA MIG {size}",
        "deviceClassName": MIG_CLASS,
        "count": 1,
        "selectors": [f"has({PROFILE}) && {PROFILE} == '{size}.10gb'"],
    }


# Pods asking for nvidia.com/gpu get DRA devices through the class's extendedResourceName.
BRIDGED = {
    "name": "nvidia-any",
    "displayName": "Any NVIDIA GPU",
    "resourceName": "nvidia.com/gpu",
    "count": 1,
}
PROFILES = [*DRA_PROFILES, mig_profile("1g"), mig_profile("7g"), BRIDGED]


def partition(name: str, slices: int) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": f"{slices}g.10gb"},
            "productName": {"string": "NVIDIA L4"},
        },
        "capacity": {"memory": {"value": f"{10 * slices}Gi"}},
        "consumesCounters": [
            {"counterSet": "gpu-9-counter-set", "counters": {"memory": {"value": str(slices)}}}
        ],
    }


def mig_objects() -> list[tuple[str, dict[str, Any]]]:
    pool = {"name": MIG_POOL, "generation": 1, "resourceSliceCount": 2}
    spec = {"driver": NVIDIA, "nodeName": "dra-l4-0", "pool": pool}
    counters = {
        "metadata": {"name": f"{MIG_POOL}-counters"},
        "spec": {
            **spec,
            "sharedCounters": [
                {"name": "gpu-9-counter-set", "counters": {"memory": {"value": "7"}}}
            ],
        },
    }
    devices = [partition(f"gpu-9-mig-1g-{i}", 1) for i in range(7)]
    partitions = {
        "metadata": {"name": f"{MIG_POOL}-devices"},
        "spec": {**spec, "devices": [*devices, partition("gpu-9-mig-7g-0", 7)]},
    }
    mig_class = {
        "metadata": {"name": MIG_CLASS},
        "spec": {"selectors": [{"cel": {"expression": IS_MIG}}]},
    }
    return [("slice", counters), ("slice", partitions), ("class", mig_class)]


@pytest.fixture(scope="module")
def api(dra_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    from kubernetes import client

    with Rig(tmp_path_factory.mktemp("dra-free-controller"), dra_testbed) as rig:
        rig.create_namespace(NAMESPACE)
        resource = client.ResourceV1Api(dra_testbed.api_client())
        for kind, body in mig_objects():
            if kind == "slice":
                resource.create_resource_slice(body)
            else:
                resource.create_device_class(body)
        example = example_settings(NAMESPACE)
        settings = without_gpu_profiles(example, *(p["name"] for p in example["gpu"]["profiles"]))
        settings["gpu"] = {"enabled": True, "defaultProfile": "h100-or-a100", "profiles": PROFILES}
        yield Api(rig.start_controller(settings))


def free_by_cluster(bed: Testbed) -> dict[str, int]:
    """Free devices by product (``mig-<size>`` for partitions), read from the cluster
    itself: every published device no claim holds, partitions while counters last."""
    from kubernetes import client

    resource = client.ResourceV1Api(bed.api_client())
    held = {
        (r["driver"], r["pool"], r["device"])
        for claim in resource.list_resource_claim_for_all_namespaces().to_dict()["items"]
        for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        )
        or []
    }
    slices = resource.list_resource_slice().to_dict()["items"]
    free: dict[str, int] = {}
    left = 7
    for item in slices:
        spec = item["spec"]
        for device in spec.get("devices") or []:
            attributes = device["attributes"]
            used = (spec["driver"], spec["pool"]["name"], device["name"]) in held
            if attributes["type"]["string"] == "mig":
                if used:
                    left -= int(device["consumes_counters"][0]["counters"]["memory"]["value"])
                continue
            if not used:
                product = attributes["productName"]["string"]
                free[product] = free.get(product, 0) + 1
    free["mig-1g"] = left
    free["mig-7g"] = 1 if left == 7 else 0
    return free


def counts(api: Api) -> dict[str, tuple[int | None, int | None]]:
    return {p.name: (p.available, p.capacity) for p in api.availability().profiles}


def expected(free: dict[str, int]) -> dict[str, tuple[int | None, int | None]]:
    nvidia = sum(n for product, n in free.items() if product.startswith("NVIDIA"))
    return {
        "h100-or-a100": (free.get(H100, 0), 2) if free.get(H100) else (free.get(A100, 0), 2),
        "gpu-40g": (free.get(H100, 0) + free.get(A100, 0), 4),
        "mi300x": (free.get("AMD Instinct MI300X", 0), 2),
        "mig-1g": (free["mig-1g"], 7),
        "mig-7g": (free["mig-7g"], 1),
        "nvidia-any": (nvidia, 6),
    }


def allocated(api: Api, box: str) -> list[dict[str, Any]]:
    api.wait_ready(box, timeout=180)
    return list(wait_for(lambda: api.box(box)["gpu"]["allocated"], timeout=60))


def test_availability_counts_the_devices_claims_leave_free(api: Api, dra_testbed: Testbed) -> None:
    everything_free = expected(free_by_cluster(dra_testbed))
    assert everything_free == {
        "h100-or-a100": (2, 2),
        "gpu-40g": (4, 4),
        "mi300x": (2, 2),
        "mig-1g": (7, 7),
        "mig-7g": (1, 1),
        "nvidia-any": (6, 6),
    }
    wait_for_value(lambda: counts(api), everything_free, timeout=60)

    # Both H100s taken: the profile offers its alternative's A100s.
    for name in ("h1", "h2"):
        api.created(name, gpu={"profile": "h100-or-a100"})
    assert {allocated(api, n)[0]["product"] for n in ("h1", "h2")} == {H100}
    # One 1g partition taken: six 1g slices are left, and no room for the 7g.
    api.created("small", gpu={"profile": "mig-1g"})
    allocated(api, "small")
    free = free_by_cluster(dra_testbed)
    assert (free.get(H100, 0), free["mig-1g"], free["mig-7g"]) == (0, 6, 0)
    wait_for_value(lambda: counts(api), expected(free), timeout=60)
    found = counts(api)
    assert found["h100-or-a100"] == (2, 2)
    assert found["gpu-40g"] == (2, 4)
    assert found["mig-1g"] == (6, 7)
    assert found["mig-7g"] == (0, 1)
    assert found["nvidia-any"] == (4, 6)

    # Stopped boxes give their devices back.
    for name in ("h1", "small"):
        api.call("POST", f"/devboxes/{name}/stop")

    def given_back() -> dict[str, int] | None:
        free = free_by_cluster(dra_testbed)
        return free if (free.get(H100, 0), free["mig-7g"]) == (1, 1) else None

    free = wait_for(given_back, timeout=90)
    wait_for_value(lambda: counts(api), expected(free), timeout=60)
    assert counts(api)["h100-or-a100"] == (1, 2)


def test_the_doctor_finds_published_devices_for_every_profile(api: Api) -> None:
    report = api.call("GET", "/gpu/doctor")
    found = {c["profile"]: c for c in report["checks"] if c["check"] == "devices"}
    assert {name: check["verdict"] for name, check in found.items()} == {
        p["name"]: "pass" for p in [*DRA_PROFILES, mig_profile("1g"), mig_profile("7g")]
    }
    assert found["h100-or-a100"]["message"] == (
        "published devices match h100-or-a100: its own choice (gpu.nvidia.com): 2, "
        "alternative 1 (gpu.nvidia.com): 2"
    )
