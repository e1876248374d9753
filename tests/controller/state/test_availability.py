"""GPU availability, the waiting boxes' summaries and the GPU doctor against the testbed.

The session testbed (testbed/nodes.yaml) has 2 dedicated L4 nodes (1 GPU each, tainted),
one time-sliced L4 advertising 4 units, one A100 with 7 MIG slices and one AMD node
with 2 GPUs and no "amd" RuntimeClass. Other tests share the L4s, so counts are read
relative to what this test finds, and everything it takes is given back.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.placement import doctor, doctor_profiles
from devboxes_testbed import L4, L4_SHARED, MIG, ROCM
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from support import (
    Api,
    StartController,
    helm_run,
    service_account_kubeconfig,
    wait_for,
    wait_for_value,
    wait_until_no_pod_requests,
)

from devboxes_sdk.models import PRESETS, Devbox, DoctorReport, GpuAvailability

CHART = Path(__file__).resolve().parents[3] / "charts" / "devboxes"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def api(controller: Controller) -> Api:
    return Api(controller)


def gpu_pod(name: str, resource: str, selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod that is not a box and takes one unit of ``resource``."""
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "work",
                    "image": "busybox",
                    "resources": {"requests": {resource: "1"}, "limits": {resource: "1"}},
                }
            ],
            "nodeSelector": selector or {},
            "tolerations": [GPU_TOLERATION],
        },
    }


@pytest.fixture
def foreign(
    kube: Any, namespace: str
) -> Iterator[Callable[[str, str, dict[str, str] | None], str]]:
    """Create GPU pods in a namespace of their own; all are deleted after the test."""
    core = client.CoreV1Api(kube)
    created: list[str] = []

    def make(name: str, resource: str, selector: dict[str, str] | None = None) -> str:
        core.create_namespaced_pod(namespace, gpu_pod(name, resource, selector))
        created.append(name)
        return name

    yield make
    for name in created:
        try:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except client.ApiException:
            continue


def delete_pod(kube: Any, namespace: str, name: str) -> None:
    client.CoreV1Api(kube).delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def test_new_routes_refuse_without_the_token(controller: Controller) -> None:
    for path in (
        "/api/v1/gpu/availability",
        "/api/v1/gpu/availability?preset=small",
        "/api/v1/gpu/doctor",
    ):
        for headers in ({}, {"Authorization": "Bearer " + "x" * 40}):
            response = requests.get(f"{controller.url}{path}", headers=headers, timeout=10)
            assert response.status_code == 401, (path, response.text)
            assert response.json()["detail"] in ("authentication required", "invalid token")


def test_a_bad_preset_is_a_precise_422(api: Api) -> None:
    response = api.request("GET", "/gpu/availability", params={"preset": "huge"}, timeout=10)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["query", "preset"]


def test_availability_carries_a_tag_and_answers_304_while_unchanged(api: Api) -> None:
    url = f"{api.base}/gpu/availability"
    first = api.session.get(url, timeout=10)
    tag = first.headers["ETag"]
    again = api.session.get(url, headers={"If-None-Match": tag}, timeout=10)
    # Any node or pod event in between makes a new reading (a new observed_at), so the
    # answer is either "unchanged" or a new body under a new tag, never the old tag.
    if again.status_code == 304:
        assert again.content == b""
    else:
        assert again.status_code == 200
        assert again.headers["ETag"] != tag
        assert GpuAvailability.model_validate(again.json()).observed_at > (
            GpuAvailability.model_validate(first.json()).observed_at
        )
    with_preset = api.session.get(url, params={"preset": "large"}, timeout=10)
    assert with_preset.status_code == 200
    assert GpuAvailability.model_validate(with_preset.json()).profile(L4) is not None


def test_mig_and_shared_units_fall_and_rise_as_boxes_start_and_stop(api: Api, kube: Any) -> None:
    suffix = uuid.uuid4().hex[:6]
    mig, shared = MIG, L4_SHARED
    assert api.free(mig)[1] == 7
    assert api.free(shared)[1] == 4
    body = api.availability().model_dump(mode="json")
    assert set(body) == {"observed_at", "profiles"}
    assert "nvidia-l4-0" not in json.dumps(body), "availability names a node"
    # A slice held by another test's box while its namespace is deleted would come back
    # during this test and hide the one this box takes.
    wait_until_no_pod_requests(kube, "nvidia.com/mig-1g.10gb")
    wait_for(lambda: api.free(mig)[0] == 7)
    name = f"mig-{suffix}"
    api.created(name, gpu={"profile": mig})
    try:
        api.wait_ready(name)
        wait_for(lambda: api.free(mig)[0] == 6)
        api.call("POST", f"/devboxes/{name}/stop")
        wait_for(lambda: api.free(mig)[0] == 7)
        # Units of the shared L4 are free once other tests' boxes on it are gone.
        wait_for(lambda: api.free(shared)[0] == api.free(shared)[1], timeout=120)
    finally:
        api.purge(name)


def test_a_pod_in_another_namespace_and_a_cordon_lower_the_counts(
    api: Api, kube: Any, namespace: str, foreign: Callable[..., str]
) -> None:
    wait_until_no_pod_requests(kube, "nvidia.com/gpu")
    # testbed/nodes.yaml has two L4 nodes with one GPU each.
    wait_for(lambda: api.free(L4)[:2] == (2, 2))
    pod = foreign("l4-user", "nvidia.com/gpu", {"accelerator": L4})
    wait_for(lambda: api.free(L4)[0] == 1)
    delete_pod(kube, namespace, pod)
    wait_for(lambda: api.free(L4)[0] == 2)

    core = client.CoreV1Api(kube)
    core.patch_node("nvidia-l4-1", {"spec": {"unschedulable": True}})
    try:
        wait_for(lambda: api.free(L4)[1] == 1)
    finally:
        core.patch_node("nvidia-l4-1", {"spec": {"unschedulable": False}})
    wait_for(lambda: api.free(L4)[1] == 2)


def test_a_preset_that_does_not_fit_counts_nothing(api: Api) -> None:
    # The MIG node has 32 CPUs: 16 large boxes (2 CPUs each) fit, but only 7 slices.
    entry = api.availability("large").profile(MIG)
    assert entry is not None
    assert entry.capacity == 7


def run_cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "devboxes_sdk.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


def test_three_waiting_boxes_get_their_place_in_line(
    api: Api,
    kube: Any,
    namespace: str,
    foreign: Callable[..., str],
    controller_env: dict[str, str],
) -> None:
    # Pods of earlier tests give their L4s back, or take one, as their namespaces go; wait
    # for them so that no device changes hands behind this test's back while it counts.
    wait_until_no_pod_requests(kube, "nvidia.com/gpu")
    _, total, _ = api.free(L4)
    wait_for(lambda: api.free(L4)[0] == total)
    assert total is not None
    # Take every L4 with pods that are not boxes, so the boxes must queue.
    holders = [foreign(f"hold-{i}", "nvidia.com/gpu", {"accelerator": L4}) for i in range(total)]
    wait_for(lambda: api.free(L4)[0] == 0)
    suffix = uuid.uuid4().hex[:6]
    names = [f"q{letter}-{suffix}" for letter in "abc"]

    def summaries(boxes: list[str]) -> list[str | None]:
        return [api.box(name)["summary"] for name in boxes]

    def in_line(places: tuple[str, ...], held: int = total) -> list[str | None]:
        holders_named = ", ".join(f"{namespace}/{pod}" for pod in sorted(holders)[:held])
        whose = "a pod that is not a box" if held == 1 else "pods that are not boxes"
        return [
            f"Waiting for a free NVIDIA L4: 0 of {total} free, {place} in line; "
            f"devices held by {whose}: {holders_named}"
            for place in places
        ]

    def next_ready(first: str, waiting: list[str]) -> list[str]:
        """The queue's gate lets the box first in line through and no other: wait until
        ``first`` is ready while the rest still wait."""

        def ready() -> bool:
            states = {name: api.box(name)["state"] for name in waiting}
            others = [name for name, state in states.items() if name != first and state == "ready"]
            assert not others, f"one device was freed and {others} got it, not {first}"
            return states[first] == "ready"

        wait_for(ready, timeout=120)
        return [name for name in waiting if name != first]

    try:
        for name in names:
            api.created(name, gpu={"profile": L4})
            # One at a time, so that the pods' ages follow the names.
            wait_for(
                lambda n=name: (
                    api.box(n)["summary"] not in (None, "Waiting for the pod to be created.")
                )
            )
        wait_for_value(lambda: summaries(names), in_line(("1st", "2nd", "3rd")))
        # The availability is recomputed shortly after the queue changes, not with it.
        wait_for_value(lambda: api.free(L4), (0, total, 3))

        code, out = run_cli(controller_env, "list")
        assert code == 0, out
        assert "REASON" in out
        assert f"0 of {total} free, 2nd in line" in out
        code, out = run_cli(controller_env, "gpu", "profiles")
        assert code == 0, out
        assert "FREE" in out
        assert "WAITING" in out
        line = next(li for li in out.splitlines() if li.startswith(f"{L4} "))
        assert f"0 of {total}" in line
        assert " 3 " in line
        code, out = run_cli(controller_env, "gpu", "profiles", "--json")
        data = json.loads(out)
        l4 = next(p for p in data["availability"]["profiles"] if p["name"] == L4)
        assert (l4["available"], l4["waiting"]) == (0, 3)

        # A freed device goes to the first in line; the others close up, in order.
        holders.sort()
        delete_pod(kube, namespace, holders.pop(0))
        waiting = next_ready(names[0], names)
        wait_for_value(lambda: summaries(waiting), in_line(("1st", "2nd"), held=total - 1))
        assert api.box(names[0])["summary"] is None
        wait_for_value(lambda: api.free(L4)[2], 2)

        code, out = run_cli(controller_env, "stop", names[0])
        assert code == 0, out
        assert f"2 boxes are waiting for {L4}" in out
        waiting = next_ready(names[1], waiting)
        wait_for_value(lambda: summaries(waiting), in_line(("1st",), held=total - 1))
        wait_for_value(lambda: api.free(L4)[2], 1)
    finally:
        for name in names:
            api.purge(name)


# -- availability switched off or forbidden ------------------------------------------------------


def assert_everything_else_works(controller: Controller, reason: str) -> None:
    api = Api(controller)
    assert requests.get(f"{controller.url}/ready", timeout=10).status_code == 200

    def settled() -> Any:
        """Availability once its watches have answered: they are not part of readiness,
        so a first read may still say they are loading."""
        body = api.availability()
        return body if all(reason in (e.reason or "") for e in body.profiles) else None

    body = wait_for(settled)
    assert body.profiles
    for entry in body.profiles:
        assert (entry.available, entry.capacity) == (None, None)
        assert entry.reason is not None
        assert reason in entry.reason
    caps = api.call("GET", "/capabilities")
    assert set(caps) == {"gpu", "images", "ssh_access", "cluster"}
    assert set(caps["gpu"]) == {"enabled", "default_profile", "profiles"}
    # Availability's reads are no part of the cluster's id, which the chart grants anyway.
    wait_for(lambda: api.call("GET", "/capabilities")["cluster"]["id"])
    api.created("cpu-box")
    box = Devbox.model_validate(api.wait_ready("cpu-box"))
    assert box.state.value == "ready"
    api.purge("cpu-box")


def test_availability_switched_off_says_unknown_and_nothing_else_breaks(
    start_controller: StartController, namespace: str
) -> None:
    settings = example_settings(namespace)
    settings["availability"] = {"enabled": False}
    assert_everything_else_works(start_controller(settings), "turned off by the operator")


@pytest.fixture
def chart_account(
    testbed: Testbed, kube: Any, namespace: str, tmp_path: Path
) -> Iterator[Callable[[bool], Path]]:
    """Install the chart into the test namespace and return a kubeconfig of its account."""
    installed: list[str] = []

    def install(availability: bool) -> Path:
        values = tmp_path / "values.yaml"
        values.write_text(
            yaml.safe_dump(
                {
                    "controller": {"availability": {"enabled": availability}},
                    "gpu": example_settings(namespace)["gpu"],
                }
            )
        )
        helm_run(
            testbed,
            "install",
            "devboxes",
            str(CHART),
            "-n",
            namespace,
            "-f",
            str(values),
            "--wait=false",
        )
        installed.append("devboxes")
        return service_account_kubeconfig(testbed, kube, namespace, "devboxes", tmp_path / "sa")

    yield install
    for release in installed:
        # The ClusterRole and its binding outlive the namespace unless uninstalled.
        helm_run(testbed, "uninstall", release, "-n", namespace)


def test_without_the_cluster_role_availability_is_unknown_and_the_rest_works(
    testbed: Testbed, namespace: str, chart_account: Callable[[bool], Path], tmp_path: Path
) -> None:
    kubeconfig = chart_account(False)
    controller = Controller(kubeconfig, example_settings(namespace), tmp_path).start()
    try:
        assert_everything_else_works(controller, "may not list")
    finally:
        controller.stop()


# -- the doctor -----------------------------------------------------------------------------------


def doctor_settings(namespace: str) -> dict[str, Any]:
    settings = example_settings(namespace)
    base = {"resourceName": "nvidia.com/gpu", "count": 1, "tolerations": [GPU_TOLERATION]}
    settings["gpu"]["profiles"] += [
        {**base, "name": "h100", "displayName": "H100", "nodeSelector": {"accelerator": "h100"}},
        {
            **base,
            "name": "l4-pair",
            "displayName": "2x L4",
            "count": 2,
            "nodeSelector": {"accelerator": L4},
        },
        {
            "name": "l4-untolerated",
            "displayName": "L4 without toleration",
            "resourceName": "nvidia.com/gpu",
            "count": 1,
            "nodeSelector": {"accelerator": L4},
        },
    ]
    amd = next(p for p in settings["gpu"]["profiles"] if p["name"] == ROCM)
    amd["runtimeClassName"] = "amd"
    return settings


def failures(report: DoctorReport) -> dict[tuple[str | None, str], str]:
    return {
        (c.profile, c.check): f"{c.message}: {c.fix}" for c in report.checks if c.verdict == "fail"
    }


def assert_doctor_findings(report: DoctorReport) -> None:
    assert not report.ok
    found = failures(report)
    assert found == {
        ("h100", "selector"): "no node matches the nodeSelector accelerator=h100: label the GPU "
        "nodes accelerator=h100 or correct the profile's nodeSelector",
        ("l4-pair", "count"): "count 2 does not fit: the most nvidia.com/gpu on one node is 1: "
        "lower the profile's count to 1 or add nodes with 2 nvidia.com/gpu",
        (ROCM, "runtime-class"): "RuntimeClass amd does not exist: every pod of this "
        "profile is refused: create the RuntimeClass amd for the GPU nodes' container runtime, "
        "or remove runtimeClassName from the profile",
        ("l4-untolerated", "taints"): "the profile does not tolerate nvidia.com/gpu:NoSchedule "
        "on 2 of 2 node(s): add a toleration {key: nvidia.com/gpu, operator: Exists, effect: "
        "NoSchedule} to the profile, or remove the taint",
        **{
            (profile, "quota"): "ResourceQuota no-gpus allows 0 requests.nvidia.com/gpu, less "
            f"than a box of this profile with preset small asks ({count}): raise "
            f"requests.nvidia.com/gpu in ResourceQuota no-gpus to at least {count}"
            for profile, count in (
                (L4, 1),
                ("h100", 1),
                ("l4-pair", 2),
                ("l4-untolerated", 1),
            )
        },
    }
    passed = {(c.profile, c.check) for c in report.checks if c.verdict == "pass"}
    assert (MIG, "count") in passed
    assert (L4, "runtime-class") in passed
    assert (None, "storage-class") in passed


def test_doctor_names_each_missing_prerequisite(
    testbed: Testbed,
    kube: Any,
    namespace: str,
    tmp_path: Path,
    start_controller: StartController,
    chart_account: Callable[[bool], Path],
) -> None:
    client.CoreV1Api(kube).create_namespaced_resource_quota(
        namespace,
        {"metadata": {"name": "no-gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}},
    )
    settings = doctor_settings(namespace)
    path = tmp_path / "doctor-settings.yaml"
    path.write_text(yaml.safe_dump(settings))

    # With the chart's own account, as `helm test` runs it: every permission is granted.
    kubeconfig = chart_account(True)
    command = [sys.executable, "-m", "devboxes_controller", "doctor", "--settings", str(path)]
    result = subprocess.run(
        [*command, "--kubeconfig", str(kubeconfig), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    report = DoctorReport.model_validate_json(result.stdout)
    assert_doctor_findings(report)
    assert [c.verdict for c in report.checks if c.check == "permissions"] == ["pass"]

    text = subprocess.run(
        [*command, "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=120
    )
    assert text.returncode == 1
    assert "FAIL" in text.stdout
    assert "h100" in text.stdout
    assert "check(s) failed" in text.stdout.splitlines()[-1]

    # The same report over the API and through the CLI.
    controller = start_controller(settings)
    over_api = DoctorReport.model_validate(Api(controller).call("GET", "/gpu/doctor"))
    assert_doctor_findings(over_api)
    env = {"DEVBOX_URL": controller.url, "DEVBOX_TOKEN": controller.token}
    code, out = run_cli(env, "gpu", "doctor", "--json")
    assert code == 1
    assert_doctor_findings(DoctorReport.model_validate_json(out))


def test_doctor_refuses_bad_settings_in_one_line(tmp_path: Path, testbed: Testbed) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("gpu: {enabled: maybe}\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "devboxes_controller",
            "doctor",
            "--settings",
            str(path),
            "--kubeconfig",
            str(testbed.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "gpu.enabled" in result.stderr
    assert "Traceback" not in result.stderr


def dry_run_refusal(core: client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> str:
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except client.ApiException as error:
        if error.status not in (403, 422):
            raise
        return str(json.loads(error.body)["message"])
    return ""


def admitted_presets(kube: Any, namespace: str, settings: Settings) -> dict[str, str]:
    """For each preset, the apiserver's answer to a dry-run create of a box pod of the L4
    profile: "" when admitted, else the refusal."""
    core = client.CoreV1Api(kube)
    profile = settings.gpu.profile(L4)
    assert profile is not None
    answers = {}
    for preset in PRESETS:
        pod = {
            "metadata": {"name": f"probe-{preset}"},
            "spec": doctor_profiles.box_pod(settings, profile, preset),
        }
        answers[preset] = dry_run_refusal(core, namespace, pod)
    return answers


def wait_for_quota_status(kube: Any, namespace: str, name: str) -> None:
    """Admission refuses every pod until the quota controller has filled in the status."""
    core = client.CoreV1Api(kube)
    wait_for(lambda: bool(core.read_namespaced_resource_quota(name, namespace).status.hard))


@pytest.mark.parametrize(
    ("kind", "body", "verdict", "refused", "refusal"),
    [
        (
            "limit_range",
            {"limits": [{"type": "Container", "max": {"memory": "8Gi"}}]},
            "warn",
            {"large"},
            "maximum memory usage per Container is 8Gi",
        ),
        ("quota", {"hard": {"requests.cpu": "1"}}, "warn", {"large"}, "exceeded quota"),
        (
            "quota",
            {"hard": {"limits.cpu": "64"}},
            "fail",
            set(PRESETS),
            "must specify limits.cpu",
        ),
        (
            "limit_range",
            {"limits": [{"type": "Pod", "max": {"memory": "2Gi"}}]},
            "fail",
            set(PRESETS),
            "maximum memory usage per Pod is 2Gi",
        ),
    ],
)
def test_doctor_judges_quotas_and_limit_ranges_as_admission_does(
    kube: Any,
    namespace: str,
    kind: str,
    body: dict[str, Any],
    verdict: str,
    refused: set[str],
    refusal: str,
) -> None:
    core = client.CoreV1Api(kube)
    if kind == "quota":
        core.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "compute"}, "spec": body}
        )
        wait_for_quota_status(kube, namespace, "compute")
    else:
        core.create_namespaced_limit_range(
            namespace, {"metadata": {"name": "bounds"}, "spec": body}
        )
    settings = settings_from_mapping(example_settings(namespace))

    answers = admitted_presets(kube, namespace, settings)
    assert {p for p, answer in answers.items() if answer} == refused, answers
    assert all(refusal in answers[p] for p in refused), answers

    report = doctor.examine(settings, kube)
    check = "quota" if kind == "quota" else "limit-range"
    found = next(c for c in report.checks if c.profile == L4 and c.check == check)
    assert found.verdict == verdict, found
    first = next(p for p in PRESETS if p in refused)
    assert f"with preset {first}" in found.message, found
    other = "limit-range" if kind == "quota" else "quota"
    assert next(c for c in report.checks if c.profile == L4 and c.check == other).verdict == "pass"


def test_runtime_class_tolerations_and_node_selector_count_for_availability_and_doctor(
    kube: Any, namespace: str, start_controller: StartController
) -> None:
    node_api = client.NodeV1Api(kube)
    name = f"l4-{uuid.uuid4().hex[:6]}"
    node_api.create_runtime_class(
        {
            "metadata": {"name": name},
            "handler": "nvidia",
            "scheduling": {"nodeSelector": {"accelerator": L4}, "tolerations": [GPU_TOLERATION]},
        }
    )
    try:
        settings = example_settings(namespace)
        # No selector and no toleration of its own: both come from the RuntimeClass.
        settings["gpu"]["profiles"].append(
            {
                "name": "l4-by-runtime",
                "displayName": "L4 by its runtime",
                "resourceName": "nvidia.com/gpu",
                "count": 1,
                "runtimeClassName": name,
            }
        )
        api = Api(start_controller(settings))
        wait_for(lambda: api.free(L4)[1] is not None)
        by_runtime = api.availability().profile("l4-by-runtime")
        by_profile = api.availability().profile(L4)
        assert by_runtime is not None
        assert by_profile is not None
        # The same nodes as the profile that names them itself: the L4s, not the
        # time-sliced L4 or the A100 that also advertise GPU resources under other names.
        assert (by_runtime.capacity, by_runtime.reason) == (by_profile.capacity, None)
        assert by_runtime.capacity

        report = doctor.examine(settings_from_mapping(settings), kube)
        checks = {c.check: c for c in report.checks if c.profile == "l4-by-runtime"}
        assert checks["taints"].verdict == "pass", checks["taints"]
        assert checks["runtime-class"].verdict == "pass", checks["runtime-class"]
    finally:
        node_api.delete_runtime_class(name)


MIG_SLICE = "nvidia.com/mig-1g.10gb"
SHARED_L4 = "nvidia.com/gpu.shared"


def device_pod(name: str, resource: str, accelerator: str) -> dict[str, Any]:
    """A pod that is not a box: one unit of ``resource`` and a little CPU, on its GPU node."""
    spec = gpu_pod(name, resource, {"accelerator": accelerator})
    spec["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100m"
    return spec


def finishing_job(name: str) -> dict[str, Any]:
    """A Job whose one pod takes a time-slice of the shared L4 and then succeeds (kwok
    completes the pods Jobs own)."""
    pod = device_pod(name, SHARED_L4, "nvidia-l4-shared")
    pod["spec"]["restartPolicy"] = "Never"
    return {
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": pod["spec"]}},
    }


def counted_from_the_apiserver(core: client.CoreV1Api, resource: str) -> tuple[int, int]:
    """Free and total units of ``resource`` on the Ready, schedulable nodes, summed here
    from the apiserver's own lists: what a profile of one unit each may start."""
    taken: dict[str, int] = {}
    for pod in core.list_pod_for_all_namespaces().items:
        if not pod.spec.node_name or pod.status.phase in ("Succeeded", "Failed"):
            continue
        for container in pod.spec.containers:
            requests = (container.resources.requests if container.resources else None) or {}
            taken[pod.spec.node_name] = taken.get(pod.spec.node_name, 0) + int(
                requests.get(resource, 0)
            )
    free = total = 0
    for node in core.list_node().items:
        offered = int((node.status.allocatable or {}).get(resource, 0))
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        if offered and ready and not node.spec.unschedulable:
            free += max(offered - taken.get(node.metadata.name, 0), 0)
            total += offered
    return free, total


def recount_metrics(controller: Controller) -> tuple[float, float]:
    """How many recounts the controller made, and how many figures they found wrong."""
    text = requests.get(
        f"{controller.url}/metrics",
        headers={"Authorization": f"Bearer {controller.token}"},
        timeout=30,
    ).text

    def total(name: str) -> float:
        return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))

    return (
        total("devboxes_availability_recounts_total"),
        total("devboxes_availability_recount_disagreements_total"),
    )


def test_running_totals_equal_a_recount_while_pods_that_are_not_boxes_come_and_go(
    api: Api, controller: Controller, kube: Any, namespace: str
) -> None:
    for resource in (MIG_SLICE, SHARED_L4):
        wait_until_no_pod_requests(kube, resource)
    core = client.CoreV1Api(kube)
    batch = client.BatchV1Api(kube)
    rng = random.Random(1)
    # More pods than the A100's 7 slices: some wait, and take a slice as others go.
    alive = [f"mig-{i}" for i in range(12)]
    for name in alive:
        core.create_namespaced_pod(namespace, device_pod(name, MIG_SLICE, "nvidia-a100-mig"))
    jobs = [f"done-{i}" for i in range(3)]
    for name in jobs:
        batch.create_namespaced_job(namespace, finishing_job(name))
    for round_ in range(4):
        for name in rng.sample(alive, 3):
            alive.remove(name)
            delete_pod(kube, namespace, name)
            fresh = f"mig-{round_}-{name}"
            core.create_namespaced_pod(namespace, device_pod(fresh, MIG_SLICE, "nvidia-a100-mig"))
            alive.append(fresh)

    def jobs_done() -> bool:
        """every Job's pod has succeeded"""
        listed = batch.list_namespaced_job(namespace).items
        return sum(job.status.succeeded or 0 for job in listed) == len(jobs)

    wait_for(jobs_done, timeout=120)

    def served_equals_counted() -> bool:
        """the served counts equal the apiserver's, for the slices and the shared L4"""
        return all(
            api.free(profile)[:2] == counted_from_the_apiserver(core, resource)
            for profile, resource in ((MIG, MIG_SLICE), (L4_SHARED, SHARED_L4))
        )

    wait_for(served_equals_counted)
    # The A100 is full and pods still wait for it: the churn did reach the slices.
    assert api.free(MIG)[:2] == (0, 7)
    # A recount made after the churn agrees with the running totals, as all before it did.
    recounts, _ = recount_metrics(controller)
    wait_for(lambda: recount_metrics(controller)[0] > recounts, timeout=120)
    assert recount_metrics(controller)[1] == 0
    assert served_equals_counted()
