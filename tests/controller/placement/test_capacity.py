"""The availability computation and the doctor's checks as pure functions of plain data."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from devboxes_controller.box import status
from devboxes_controller.config.gpu import GpuProfileConfig
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.placement import capacity, doctor, doctor_facts, order, waiting

NOW = datetime(2030, 1, 1, tzinfo=UTC)
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def node(
    name: str,
    allocatable: dict[str, str],
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ready: bool = True,
    cordoned: bool = False,
) -> dict[str, Any]:
    raw = {
        "metadata": {"name": name, "resourceVersion": "1", "labels": labels or {}},
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", **allocatable},
            "capacity": {},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }
    return capacity.strip_node(raw)


def pod(node_name: str | None, requests: dict[str, str], phase: str = "Running") -> dict[str, Any]:
    return capacity.strip_pod(
        {
            "metadata": {"name": "p", "namespace": "other", "resourceVersion": "1"},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "resources": {"requests": requests}}],
            },
            "status": {"phase": phase},
        }
    )


def profile(**overrides: Any) -> GpuProfileConfig:
    data = {
        "name": "nvidia-l4",
        "displayName": "NVIDIA L4",
        "resourceName": "nvidia.com/gpu",
        "count": 1,
        "nodeSelector": {"accelerator": "nvidia-l4"},
        "tolerations": TOLERATE_GPU,
        **overrides,
    }
    return GpuProfileConfig.model_validate(data)


L4 = {"accelerator": "nvidia-l4"}


def l4_nodes(count: int = 2) -> list[dict[str, Any]]:
    return [node(f"l4-{i}", {"nvidia.com/gpu": "1"}, L4, [GPU_TAINT]) for i in range(count)]


def count(prof: GpuProfileConfig, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Any:
    return capacity.profile_availability(prof, nodes, capacity.usage_by_node(pods), waiting=0)


def test_dedicated_gpus_fall_as_pods_take_them_and_terminated_pods_give_them_back() -> None:
    nodes = l4_nodes()
    assert (count(profile(), nodes, []).available, count(profile(), nodes, []).capacity) == (2, 2)
    taken = [pod("l4-0", {"nvidia.com/gpu": "1"})]
    assert count(profile(), nodes, taken).available == 1
    done = [pod("l4-0", {"nvidia.com/gpu": "1"}, phase="Succeeded")]
    assert count(profile(), nodes, done).available == 2
    pending = [pod(None, {"nvidia.com/gpu": "1"})]
    assert count(profile(), nodes, pending).available == 2


def test_mig_and_shared_units_are_counted_as_units() -> None:
    mig = profile(
        name="mig", resourceName="nvidia.com/mig-1g.10gb", nodeSelector={}, tolerations=TOLERATE_GPU
    )
    nodes = [node("a100", {"nvidia.com/mig-1g.10gb": "7"}, taints=[GPU_TAINT]), *l4_nodes()]
    result = count(mig, nodes, [pod("a100", {"nvidia.com/mig-1g.10gb": "2"})])
    assert (result.available, result.capacity) == (5, 7)
    shared = profile(name="shared", resourceName="nvidia.com/gpu.shared", nodeSelector={})
    nodes = [node("l4s", {"nvidia.com/gpu.shared": "4"}, taints=[GPU_TAINT])]
    assert count(shared, nodes, []).capacity == 4
    assert count(profile(name="two", count=2, nodeSelector={}), nodes, []).capacity == 0


def test_count_divides_the_free_units_of_each_node() -> None:
    amd = profile(name="amd", resourceName="amd.com/gpu", count=2, nodeSelector={})
    nodes = [node("amd-0", {"amd.com/gpu": "5"}), node("amd-1", {"amd.com/gpu": "2"})]
    assert count(amd, nodes, []).capacity == 3
    assert count(amd, nodes, [pod("amd-0", {"amd.com/gpu": "2"})]).available == 2


@pytest.mark.parametrize(
    ("nodes", "reason"),
    [
        ([node("cpu", {})], capacity.NO_SELECTOR_MATCH),
        (
            [node("l4", {"nvidia.com/gpu": "1"}, L4, [GPU_TAINT], cordoned=True)],
            capacity.NONE_READY,
        ),
        ([node("l4", {"nvidia.com/gpu": "1"}, L4, [GPU_TAINT], ready=False)], capacity.NONE_READY),
        (
            [node("l4", {"nvidia.com/gpu": "1"}, L4, [{"key": "x", "effect": "NoExecute"}])],
            capacity.TAINTED,
        ),
        ([node("l4", {}, L4)], "No node of this profile advertises nvidia.com/gpu"),
    ],
)
def test_ineligible_nodes_give_capacity_zero_with_the_first_filter_that_removed_them(
    nodes: list[dict[str, Any]], reason: str
) -> None:
    result = count(profile(), nodes, [])
    assert (result.available, result.capacity, result.reason) == (0, 0, reason)


def test_prefer_no_schedule_taints_and_matching_values_do_not_exclude() -> None:
    soft = node("l4", {"nvidia.com/gpu": "1"}, L4, [{"key": "x", "effect": "PreferNoSchedule"}])
    assert count(profile(tolerations=[]), [soft], []).capacity == 1
    valued = node(
        "l4", {"nvidia.com/gpu": "1"}, L4, [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    )
    equal = [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]
    assert count(profile(tolerations=equal), [valued], []).capacity == 1
    wrong = [{"key": "k", "operator": "Equal", "value": "w"}]
    assert count(profile(tolerations=wrong), [valued], []).capacity == 0
    assert count(profile(tolerations=[{"operator": "Exists"}]), [valued], []).capacity == 1


def test_a_preset_counts_only_where_its_cpu_and_memory_fit() -> None:
    settings = Settings()
    nodes = [node("l4", {"nvidia.com/gpu": "4", "cpu": "1", "memory": "64Gi"}, L4, [GPU_TAINT])]
    usage = capacity.usage_by_node([pod("l4", {"cpu": "500m"})])
    small = capacity.profile_availability(profile(), nodes, usage, 0, settings.preset("small"))
    large = capacity.profile_availability(profile(), nodes, usage, 0, settings.preset("large"))
    assert (small.available, small.capacity) == (2, 4)
    assert (large.available, large.capacity) == (0, 0)


def test_pod_requests_follow_the_schedulers_sum_of_init_containers_and_sidecars() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}],
        "initContainers": [
            {"resources": {"requests": {"cpu": "3"}}},
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            {"resources": {"requests": {"cpu": "2"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    requests = capacity.pod_requests(spec)
    assert requests["cpu"] == capacity.quantity_value("3.1")
    assert requests["nvidia.com/gpu"] == 1


def test_stripped_objects_keep_only_what_the_computation_reads() -> None:
    stripped = capacity.strip_pod(
        {
            "metadata": {
                "name": "p",
                "namespace": "n",
                "resourceVersion": "7",
                "labels": {"a": "b"},
            },
            "spec": {"nodeName": "x", "containers": [{"image": "big", "env": [{"name": "A"}]}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c"}]},
        }
    )
    assert stripped == {
        "metadata": {"name": "p", "namespace": "n", "resourceVersion": "7"},
        "nodeName": "x",
        "phase": "Running",
        "requests": {},
    }


@pytest.mark.parametrize(
    ("position", "text"),
    [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (22, "22nd")],
)
def test_ordinals(position: int, text: str) -> None:
    assert waiting.ordinal(position) == text


def _queued(exact: bool = True, taken: bool = False) -> waiting.Queued:
    waiter = order.Waiter("b", "b-pod", "", "nvidia.com/gpu", 1, "2030-01-01T00:00:00Z", True)
    return waiting.Queued("nvidia-l4", "NVIDIA L4", waiter, exact, taken)


def test_waiting_summaries() -> None:
    taken = [pod(f"l4-{i}", {"nvidia.com/gpu": "1"}) for i in range(2)]
    full = capacity.profile_availability(profile(), l4_nodes(), capacity.usage_by_node(taken), 3)
    assert (
        waiting.waiting_summary(_queued(), full, 2)
        == "Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line"
    )
    # A DRA profile's line is not held by the gate: the scheduler picks.
    assert (
        waiting.waiting_summary(_queued(exact=False), full, 2)
        == "Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line (estimate)"
    )
    nothing = count(profile(), [node("cpu", {})], [])
    assert waiting.waiting_summary(_queued(), nothing, 1) == capacity.NO_SELECTOR_MATCH
    unknown = capacity.unknown([profile()], "forbidden", {}, NOW).profiles[0]
    assert (
        waiting.waiting_summary(_queued(), unknown, 3)
        == "Waiting for a free NVIDIA L4, 3rd in line"
    )
    taken = _queued(taken=True)
    assert waiting.waiting_summary(taken, full, 1) == (
        "Waiting for a free NVIDIA L4: a pod that is not a box took the one this box was "
        "let through for; 1st in line for the next"
    )
    # Pods that are not boxes holding devices the box could use are named.
    assert waiting.waiting_summary(taken, full, 2, ["ml/train"]) == (
        "Waiting for a free NVIDIA L4: a pod that is not a box took the one this box was "
        "let through for; 2nd in line for the next; devices held by a pod that is not a "
        "box: ml/train"
    )
    many = [f"ml/job-{i}" for i in range(5)]
    assert waiting.waiting_summary(_queued(), full, 1, many) == (
        "Waiting for a free NVIDIA L4: 0 of 2 free, 1st in line; devices held by pods that "
        "are not boxes: ml/job-0, ml/job-1, ml/job-2 and 2 more"
    )
    # A profile no node can serve says so, whoever holds what.
    assert waiting.waiting_summary(_queued(), nothing, 1, many) == capacity.NO_SELECTOR_MATCH


GI = 2**30


def test_a_box_short_of_cpu_or_memory_beside_a_free_device_names_it() -> None:
    free = capacity.profile_availability(profile(), l4_nodes(), {}, 2)
    cpu = order.Lack("cpu", Decimal(2), Decimal("0.5"))
    # Whatever the free count says, what the box lacks is what it waits for.
    assert waiting.waiting_summary(_queued(), free, 1, lacking=[cpu]) == (
        "Waiting for CPU on a node with a free NVIDIA L4: needs 2 CPU, at most 0.5 free on "
        "any such node; 1st in line"
    )
    assert waiting.waiting_summary(_queued(taken=True), free, 2, ["ml/a"], [cpu]) == (
        "Waiting for CPU on a node with a free NVIDIA L4: needs 2 CPU, at most 0.5 free on "
        "any such node; 2nd in line; devices held by a pod that is not a box: ml/a"
    )
    memory = order.Lack("memory", Decimal(4 * GI), Decimal(GI + GI // 3))
    assert waiting.lacking_summary("NVIDIA L4", [cpu, memory]) == (
        "Waiting for CPU and memory on a node with a free NVIDIA L4: needs 2 CPU and 4Gi "
        "memory, at most 0.5 CPU and 1.34Gi memory free on any such node"
    )
    little = order.Lack("memory", Decimal(4 * GI), Decimal(300 * 2**20 + 1))
    assert waiting.lacking_summary("NVIDIA L4", [little]) == (
        "Waiting for memory on a node with a free NVIDIA L4: needs 4Gi memory, at most "
        "300.01Mi free on any such node"
    )
    none = [order.Lack("cpu", Decimal(2), Decimal(0)), order.Lack("pods", Decimal(1), Decimal(0))]
    assert waiting.lacking_summary("NVIDIA L4", none) == (
        "Waiting for CPU and a pod slot on a node with a free NVIDIA L4: needs 2 CPU and 1 "
        "pod slot, none free on any such node"
    )
    apart = [
        order.Lack("cpu", Decimal(2), Decimal(4)),
        order.Lack("memory", Decimal(GI), Decimal(GI)),
    ]
    assert waiting.lacking_summary("NVIDIA L4", apart) == (
        "Waiting for CPU and memory on a node with a free NVIDIA L4: needs 2 CPU and 1Gi "
        "memory, no such node has both free"
    )


def test_the_pods_that_are_not_boxes_holding_a_device() -> None:
    def stripped(name: str, node: str | None, gpus: str, phase: str = "Running") -> Any:
        found = pod(node, {"nvidia.com/gpu": gpus}, phase)
        found["metadata"].update(name=name, namespace="ml")
        return found

    box = capacity.strip_pod(
        {
            "metadata": {"name": "b", "namespace": "boxes", "labels": {"devboxes.io/box": "b"}},
            "spec": {
                "nodeName": "l4-0",
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": 1}}}],
            },
            "status": {"phase": "Running"},
        }
    )
    pods = [
        box,
        stripped("train", "l4-0", "1"),
        stripped("cpu-only", "l4-0", "0"),
        stripped("elsewhere", "a100-0", "1"),
        stripped("pending", None, "1"),
        stripped("done", "l4-1", "1", phase="Succeeded"),
        stripped("eval", "l4-1", "2"),
    ]
    holding = capacity.holding(pods, "nvidia.com/gpu")
    assert capacity.pod_names(holding, {"l4-0", "l4-1"}) == ["ml/eval", "ml/train"]
    assert capacity.pod_names(holding, {"a100-0"}) == ["ml/elsewhere"]
    assert capacity.holding(pods, "amd.com/gpu") == []


def test_a_claim_still_binding_is_not_a_blocked_schedule() -> None:
    pod = {
        "metadata": {"name": "p", "creationTimestamp": "2030-01-01T00:00:00Z"},
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/7 nodes are available: pod has unbound immediate "
                    "PersistentVolumeClaims. preemption: 0/7 nodes are available.",
                }
            ]
        },
    }
    deployment = {
        "metadata": {"name": "devbox-x", "labels": {"devboxes.io/box": "x"}, "annotations": {}},
        "spec": {"replicas": 1},
    }
    objects = status.BoxObjects(deployment=deployment, pods=[pod])
    box = status.derive(objects, Settings(), datetime(2030, 1, 1, tzinfo=UTC))
    assert box.summary == status.SUMMARY_CLAIM_BINDING
    assert box.message is not None
    assert box.message.startswith("Scheduling blocked:")
    assert status.waiting_since(objects) is None


# -- the doctor --------------------------------------------------------------------------------


def settings_with(*profiles: dict[str, Any], **extra: Any) -> Settings:
    base = {
        "name": "nvidia-l4",
        "displayName": "NVIDIA L4",
        "resourceName": "nvidia.com/gpu",
        "count": 1,
    }
    listed = [{**base, **p} for p in profiles]
    return settings_from_mapping(
        {"gpu": {"enabled": True, "defaultProfile": listed[0]["name"], "profiles": listed}, **extra}
    )


def facts(**overrides: Any) -> doctor_facts.Facts:
    values: dict[str, Any] = {
        "nodes": l4_nodes(),
        "runtime_classes": [{"metadata": {"name": "nvidia"}}],
        "storage_classes": [
            {
                "metadata": {
                    "name": "standard",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                }
            }
        ],
        "quotas": [],
        "limit_ranges": [],
        **overrides,
    }
    return doctor_facts.Facts(**values)


def verdicts(report: Any, check: str) -> list[tuple[str, str, str | None]]:
    return [(c.verdict, c.message, c.fix) for c in report.checks if c.check == check]


def test_doctor_passes_a_well_configured_profile() -> None:
    settings = settings_with(
        {"nodeSelector": L4, "tolerations": TOLERATE_GPU, "runtimeClassName": "nvidia"}
    )
    report = doctor.diagnose(settings, facts())
    assert report.ok, report
    assert {c.check for c in report.checks} >= {
        "resource",
        "selector",
        "nodes",
        "taints",
        "count",
        "runtime-class",
        "quota",
        "limit-range",
        "storage-class",
        "permissions",
        "ssh-keys",
        "ssh-host",
    }


def test_doctor_fails_each_missing_prerequisite_with_its_fix() -> None:
    settings = settings_with(
        {"name": "nodes", "nodeSelector": {"accelerator": "h100"}, "tolerations": TOLERATE_GPU},
        {"name": "two", "count": 2, "nodeSelector": L4, "tolerations": TOLERATE_GPU},
        {"name": "amd", "resourceName": "amd.com/gpu"},
        {"name": "taint", "nodeSelector": L4},
        {"name": "rc", "nodeSelector": L4, "tolerations": TOLERATE_GPU, "runtimeClassName": "amd"},
        storageClassName="fast",
    )
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}
    report = doctor.diagnose(settings, facts(quotas=[quota]))
    assert not report.ok
    by = {(c.profile, c.check): c for c in report.checks if c.verdict == "fail"}
    assert by["nodes", "selector"].message == "no node matches the nodeSelector accelerator=h100"
    assert by["two", "count"].message == (
        "count 2 does not fit: the most nvidia.com/gpu on one node is 1"
    )
    assert (by["amd", "resource"].message, by["amd", "resource"].fix) == (
        "no node advertises amd.com/gpu",
        "install the device plugin or GPU Operator",
    )
    assert by["taint", "taints"].message.startswith(
        "the profile does not tolerate nvidia.com/gpu:NoSchedule on 2 of 2 node(s)"
    )
    assert by["rc", "runtime-class"].message.startswith("RuntimeClass amd does not exist")
    assert by["rc", "quota"].message.startswith(
        "ResourceQuota gpus allows 0 requests.nvidia.com/gpu"
    )
    assert by[None, "storage-class"].message.startswith("StorageClass fast does not exist")


def test_doctor_warns_when_it_cannot_read_and_names_denied_permissions() -> None:
    settings = settings_with({"nodeSelector": L4, "tolerations": TOLERATE_GPU})
    denied = [p for p in doctor_facts.PERMISSIONS if p.resource in ("nodes", "deployments")]
    report = doctor.diagnose(
        settings,
        facts(nodes=None, denied=denied, unreadable={"nodes": "nodes is forbidden"}),
    )
    permissions = verdicts(report, "permissions")
    assert permissions[0][0] == "fail"
    assert "may not list deployments.apps in the box namespace" in permissions[0][1]
    assert permissions[1][0] == "warn"
    assert "list nodes cluster-wide" in permissions[1][1]
    assert verdicts(report, "resource") == [
        (
            "warn",
            "cannot read nodes: nodes is forbidden",
            "grant the controller list on nodes (the chart's ClusterRole and Role do)",
        )
    ]


def test_doctor_warns_that_without_the_kube_system_read_the_cluster_has_no_id() -> None:
    settings = settings_with({"nodeSelector": L4, "tolerations": TOLERATE_GPU})
    denied = [p for p in doctor_facts.PERMISSIONS if p.resource in ("namespaces", "nodes")]
    report = doctor.diagnose(settings, facts(denied=denied))
    assert verdicts(report, "permissions")[1] == (
        "warn",
        "the controller may not list nodes cluster-wide; watch nodes cluster-wide; get "
        "namespaces/kube-system cluster-wide (availability reports unknown; the capabilities "
        "give no cluster id)",
        "enable controller.availability.enabled so the chart grants those reads; grant get on "
        "the kube-system Namespace, as the chart's ClusterRole does",
    )
    (namespace,) = [p for p in doctor_facts.PERMISSIONS if p.resource == "namespaces"]
    alone = verdicts(doctor.diagnose(settings, facts(denied=[namespace])), "permissions")
    assert alone[1][1].endswith("(the capabilities give no cluster id)")


def test_the_doctor_asks_about_kube_system_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, str]] = []
    monkeypatch.setattr(
        doctor.preflight, "access_allowed", lambda api, attributes: asked.append(attributes)
    )
    (namespace,) = [p for p in doctor_facts.PERMISSIONS if p.resource == "namespaces"]
    doctor._allowed(None, namespace, "boxes")  # type: ignore[arg-type]
    assert asked == [{"verb": "get", "resource": "namespaces", "group": "", "name": "kube-system"}]


def cluster_checks(report: Any) -> dict[str, tuple[str, str, str | None]]:
    return {c.check: (c.verdict, c.message, c.fix) for c in report.checks if c.profile is None}


def test_doctor_warns_that_without_ssh_keys_nobody_logs_in() -> None:
    report = doctor.diagnose(settings_from_mapping({"namespace": "boxes"}), facts())
    verdict, message, fix = cluster_checks(report)["ssh-keys"]
    assert (verdict, message) == (
        "warn",
        "no operator SSH keys are configured: boxes made with the operator token accept no "
        "login (people's boxes accept the keys each person adds with devbox keys add)",
    )
    assert fix == (
        "put the public keys that may log in under the key authorized_keys of a Secret in "
        "namespace boxes (kubectl -n boxes create secret generic devbox-ssh-keys "
        "--from-file=authorized_keys=KEYS_FILE) and set controller.ssh.authorizedKeysSecret "
        "to its name"
    )
    assert report.ok


def test_a_named_keys_secret_passes_without_being_read() -> None:
    settings = settings_from_mapping({"ssh": {"authorizedKeysSecret": "team-keys"}})
    assert cluster_checks(doctor.diagnose(settings, facts()))["ssh-keys"] == (
        "pass",
        "boxes take their SSH keys from the key authorized_keys of Secret team-keys in "
        "namespace devboxes (not verified: the controller may not read Secrets)",
        None,
    )
    assert not any(
        p.resource == "secrets" and p.verb in ("get", "list") for p in doctor_facts.PERMISSIONS
    )


NO_SSH_HOST = (
    "warn",
    "controller.ssh.serviceType is NodePort and controller.ssh.host is empty: no SSH command "
    "can be printed, and boxes stay starting, waiting for an SSH address",
    "set controller.ssh.host to an address of the nodes that users can reach, or set "
    "controller.ssh.serviceType to LoadBalancer where the cluster provides load balancers",
)


@pytest.mark.parametrize(
    ("ssh", "found"),
    [
        (
            {"host": "gpu.example.org"},
            ("pass", "SSH commands show gpu.example.org and each box's node port", None),
        ),
        (
            {"serviceType": "LoadBalancer", "host": None},
            ("pass", "SSH commands show each box's LoadBalancer address", None),
        ),
        ({"serviceType": "NodePort", "host": ""}, NO_SSH_HOST),
        ({"host": None}, NO_SSH_HOST),
    ],
)
def test_doctor_warns_when_a_node_port_has_no_host_to_show(
    ssh: dict[str, Any], found: tuple[str, str, str | None]
) -> None:
    report = doctor.diagnose(settings_from_mapping({"ssh": ssh}), facts())
    assert cluster_checks(report)["ssh-host"] == found
    assert report.ok


def test_doctor_judges_each_image_profiles_pull_policy() -> None:
    resources = {"cpuRequest": "10m", "memoryRequest": "8Mi", "cpuLimit": "1", "memoryLimit": "1Gi"}
    digest = "example/web@sha256:" + "1" * 64

    def image(name: str, reference: str, policy: str) -> dict[str, Any]:
        return {
            "name": name,
            "displayName": name,
            "image": reference,
            "pullPolicy": policy,
            "resources": resources,
        }

    profiles = [
        image("pinned", digest, "IfNotPresent"),
        image("tagged", "example/web:1.2", "Always"),
        image("digest-always", digest, "Always"),
        image("preloaded", "example/web:1.2", "Never"),
    ]
    settings = settings_from_mapping({"images": {"enabled": True, "profiles": profiles}})
    report = doctor.diagnose(settings, facts())
    assert verdicts(report, "image-pull-policy") == [
        ("pass", "image profile pinned is pulled with IfNotPresent", None),
        ("pass", "image profile tagged is pulled with Always", None),
        (
            "warn",
            "image profile digest-always has pullPolicy Always on a digest: the image can never "
            "change, yet every start asks the registry, and fails while the registry is "
            "unreachable",
            "set pullPolicy to IfNotPresent",
        ),
        (
            "warn",
            "image profile preloaded has pullPolicy Never: its boxes start only on nodes that "
            "already hold the image, and fail with ErrImageNeverPull elsewhere",
            "load the image on every node that may run boxes, or set pullPolicy to IfNotPresent",
        ),
    ]
    assert all(c.profile is None for c in report.checks if c.check == "image-pull-policy")
    disabled = settings_from_mapping({"images": {"enabled": False, "profiles": profiles}})
    assert verdicts(doctor.diagnose(disabled, facts()), "image-pull-policy") == []


def test_permissions_match_the_charts_roles() -> None:
    from pathlib import Path

    import yaml

    rbac = Path(__file__).resolve().parents[3] / "charts" / "devboxes" / "templates" / "rbac.yaml"
    text = "\n".join(line for line in rbac.read_text().splitlines() if "{{" not in line)
    granted = set()
    for document in yaml.safe_load_all(text):
        if not document or "rules" not in document:
            continue
        cluster = document["kind"] == "ClusterRole"
        for rule in document["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames", [None]):
                            granted.add((group, resource, verb, not cluster, name))
    wanted = {(p.group, p.resource, p.verb, p.namespaced, p.name) for p in doctor_facts.PERMISSIONS}
    assert wanted == granted


# -- what a RuntimeClass adds at admission -----------------------------------------------------


def runtime_class(name: str, **scheduling: Any) -> dict[str, Any]:
    return capacity.strip_runtime_class({"metadata": {"name": name}, "scheduling": scheduling})


def with_runtime(prof: GpuProfileConfig, classes: list[dict[str, Any]]) -> Any:
    by_name = {c["metadata"]["name"]: c for c in classes}
    return capacity.profile_availability(prof, l4_nodes(), {}, 0, runtime_classes=by_name)


def test_a_runtime_class_adds_its_tolerations_and_narrows_to_its_nodes() -> None:
    bare = profile(tolerations=[], runtimeClassName="nvidia")
    assert with_runtime(bare, [runtime_class("nvidia")]).reason == capacity.TAINTED
    tolerating = runtime_class("nvidia", tolerations=TOLERATE_GPU)
    assert with_runtime(bare, [tolerating]).capacity == 2

    narrowed = profile(nodeSelector={}, runtimeClassName="nvidia")
    only_l4 = runtime_class("nvidia", nodeSelector=L4)
    nodes = [*l4_nodes(), node("other", {"nvidia.com/gpu": "4"})]
    result = capacity.profile_availability(
        narrowed, nodes, {}, 0, runtime_classes={"nvidia": only_l4}
    )
    assert result.capacity == 2
    elsewhere = runtime_class("nvidia", nodeSelector={"accelerator": "h100"})
    assert with_runtime(profile(runtimeClassName="nvidia"), [elsewhere]).reason == (
        capacity.NO_SELECTOR_MATCH
    )


def test_a_missing_runtime_class_leaves_no_room() -> None:
    result = with_runtime(profile(runtimeClassName="amd"), [runtime_class("nvidia")])
    assert (result.available, result.capacity, result.reason) == (0, 0, capacity.NO_RUNTIME)


def test_stripped_runtime_class_keeps_its_scheduling_only() -> None:
    raw = {
        "metadata": {"name": "nvidia", "resourceVersion": "3", "labels": {"a": "b"}},
        "handler": "nvidia",
        "overhead": {"podFixed": {"cpu": "100m"}},
        "scheduling": {
            "nodeSelector": L4,
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 5}],
        },
    }
    assert capacity.strip_runtime_class(raw) == {
        "metadata": {"name": "nvidia", "resourceVersion": "3"},
        "scheduling": {"nodeSelector": L4, "tolerations": [{"key": "k", "operator": "Exists"}]},
    }


def test_doctor_counts_runtime_class_tolerations_as_tolerated() -> None:
    settings = settings_with({"nodeSelector": L4, "runtimeClassName": "nvidia"})
    bare = doctor.diagnose(settings, facts(runtime_classes=[{"metadata": {"name": "nvidia"}}]))
    assert [v for v, _, _ in verdicts(bare, "taints")] == ["fail"]
    tolerating = {"metadata": {"name": "nvidia"}, "scheduling": {"tolerations": TOLERATE_GPU}}
    report = doctor.diagnose(settings, facts(runtime_classes=[tolerating]))
    assert verdicts(report, "taints") == [("pass", "every taint on its nodes is tolerated", None)]
    assert report.ok


# -- quotas and limit ranges against the presets -----------------------------------------------


def limit_range(name: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"limits": list(items)}}


def quota(name: str, hard: dict[str, str], used: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"hard": hard}, "status": {"used": used or {}}}


def admission_verdicts(**found: Any) -> dict[str, tuple[str, str, str | None]]:
    settings = settings_with({"nodeSelector": L4, "tolerations": TOLERATE_GPU})
    report = doctor.diagnose(settings, facts(**found))
    return {
        c.check: (c.verdict, c.message, c.fix)
        for c in report.checks
        if c.check in ("quota", "limit-range")
    }


def test_quota_and_limit_range_pass_when_every_preset_fits() -> None:
    roomy = quota("roomy", {"requests.cpu": "10", "limits.memory": "64Gi", "pods": "5"})
    bounds = limit_range("bounds", {"type": "Container", "max": {"memory": "16Gi", "cpu": "4"}})
    assert admission_verdicts(quotas=[roomy], limit_ranges=[bounds]) == {
        "limit-range": ("pass", "no LimitRange forbids its boxes", None),
        "quota": ("pass", "every ResourceQuota has room for its boxes", None),
    }


def test_a_cpu_quota_below_every_preset_fails_with_the_smallest_need() -> None:
    found = admission_verdicts(quotas=[quota("compute", {"requests.cpu": "100m"})])
    assert found["quota"] == (
        "fail",
        "ResourceQuota compute allows 100m requests.cpu, less than a box of this profile "
        "with preset small asks (250m)",
        "raise requests.cpu in ResourceQuota compute to at least 250m",
    )


def test_a_memory_quota_that_only_the_large_preset_exceeds_is_a_warning() -> None:
    found = admission_verdicts(quotas=[quota("memory", {"limits.memory": "8Gi"})])
    assert found["quota"] == (
        "warn",
        "ResourceQuota memory allows 8Gi limits.memory, less than a box of this profile with "
        "preset large asks (16Gi)",
        "raise limits.memory in ResourceQuota memory to at least 16Gi; until then, boxes of "
        "this profile need preset small or medium",
    )


def test_a_full_quota_is_a_warning_for_now_and_a_zero_gpu_quota_fails() -> None:
    full = quota("gpus", {"requests.nvidia.com/gpu": "2"}, {"requests.nvidia.com/gpu": "2"})
    assert admission_verdicts(quotas=[full])["quota"] == (
        "warn",
        "ResourceQuota gpus has 0 of 2 requests.nvidia.com/gpu left, less than a box of this "
        "profile with preset small asks (1)",
        "raise requests.nvidia.com/gpu in ResourceQuota gpus, or free some: its pods in "
        "namespace devboxes hold the rest",
    )
    zero = quota("gpus", {"requests.nvidia.com/gpu": "0"})
    verdict, message, _ = admission_verdicts(quotas=[zero])["quota"]
    assert (verdict, message) == (
        "fail",
        "ResourceQuota gpus allows 0 requests.nvidia.com/gpu, less than a box of this profile "
        "with preset small asks (1)",
    )


def test_a_cpu_limit_quota_needs_a_default_cpu_limit() -> None:
    tracked = quota("compute", {"limits.cpu": "100"})
    verdict, message, fix = admission_verdicts(quotas=[tracked])["quota"]
    assert (verdict, message, fix) == (
        "fail",
        "ResourceQuota compute tracks limits.cpu, so every container must declare a cpu "
        "limit; a box of this profile with preset small has none on its devbox container",
        "add a LimitRange with a default cpu limit to namespace devboxes, or remove limits.cpu "
        "from ResourceQuota compute",
    )
    defaults = limit_range("defaults", {"type": "Container", "default": {"cpu": "4"}})
    assert admission_verdicts(quotas=[tracked], limit_ranges=[defaults])["quota"][0] == "pass"


def test_limit_range_bounds_per_container_and_per_pod() -> None:
    container_max = limit_range(
        "caps", {"type": "Container", "max": {"cpu": "1", "memory": "16Gi"}}
    )
    verdict, message, fix = admission_verdicts(limit_ranges=[container_max])["limit-range"]
    assert (verdict, message) == (
        "warn",
        "LimitRange caps allows at most 1 cpu per container; a box of this profile with preset "
        "large sets 2 on its devbox container",
    )
    assert fix is not None
    assert fix.endswith("need preset small or medium")

    pod_max = limit_range("pods", {"type": "Pod", "max": {"memory": "2Gi"}})
    assert admission_verdicts(limit_ranges=[pod_max])["limit-range"] == (
        "fail",
        "LimitRange pods allows at most 2Gi memory per pod; a box of this profile with preset "
        "small sets 4Gi on the pod",
        "raise max memory in LimitRange pods to at least 4Gi",
    )
    pod_cpu = limit_range("pods", {"type": "Pod", "max": {"cpu": "8"}})
    verdict, message, _ = admission_verdicts(limit_ranges=[pod_cpu])["limit-range"]
    assert (verdict, message) == (
        "fail",
        "LimitRange pods caps cpu at 8 per pod, which needs a cpu limit on the pod, and a box "
        "of this profile with preset small sets none",
    )
    gpus = limit_range("gpus", {"type": "Container", "max": {"nvidia.com/gpu": "0"}})
    assert admission_verdicts(limit_ranges=[gpus])["limit-range"][0] == "fail"


def test_limit_range_minimum_ratio_and_a_default_below_the_request() -> None:
    least = limit_range("least", {"type": "Container", "min": {"cpu": "500m"}})
    verdict, message, _ = admission_verdicts(limit_ranges=[least])["limit-range"]
    assert (verdict, message) == (
        "warn",
        "LimitRange least requires at least 500m cpu per container; a box of this profile with "
        "preset small sets 250m on its devbox container",
    )
    ratio = limit_range("ratio", {"type": "Container", "maxLimitRequestRatio": {"memory": "4"}})
    verdict, message, _ = admission_verdicts(limit_ranges=[ratio])["limit-range"]
    assert (verdict, message) == (
        "warn",
        "LimitRange ratio allows a memory limit at most 4 times the request per container; a "
        "box of this profile with preset small has 8 on its devbox container",
    )
    low_default = limit_range("defaults", {"type": "Container", "default": {"cpu": "500m"}})
    verdict, message, _ = admission_verdicts(limit_ranges=[low_default])["limit-range"]
    assert (verdict, message) == (
        "warn",
        "a LimitRange's default cpu limit 500m is below the request 750m of a box of this "
        "profile with preset medium on its devbox container",
    )


def test_quota_scopes_that_box_pods_are_not_in_are_ignored() -> None:
    scoped = {
        "metadata": {"name": "batch"},
        "spec": {"hard": {"requests.cpu": "1m"}, "scopes": ["Terminating"]},
    }
    assert admission_verdicts(quotas=[scoped])["quota"][0] == "pass"
