"""Boxes of DRA GPU profiles on the testbed's DRA pools (testbed/nodes-dra.yaml): the real
kube-scheduler allocates each box's claim by the profile's selectors and alternatives, and
the box reports the device it got."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import example_settings, without_gpu_profiles
from devboxes_testbed.rig import Rig
from dra_profiles import DRA_PROFILES
from support import Api, wait_for

NAMESPACE = "dra-boxes"


def dra_settings(profiles: list[dict[str, Any]], default: str) -> dict[str, Any]:
    """The example settings with ``profiles`` as the whole GPU catalog: the example GPU
    profiles retired as an operator retires them, image profiles included."""
    example = example_settings(NAMESPACE)
    settings = without_gpu_profiles(example, *(p["name"] for p in example["gpu"]["profiles"]))
    settings["gpu"] = {"enabled": True, "defaultProfile": default, "profiles": profiles}
    return settings


@pytest.fixture(scope="module")
def api(dra_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with Rig(tmp_path_factory.mktemp("dra-controller"), dra_testbed) as rig:
        rig.create_namespace(NAMESPACE)
        yield Api(rig.start_controller(dra_settings(DRA_PROFILES, "h100-or-a100")))


def resource_api(bed: Testbed) -> Any:
    from kubernetes import client

    return client.ResourceV1Api(bed.api_client())


def claim_of(bed: Testbed, box: str) -> str | None:
    """The name of the claim Kubernetes made for the box's current pod."""
    claims = resource_api(bed).list_namespaced_resource_claim(
        NAMESPACE, label_selector=f"devboxes.io/box={box}"
    )
    live = [c for c in claims.items if c.metadata.deletion_timestamp is None]
    return live[0].metadata.name if len(live) == 1 else None


def allocated(api: Api, box: str) -> list[dict[str, Any]]:
    ready = api.wait_ready(box, timeout=180)
    found = wait_for(lambda: api.box(box)["gpu"]["allocated"], timeout=60)
    assert ready["gpu"]["kind"] == "dra"
    return list(found)


def test_the_catalog_shows_kinds_and_devices_never_selectors(api: Api) -> None:
    catalog = api.call("GET", "/capabilities")["gpu"]
    assert [(p["name"], p["kind"], p["devices"]) for p in catalog["profiles"]] == [
        ("h100-or-a100", "dra", "NVIDIA H100 80GB, else A100 40GB"),
        ("gpu-40g", "dra", "1 × gpu.nvidia.com"),
        ("mi300x", "dra", "1 × gpu.amd.com"),
    ]
    assert "device." not in str(catalog)


def test_boxes_get_h100s_then_the_a100_alternative_and_never_an_l4(
    api: Api, dra_testbed: Testbed
) -> None:
    for name in ("h1", "h2", "h3"):
        api.created(name, gpu={"profile": "h100-or-a100"})
    got = {name: allocated(api, name) for name in ("h1", "h2", "h3")}
    products = sorted((d[0]["product"], d[0]["alternative"]) for d in got.values())
    assert products == [
        ("NVIDIA A100-SXM4-40GB", 1),
        ("NVIDIA H100 80GB HBM3", 0),
        ("NVIDIA H100 80GB HBM3", 0),
    ]
    a100_box = next(name for name, d in got.items() if d[0]["alternative"] == 1)
    assert got[a100_box][0]["memory"] == "40Gi"

    # Every 40 GiB device but one A100 is taken: the next gpu-40g box gets it, the one
    # after waits rather than take the free L4 of 24 GiB.
    api.created("g1", gpu={"profile": "gpu-40g"})
    (device,) = allocated(api, "g1")
    assert device == {"product": "NVIDIA A100-SXM4-40GB", "memory": "40Gi", "alternative": 0}
    api.created("g2", gpu={"profile": "gpu-40g"})
    waiting = api.wait_settled("g2", timeout=20)
    assert waiting["state"] == "starting"
    assert waiting["gpu"]["allocated"] is None

    # Stopping a box gives its device back and drops its claim; the waiting box gets it.
    old_claim = claim_of(dra_testbed, a100_box)
    assert old_claim is not None
    api.call("POST", f"/devboxes/{a100_box}/stop")
    (device,) = allocated(api, "g2")
    assert device["product"] == "NVIDIA A100-SXM4-40GB"
    wait_for(lambda: claim_of(dra_testbed, a100_box) is None, timeout=60)

    # Started again, the box's pod gets a new claim from its template, allocated once
    # a device is free again.
    api.call("POST", f"/devboxes/{a100_box}/start")
    new_claim = wait_for(lambda: claim_of(dra_testbed, a100_box), timeout=60)
    assert new_claim != old_claim
    api.delete("g2", purge=True)
    (device,) = allocated(api, a100_box)
    assert device == {"product": "NVIDIA A100-SXM4-40GB", "memory": "40Gi", "alternative": 1}


def test_a_missing_claim_template_is_recreated(api: Api, dra_testbed: Testbed) -> None:
    api.created("amd", gpu={"profile": "mi300x"})
    (device,) = allocated(api, "amd")
    assert device == {"product": "AMD Instinct MI300X", "memory": "192Gi", "alternative": 0}
    resource = resource_api(dra_testbed)
    resource.delete_namespaced_resource_claim_template("devbox-amd-gpu", NAMESPACE)

    def recreated() -> bool:
        names = resource.list_namespaced_resource_claim_template(NAMESPACE).items
        return "devbox-amd-gpu" in {t.metadata.name for t in names}

    wait_for(recreated, timeout=60)
    template = resource.read_namespaced_resource_claim_template("devbox-amd-gpu", NAMESPACE)
    (owner,) = template.metadata.owner_references
    assert (owner.kind, owner.name) == ("Deployment", "devbox-amd")


def test_the_answers_of_start_stop_and_extend_name_a_running_boxs_device(api: Api) -> None:
    api.created("answers", gpu={"profile": "mi300x"})
    (device,) = allocated(api, "answers")
    assert device["product"] == "AMD Instinct MI300X"
    try:
        # A start of a running box and an extend answer it with the device it holds.
        started = api.call("POST", "/devboxes/answers/start")
        assert started["gpu"]["allocated"] == [device], f"{started}"
        extended = api.call("POST", "/devboxes/answers/extend", json={"hours": 1})
        assert extended["gpu"]["allocated"] == [device], f"{extended}"
        # A stopped box holds no device, and its answer names none.
        stopped = api.call("POST", "/devboxes/answers/stop")
        assert stopped["state"] == "stopped"
        assert stopped["gpu"] == {**started["gpu"], "allocated": None}
        # Started again, its new pod gets a new claim: once that pod runs, the answers
        # name its device again.
        api.call("POST", "/devboxes/answers/start")

        def on_a_new_pod() -> dict[str, Any] | None:
            box = api.box("answers")
            new = box["pod_name"] not in (None, started["pod_name"])
            return box if new and box["state"] == "ready" and box["gpu"]["allocated"] else None

        (device,) = wait_for(on_a_new_pod, timeout=180)["gpu"]["allocated"]
        started = api.call("POST", "/devboxes/answers/start")
        assert started["gpu"]["allocated"] == [device], f"{started}"
        extended = api.call("POST", "/devboxes/answers/extend", json={"hours": 1})
        assert extended["gpu"]["allocated"] == [device], f"{extended}"
    finally:
        api.purge("answers")


def test_the_doctor_refuses_selectors_kubernetes_cannot_compile_and_missing_classes(
    dra_testbed: Testbed, tmp_path: Path
) -> None:
    broken = {
        "name": "broken",
        "displayName": "Broken",
        "deviceClassName": "gpu.nvidia.com",
        "count": 1,
        # CEL grammar, but no such function in Kubernetes' CEL environment.
        "selectors": ["device.driver.noSuchFunction()"],
    }
    missing = {
        "name": "missing",
        "displayName": "Missing",
        "deviceClassName": "gpu.example.com",
        "count": 1,
    }
    settings = dra_settings([DRA_PROFILES[1], broken, missing], "gpu-40g")
    with Rig(tmp_path, dra_testbed) as rig:
        report = Api(rig.start_controller(settings)).call("GET", "/gpu/doctor")
    found = {(c["profile"], c["check"]): (c["verdict"], c["message"]) for c in report["checks"]}
    assert found[("gpu-40g", "device-class")][0] == "pass"
    assert found[("gpu-40g", "claim-template")][0] == "pass"
    verdict, message = found[("broken", "claim-template")]
    assert verdict == "fail"
    assert "noSuchFunction" in message
    assert found[("missing", "device-class")] == (
        "fail",
        "DeviceClass gpu.example.com does not exist: the scheduler refuses every box of this "
        "profile",
    )
    assert report["ok"] is False
