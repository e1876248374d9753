"""DRA boxes from plain data: the claim template, the pod's claim, the pinned snapshot and
the devices a ready box reports, in its status and in the answer to a write."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from box_specs import atlas_spec
from devboxes_controller.box import naming, ownership, render
from devboxes_controller.box.idempotency import ANNOTATION_CREATE_REQUEST, CreateRequest
from devboxes_controller.box.spec import BoxSpec, spec_from_deployment
from devboxes_controller.box.status import BoxObjects, derive
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.control.lifecycle import Lifecycle
from devboxes_controller.k8s.kube import ApiClient
from dra_profiles import GPU_40G, H100_OR_A100, IS_A100, IS_H100, NVIDIA
from gpu_catalog import gpu_profile

from devboxes_sdk.models import AllocatedDevice, DevboxCreate, DevboxState

Obj = dict[str, Any]
L4 = gpu_profile("nvidia-l4", "NVIDIA L4")
NOW = datetime(2030, 1, 1, 9, tzinfo=UTC)
EXPIRES = datetime(2030, 1, 1, 12, tzinfo=UTC)


def make_settings() -> Settings:
    return settings_from_mapping(
        {
            "namespace": "boxes",
            "ssh": {"serviceType": "NodePort", "host": "box.example.org"},
            "sidecars": [{"name": "lab", "command": ["jupyter-lab"]}],
            "gpu": {
                "enabled": True,
                "defaultProfile": "nvidia-l4",
                "profiles": [L4, H100_OR_A100, GPU_40G],
            },
        }
    )


SETTINGS = make_settings()


def spec(profile: str | None) -> BoxSpec:
    return atlas_spec(EXPIRES, SETTINGS.gpu.profile(profile) if profile else None)


def test_prioritized_profile_renders_first_available_subrequests() -> None:
    template = render.render_claim_template(spec("h100-or-a100"), SETTINGS)
    assert template == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": "devbox-atlas-gpu",
            "namespace": "boxes",
            "labels": naming.labels("atlas", naming.COMPONENT_GPU),
        },
        "spec": {
            "metadata": {"labels": naming.labels("atlas", naming.COMPONENT_GPU)},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "firstAvailable": [
                                {
                                    "name": "choice-0",
                                    "deviceClassName": NVIDIA,
                                    "allocationMode": "ExactCount",
                                    "count": 1,
                                    "selectors": [{"cel": {"expression": IS_H100}}],
                                },
                                {
                                    "name": "choice-1",
                                    "deviceClassName": NVIDIA,
                                    "allocationMode": "ExactCount",
                                    "count": 1,
                                    "selectors": [{"cel": {"expression": IS_A100}}],
                                },
                            ],
                        }
                    ]
                }
            },
        },
    }


def test_profile_without_alternatives_renders_one_exact_request() -> None:
    template = render.render_claim_template(spec("gpu-40g"), SETTINGS)
    assert template is not None
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpu"
    assert request["exactly"]["deviceClassName"] == NVIDIA
    assert "firstAvailable" not in request


def test_other_boxes_have_no_claim_template() -> None:
    assert render.render_claim_template(spec("nvidia-l4"), SETTINGS) is None
    assert render.render_claim_template(spec(None), SETTINGS) is None


def test_only_the_main_container_gets_the_claim_and_no_extended_resource() -> None:
    deployment = render.render_deployment(spec("h100-or-a100"), SETTINGS)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "devbox-atlas-gpu"}
    ]
    main, *others = pod["containers"]
    assert main["resources"]["claims"] == [{"name": "gpu"}]
    assert set(main["resources"]["requests"]) == {"cpu", "memory"}
    assert set(main["resources"]["limits"]) == {"memory"}
    assert [e["name"] for e in main["env"] if e["name"].startswith("DEVBOX_GPU")] == [
        "DEVBOX_GPU_PROFILE",
        "DEVBOX_GPU_COUNT",
    ]
    assert others
    assert all("claims" not in (c.get("resources") or {}) for c in others)
    assert naming.ANNOTATION_GPU_RESOURCE not in deployment["metadata"]["annotations"]


def test_extended_resource_boxes_render_as_before() -> None:
    deployment = render.render_deployment(spec("nvidia-l4"), SETTINGS)
    pod = deployment["spec"]["template"]["spec"]
    assert "resourceClaims" not in pod
    preset = SETTINGS.preset("small")
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": preset.cpu, "memory": preset.memory_request, "nvidia.com/gpu": "1"},
        "limits": {"memory": preset.memory_limit, "nvidia.com/gpu": "1"},
    }


def test_dra_box_round_trips_through_its_deployment() -> None:
    deployment = render.render_deployment(spec("h100-or-a100"), SETTINGS)
    pinned = json.loads(deployment["metadata"]["annotations"][naming.ANNOTATION_GPU_SNAPSHOT])
    assert pinned == H100_OR_A100
    back = spec_from_deployment(deployment)
    assert back.gpu == SETTINGS.gpu.profile("h100-or-a100")
    # Pinned, the box renders the same pod and the same template again.
    assert render.render_deployment(back, SETTINGS)["spec"] == deployment["spec"]
    assert render.render_claim_template(back, SETTINGS) == render.render_claim_template(
        spec("h100-or-a100"), SETTINGS
    )


# --- what was allocated --------------------------------------------------------------------


def ready_pod(uid: str = "pod-1") -> Obj:
    return {
        "metadata": {
            "name": "devbox-atlas-6d8f9c7b5-x1",
            "uid": uid,
            "creationTimestamp": "2030-01-01T08:00:01Z",
            "labels": naming.labels("atlas", naming.COMPONENT_WORKSPACE),
        },
        "spec": {"nodeName": "a100-0"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def claim(owner: str, *results: Obj) -> Obj:
    obj: Obj = {
        "metadata": {
            "name": "devbox-atlas-6d8f9c7b5-x1-gpu-abcde",
            "labels": naming.labels("atlas", naming.COMPONENT_GPU),
            "ownerReferences": [{"uid": owner}],
        }
    }
    if results:
        obj["status"] = {"allocation": {"devices": {"results": list(results)}}}
    return obj


def result(request: str, device: str = "gpu-0", pool: str = "a100-0") -> Obj:
    return {"request": request, "driver": NVIDIA, "pool": pool, "device": device}


A100: Obj = {
    "name": "gpu-0",
    "attributes": {"productName": {"string": "NVIDIA A100-SXM4-40GB"}},
    "capacity": {"memory": {"value": "40Gi"}},
}
SERVICE: Obj = {
    "metadata": {"name": "devbox-atlas-ssh"},
    "spec": {"ports": [{"port": 22, "nodePort": 30122}]},
}


def box(profile: str, claims: list[Obj], devices: dict[tuple[str, str, str], Obj]) -> Any:
    deployment = render.render_deployment(spec(profile), SETTINGS)
    deployment["metadata"].update(creationTimestamp="2030-01-01T08:00:00Z", uid="d-1")
    objects = BoxObjects(
        deployment=deployment,
        pods=[ready_pod()],
        service=SERVICE,
        claims=claims,
        devices=devices,
    )
    return derive(objects, SETTINGS, NOW)


def test_ready_box_reports_the_alternative_it_got() -> None:
    found = box(
        "h100-or-a100",
        [claim("pod-1", result("gpu/choice-1"))],
        {(NVIDIA, "a100-0", "gpu-0"): A100},
    )
    assert found.state is DevboxState.READY
    assert found.gpu.kind == "dra"
    assert found.gpu.devices == "NVIDIA H100 80GB, else A100 40GB"
    assert found.gpu.allocated == [
        AllocatedDevice(product="NVIDIA A100-SXM4-40GB", memory="40Gi", alternative=1)
    ]


def test_a_profile_without_alternatives_reports_alternative_zero() -> None:
    found = box("gpu-40g", [claim("pod-1", result("gpu"))], {(NVIDIA, "a100-0", "gpu-0"): A100})
    assert found.gpu.allocated == [
        AllocatedDevice(product="NVIDIA A100-SXM4-40GB", memory="40Gi", alternative=0)
    ]


def test_a_device_not_yet_seen_in_a_slice_is_reported_without_details() -> None:
    found = box("gpu-40g", [claim("pod-1", result("gpu"))], {})
    assert found.gpu.allocated == [AllocatedDevice(product=None, memory=None, alternative=0)]


def test_nothing_is_reported_before_allocation_or_for_another_pods_claim() -> None:
    assert box("gpu-40g", [claim("pod-1")], {}).gpu.allocated is None
    old = claim("pod-0", result("gpu"))
    assert box("gpu-40g", [old], {(NVIDIA, "a100-0", "gpu-0"): A100}).gpu.allocated is None


def test_requests_that_are_not_the_box_gpu_are_ignored() -> None:
    found = box(
        "h100-or-a100",
        [claim("pod-1", result("other"), result("gpu/unknown"), result("gpu/choice-0"))],
        {},
    )
    assert found.gpu.allocated == [AllocatedDevice(alternative=0)]


def test_a_box_is_rendered_complete_with_its_records_and_its_owner() -> None:
    box = atlas_spec(EXPIRES, SETTINGS.gpu.profile("h100-or-a100"), owner="alice@example.com")
    made_by = CreateRequest.of("key-1", DevboxCreate(name="atlas"))
    before = render.box(box, SETTINGS, made_by=made_by, owner_groups=["ml"])
    annotations = before.deployment["metadata"]["annotations"]
    assert annotations[ANNOTATION_CREATE_REQUEST] == made_by.annotation()
    assert annotations[ownership.ANNOTATION_OWNER_GROUPS] == '["ml"]'
    assert annotations[ownership.ANNOTATION_OWNER] == "alice@example.com"
    # What belongs to the Deployment waits for it: it names the Deployment's uid.
    assert (before.service, before.claim_template, before.activity_secret) == (None, None, None)

    deployment = {"metadata": {"name": "devbox-atlas", "uid": "u-1"}}
    after = render.box(box, SETTINGS, owned_by=deployment, credential="c")
    owner = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "devbox-atlas", "uid": "u-1"}]
    assert after.service is not None
    assert after.claim_template is not None
    assert after.activity_secret is not None
    for owned in (after.service, after.claim_template, after.activity_secret):
        assert owned["metadata"]["ownerReferences"] == owner
    assert "ownerReferences" not in after.claim["metadata"]
    assert after.activity_secret["stringData"] == {"credential": "c"}
    marked = ownership.owner_label("alice@example.com")
    assert after.service["metadata"]["labels"][ownership.LABEL_OWNER] == marked
    assert after.claim_template["metadata"]["labels"][ownership.LABEL_OWNER] == marked
    # Without the records, the Deployment is the one a start or a repair renders.
    assert ANNOTATION_CREATE_REQUEST not in after.deployment["metadata"]["annotations"]
    assert render.box(box, SETTINGS, owned_by=deployment).activity_secret is None


def test_a_spec_carries_the_names_of_its_objects() -> None:
    box = spec(None)
    assert box.names == naming.object_names("atlas")
    assert replace(box, name="other").names.deployment == "devbox-other"


def test_the_answer_to_a_write_the_store_has_not_seen_keeps_the_boxs_claims() -> None:
    """A write's answer is derived from the store's objects, with the Deployment as written
    when the store still holds an older one: the box's claims and devices stay."""
    seen = render.render_deployment(spec("gpu-40g"), SETTINGS)
    seen["metadata"].update(creationTimestamp="2030-01-01T08:00:00Z", uid="d-1")
    seen["metadata"]["resourceVersion"] = "10"
    written = json.loads(json.dumps(seen))
    written["metadata"]["resourceVersion"] = "11"
    written["metadata"]["annotations"][naming.ANNOTATION_EXPIRES_AT] = "2030-01-01T13:00:00Z"
    objects = BoxObjects(
        deployment=seen,
        pods=[ready_pod()],
        service=SERVICE,
        claims=[claim("pod-1", result("gpu"))],
        devices={(NVIDIA, "a100-0", "gpu-0"): A100},
    )
    store = SimpleNamespace(settings=SETTINGS, clock=lambda: NOW, objects=lambda names: objects)
    lifecycle = Lifecycle(store, ApiClient(), activity_key=b"k" * 32)  # type: ignore[arg-type]
    try:
        answer = lifecycle._current(naming.object_names("atlas"), written)
    finally:
        lifecycle.stop()
    assert answer.expires_at == datetime(2030, 1, 1, 13, tzinfo=UTC)
    assert answer.gpu is not None
    assert answer.gpu.allocated == [
        AllocatedDevice(product="NVIDIA A100-SXM4-40GB", memory="40Gi", alternative=0)
    ]
