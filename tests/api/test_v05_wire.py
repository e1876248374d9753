"""Devboxes v0.5.0 clients read every answer of ours they ask for (tests/api/v05_wire.py):
a catalog with a GPU profile of every kind and image profiles, and boxes of each kind
running, stopped and waiting for a device, as the operator sees them, as a person sees
their own and as an admin sees that person's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
import requests
import v05_wire as v05
from devboxes_testbed import L4, L4_SHARED, MIG, ROCM, nodes
from devboxes_testbed.api import Api as PersonApi
from devboxes_testbed.cluster import schedulable
from devboxes_testbed.controller import example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from kubernetes import client
from pydantic import BaseModel
from support import Api, DevicePool, StartController, wait_for, wait_for_value

M = TypeVar("M", bound=BaseModel)
DRA_PROFILE = "dra-gpu"
DRA_DISPLAY = "Example DRA GPU"


class DraNode:
    """One kwok node publishing one device of a DRA driver of its own, and the DeviceClass
    of that driver: nothing else asks for its device."""

    def __init__(self, kube: Any) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.device_class = f"gpu.v05-{suffix}.example.com"
        pool_file = nodes.PoolFile(
            pools=[
                nodes.Pool(
                    name=f"v05-dra-{suffix}",
                    count=1,
                    capacity={"cpu": "16", "memory": "64Gi"},
                    devices=nodes.Devices(
                        driver=self.device_class,
                        kinds=[
                            nodes.DeviceKind(
                                count=1,
                                attributes={"productName": {"string": "Example GPU"}},
                                capacity={"memory": "16Gi"},
                            )
                        ],
                    ),
                )
            ],
            deviceClasses=[
                nodes.DeviceClass(
                    name=self.device_class,
                    selectors=[f"device.driver == '{self.device_class}'"],
                )
            ],
        )
        self.core = client.CoreV1Api(kube)
        self.resource = client.ResourceV1Api(kube)
        (node,) = nodes.node_objects(pool_file)
        self.node = node["metadata"]["name"]
        uid = self.core.create_node(node).metadata.uid
        for device_class in nodes.device_class_objects(pool_file):
            self.resource.create_device_class(device_class)
        for published in nodes.resource_slices(pool_file, {self.node: uid}):
            self.resource.create_resource_slice(published)
        wait_for(lambda: schedulable(self.core.read_node(self.node)))

    def profile(self) -> dict[str, Any]:
        return {
            "name": DRA_PROFILE,
            "displayName": DRA_DISPLAY,
            "deviceClassName": self.device_class,
            "count": 1,
        }

    def delete(self) -> None:
        # The node's ResourceSlice is owned by the node and goes with it.
        self.core.delete_node(self.node)
        self.resource.delete_device_class(self.device_class)


@pytest.fixture
def dra(kube: Any) -> Iterator[DraNode]:
    made = DraNode(kube)
    yield made
    made.delete()


def decoded(model: type[M], response: requests.Response) -> M:
    """The answer as a v0.5.0 client decodes it; anything it cannot decode fails the test."""
    assert response.status_code == 200, f"{response.request.url}: {response.text}"
    return model.model_validate_json(response.content)


def read_as_v05(api: PersonApi, owner: str | None = None) -> dict[str, v05.Devbox]:
    """Every read a v0.5.0 client makes, decoded as it decodes them: who am I, the GPU and
    image catalogs, the list and each box of it. The boxes listed, by name."""
    decoded(v05.WhoAmI, api.request("GET", "/whoami"))
    decoded(v05.Capabilities, api.request("GET", "/capabilities"))
    params = {"owner": owner} if owner is not None else None
    listed = decoded(v05.DevboxList, api.request("GET", "/devboxes", params=params)).items
    for box in listed:
        assert decoded(v05.Devbox, api.request("GET", f"/devboxes/{box.name}")).name == box.name
    return {box.name: box for box in listed}


def accelerators(boxes: dict[str, v05.Devbox]) -> dict[str, str | None]:
    return {name: box.gpu.resource_name if box.gpu else None for name, box in boxes.items()}


def test_every_answer_a_v05_client_reads_decodes(
    start_controller: StartController,
    issuer: Issuer,
    namespace: str,
    pool: DevicePool,
    dra: DraNode,
) -> None:
    settings = example_settings(namespace)
    (pool_profile,) = pool.settings(namespace)["gpu"]["profiles"]
    settings["gpu"]["profiles"] += [pool_profile, dra.profile()]
    settings["auth"] = {
        "adminGroups": ["gpu-admins"],
        "oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID},
    }
    operator = Api(start_controller(settings))
    alice = PersonApi(operator.url, issuer.token_for("alice"))
    olivia = PersonApi(operator.url, issuer.token_for("olivia"))

    catalog = decoded(v05.Capabilities, operator.request("GET", "/capabilities"))
    assert {p.name: p.resource_name for p in catalog.gpu.profiles} == {
        L4: "nvidia.com/gpu",
        MIG: "nvidia.com/mig-1g.10gb",
        ROCM: "amd.com/gpu",
        L4_SHARED: "nvidia.com/gpu.shared",
        DevicePool.PROFILE: pool.resource,
        DRA_PROFILE: dra.device_class,
    }
    assert catalog.images is not None
    assert {p.name: p.mode for p in catalog.images.profiles} == {
        "python": "workspace",
        "cuda": "workspace",
        "web-preview": "sidecar",
    }
    assert catalog.images.profiles[0].ports == [
        v05.Port(name="notebook", container_port=8888, protocol="TCP")
    ]

    # Created with the bodies a v0.5.0 client sends.
    running = {
        "cpu": v05.create_body("cpu", image="python"),
        "l4": v05.create_body("l4", default_gpu=True),
        "shared": v05.create_body("shared", gpu=L4_SHARED, image="web-preview"),
        "mig": v05.create_body("mig", gpu=MIG, image="cuda"),
        "rocm": v05.create_body("rocm", gpu=ROCM),
        "pool-a": v05.create_body("pool-a", gpu=DevicePool.PROFILE),
        "dra-a": v05.create_body("dra-a", gpu=DRA_PROFILE),
    }
    for name, body in running.items():
        assert operator.create(body).status_code == 201, name
    for name in running:
        operator.wait_ready(name)
    wait_for(lambda: operator.box("dra-a")["gpu"]["allocated"])
    assert operator.box("dra-a")["gpu"]["kind"] == "dra"
    assert operator.create(v05.create_body("pool-b", gpu=DevicePool.PROFILE)).status_code == 201
    assert alice.request("POST", "/devboxes", json=v05.create_body("dra-b", gpu=DRA_PROFILE)).ok
    assert operator.verb("cpu", "stop").status_code == 200

    wait_for_value(
        lambda: operator.box("pool-b")["summary"],
        f"Waiting for a free {DevicePool.DISPLAY}: 0 of 1 free, 1st in line",
    )
    # The scheduler picks among boxes of DRA devices: their place is an estimate.
    wait_for_value(
        lambda: operator.box("dra-b")["summary"],
        f"Waiting for a free {DRA_DISPLAY}: 0 of 1 free, 1st in line (estimate)",
    )
    wait_for_value(lambda: operator.box("cpu")["state"], "stopped")

    everyone = read_as_v05(operator)
    assert {name: box.state for name, box in everyone.items()} == {
        **dict.fromkeys(running, "ready"),
        "cpu": "stopped",
        "pool-b": "starting",
        "dra-b": "starting",
    }
    assert accelerators(everyone) == {
        "cpu": None,
        "l4": "nvidia.com/gpu",
        "shared": "nvidia.com/gpu.shared",
        "mig": "nvidia.com/mig-1g.10gb",
        "rocm": "amd.com/gpu",
        "pool-a": pool.resource,
        "pool-b": pool.resource,
        "dra-a": dra.device_class,
        "dra-b": dra.device_class,
    }
    assert everyone["shared"].image is not None
    assert everyone["shared"].image.mode == "sidecar"
    assert list(read_as_v05(alice)) == ["dra-b"]
    assert list(read_as_v05(olivia, owner="alice")) == ["dra-b"]

    # The DRA box stopped gives its device to the person's box waiting for it.
    assert operator.verb("dra-a", "stop").status_code == 200
    wait_for_value(lambda: operator.box("dra-a")["state"], "stopped")
    wait_for_value(lambda: operator.box("dra-b")["state"], "ready", timeout=120)
    assert read_as_v05(operator)["dra-a"].gpu == v05.GpuAllocation(
        profile=DRA_PROFILE, display_name=DRA_DISPLAY, resource_name=dra.device_class, count=1
    )
    assert read_as_v05(alice)["dra-b"].state == "ready"
    assert read_as_v05(olivia, owner="alice")["dra-b"].pod_ready

    for api, name in ((operator, "cpu"), (alice, "dra-b")):
        response = api.request("DELETE", f"/devboxes/{name}", params={"purge": "true"})
        assert decoded(v05.DeleteResult, response).message
