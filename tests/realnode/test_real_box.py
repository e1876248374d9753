"""Boxes on the testbed's real node, where a kubelet, containerd and runc run them.

A box is created through the controller's API, reached with a real ssh client through its
NodePort Service by the command the API prints, and keeps its home across stop and start.
A GPU box gets the node's simulated GPUs in its main container only; a box of a DRA
profile gets the device its claim was allocated from the node's DRA plugin, which gives it
back when the box stops. A key a person adds with `devbox keys add` opens their running
box within seconds. Image profiles run
as the workspace or beside it. JupyterLab's devbox
kernel runs a cell in a box there. Every block of the operator guide's walkthrough runs
there as written: the images built here are pushed to the testbed's registry and pulled
from it by the node, the Helm chart runs the controller as a pod, `helm test` passes, a box
of the chart's controller answers SSH and JupyterLab offers its kernel. The node leaves
nothing behind when the testbed stops.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from devboxes_controller.box.naming import MAIN_CONTAINER
from devboxes_jupyter.kernelspecs import CPU_KERNEL
from devboxes_jupyter.provisioner import box_name
from devboxes_testbed import L4, host
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import ANY_ADDRESS, Controller, example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from devboxes_testbed.process import free_port
from devboxes_testbed.rig import Rig
from footprint import Footprint
from kubernetes import client as kube_client
from labserver import KernelChannels, running_lab
from sshd import make_key
from support import REPO, Api, chromium_browser, need_chromium, run_cli, wait_for

NAMESPACE = "real-boxes"
KEYS_SECRET = "devbox-keys"
SIDECAR = "helper"
IDLE_NAMESPACE = "idle-boxes"
PEOPLE_NAMESPACE = "people-boxes"
CHART = REPO / "charts" / "devboxes"
DRA_NAMESPACE = "dra-real-boxes"
NVIDIA = "gpu.nvidia.com"
BOX_LABEL = "devboxes.io/box=real-dra"
PRODUCT = f"device.attributes['{NVIDIA}'].productName"
# A DRA profile for the L4s the real node's DRA plugin publishes (tests/data/nodes-real.yaml).
REAL_L4_DRA: dict[str, Any] = {
    "name": "l4-dra",
    "displayName": "NVIDIA L4 through DRA",
    "deviceClassName": NVIDIA,
    "selectors": [f"has({PRODUCT}) && {PRODUCT} == 'NVIDIA L4'"],
    "count": 1,
}
STAYS_UNTIL_TERM = "trap 'exit 0' TERM; sleep infinity & wait"
# The L4 profile's device groups here: one the image has (video), one it does not.
DEVICE_GROUPS = (44, 4242)
ACTIVITY_TAKEN = (
    'devboxes_http_requests_total{method="POST",route="/api/v1/devboxes/{name}/activity",'
    'status="204"}'
)


@pytest.fixture(scope="module")
def real_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A testbed whose only node is a real one with two simulated L4s: every box runs there."""
    why = host.can_run()
    if why is not None:
        pytest.skip(f"this machine cannot run a real node: {why}")
    with Rig(tmp_path_factory.mktemp("real-testbed")) as rig:
        bed = rig.start_testbed(
            REPO / "tests" / "data" / "nodes-real.yaml", log=lambda message: None
        )
        node = bed.real_node
        assert node is not None
        made = Footprint.of(node)
        yield bed
    # Only once the testbed stopped: what the node leaves behind is what its stop left.
    left = made.left()
    assert left == [], f"the real node left these behind: {left}"


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_key(tmp_path_factory.mktemp("ssh-key"))


def serve(
    bed: Testbed,
    namespace: str,
    key: Path,
    workdir: Path,
    idle_minutes: float | None = None,
    previews: bool = False,
    **changes: Any,
) -> Controller:
    """A controller on its own namespace whose boxes accept ``key`` and print the real
    node's address in their ssh commands, reachable from boxes on the real node;
    ``idle_minutes`` stops idle boxes after that window; with ``previews``, it serves
    web previews on ``{port}-{box}.localhost``; ``changes`` replace top-level settings."""
    from kubernetes import client

    node = bed.real_node
    assert node is not None
    core = client.CoreV1Api(bed.api_client())
    core.create_namespace({"metadata": {"name": namespace}})
    public_key = key.with_suffix(".pub").read_text()
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": KEYS_SECRET}, "stringData": {"authorized_keys": public_key}},
    )
    settings = example_settings(namespace)
    settings["ssh"] = {
        "serviceType": "NodePort",
        "host": node.address,
        "authorizedKeysSecret": KEYS_SECRET,
    }
    settings.update(changes)
    port = free_port()
    if idle_minutes is not None:
        settings["idle"] = {
            "stopAfterMinutes": idle_minutes,
            "cpuStopAfterMinutes": idle_minutes,
            "controllerUrl": f"http://{node.machine_address}:{port}",
        }
    if previews:
        settings["connections"] = {"previewUrl": f"http://*.localhost:{port}"}
    return Controller(bed.kubeconfig, settings, workdir, port=port, listen_host=ANY_ADDRESS).start()


@pytest.fixture(scope="module")
def api(
    real_testbed: Testbed, key: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    gpu = example_settings(NAMESPACE)["gpu"]
    for profile in gpu["profiles"]:
        if profile["name"] == L4:
            profile["supplementalGroups"] = list(DEVICE_GROUPS)
    process = serve(
        real_testbed,
        NAMESPACE,
        key,
        tmp_path_factory.mktemp("controller"),
        gpu=gpu,
        # A sidecar that exits on SIGTERM, as docs/controller.md asks of one: a stopped
        # box's pod is then gone in moments, not the whole grace period.
        sidecars=[{"name": SIDECAR, "command": ["sh", "-c", STAYS_UNTIL_TERM]}],
    )
    try:
        yield Api(process)
    finally:
        process.stop()


# What ssh says when a box's Service does not yet lead to its new pod.
NOT_YET_SWITCHED = (
    "Connection refused",
    "timed out",
    "Connection closed by",
    "Broken pipe",
    "Connection reset",
)


def ssh(box: dict[str, Any], key: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in the box with the ssh command the API printed for it.

    A connection that fails before the session starts is tried again for a while:
    kube-proxy writes a new endpoint's forwarding rules shortly after the pod turns ready,
    as on any cluster, and until then a connection may reach nothing (refused, timed out)
    or be dropped before its session starts (closed, broken pipe, reset). A session that
    starts and is then cut is not tried again: since a start waits for the previous pod
    to be gone, no pod of the box but the ready one can take it."""
    printed = shlex.split(box["ssh_command"])
    assert printed[0] == "ssh", printed
    options = [
        "-i", str(key),
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=no",
        "-o", f"UserKnownHostsFile={key.parent / 'known_hosts'}",
        "-o", "ConnectTimeout=3",
    ]  # fmt: skip

    def attempt() -> subprocess.CompletedProcess[str] | None:
        result = subprocess.run(
            [printed[0], *options, *printed[1:], command],
            capture_output=True,
            text=True,
            timeout=60,
        )
        unreachable = any(sign in result.stderr for sign in NOT_YET_SWITCHED)
        return None if result.returncode == 255 and unreachable else result

    return wait_for(attempt, timeout=60)


def test_a_box_runs_answers_ssh_and_keeps_its_home_across_stop_and_start(
    api: Api, key: Path
) -> None:
    api.created("real-box")
    box = api.wait_ready("real-box", timeout=180)
    assert box["ssh_host"] == api_node_address(api)

    first = ssh(box, key, "id && echo kept-across-restarts > ~/note && hostname")
    assert first.returncode == 0, first.stderr
    assert "uid=1000(dev)" in first.stdout
    assert "groups=1000(dev),27(sudo)" in first.stdout

    assert api.verb("real-box", "stop").status_code == 200
    wait_for(lambda: api.box("real-box")["state"] == "stopped", timeout=120)
    assert api.verb("real-box", "start").status_code == 200
    again = api.wait_ready("real-box", timeout=180)

    second = ssh(again, key, "cat ~/note")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "kept-across-restarts"
    api.purge("real-box")


def test_a_gpu_box_sees_its_simulated_gpus_in_the_main_container_only(
    api: Api, key: Path, real_testbed: Testbed
) -> None:
    node = real_testbed.real_node
    assert node is not None
    api.created("real-gpu", gpu={"profile": L4})
    box = api.wait_ready("real-gpu", timeout=180)

    # What an SSH session sees: the entrypoint hands the device variable to login shells.
    session = ssh(box, key, "echo $NVIDIA_VISIBLE_DEVICES; ls /dev/nvidia*; nvidia-smi -L")
    assert session.returncode == 0, session.stderr
    visible, *rest = session.stdout.strip().splitlines()

    # The profile's device groups reach the login session, as the entrypoint promises.
    groups = ssh(box, key, "id -G")
    assert groups.returncode == 0, groups.stderr
    assert set(DEVICE_GROUPS) <= {int(g) for g in groups.stdout.split()}
    given = visible.split(",")
    assert len(given) == 1
    assert given[0] in node.gpu_ids
    assert "/dev/nvidia" in rest[0]
    assert f"(UUID: {given[0]})" in rest[-1]

    # The simulated GPU reports what the machine writes for it, as the sampler reads it.
    (node.gpu_share / "devices" / given[0] / "utilization").write_text("73\n")
    query = "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits"
    busy = ssh(box, key, query)
    assert busy.returncode == 0, busy.stderr
    assert busy.stdout.strip() == "73"

    # The sidecar shares the pod but not the device: only the main container has its file.
    pod = pod_name(real_testbed, NAMESPACE, "real-gpu")

    def gpu_files(container: str) -> list[str]:
        listing = kubectl(
            real_testbed, NAMESPACE, "exec", f"pod/{pod}", "-c", container, "--", "ls", "/dev"
        )
        return sorted(name for name in listing.split() if name.startswith("nvidia"))

    assert gpu_files(MAIN_CONTAINER) == [f"nvidia{node.gpu_ids.index(given[0])}"]
    assert gpu_files(SIDECAR) == []
    api.purge("real-gpu")


def node_slice(bed: Testbed) -> dict[str, Any] | None:
    """The ResourceSlice the real node's DRA plugin publishes, as the API returns it."""
    node = bed.real_node
    assert node is not None
    found = json.loads(
        kubectl(
            bed,
            "default",
            "get",
            "resourceslices",
            f"--field-selector=spec.nodeName={node.name},spec.driver={NVIDIA}",
            "-o",
            "json",
        )
    )["items"]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_the_real_node_publishes_its_dra_gpus_as_the_nvidia_driver_does(
    real_testbed: Testbed,
) -> None:
    node = real_testbed.real_node
    assert node is not None
    published = wait_for(lambda: node_slice(real_testbed), timeout=60)["spec"]
    assert published["pool"]["name"] == node.name
    # Numbered after the device plugin's two GPUs: no GPU is offered both ways.
    devices = {d["name"]: d for d in published["devices"]}
    assert sorted(devices) == ["gpu-2", "gpu-3"]
    assert not {f"GPU-{node.name}-{n}" for n in (2, 3)} & set(node.gpu_ids)
    # The attribute set of the simulated NVIDIA nodes, so that their DeviceClasses and
    # profiles select these devices too.
    pools = yaml.safe_load((REPO / "testbed" / "nodes-dra.yaml").read_text())["pools"]
    (l4,) = [p["devices"]["kinds"][0] for p in pools if p["name"] == "dra-l4"]
    for number in (2, 3):
        device = devices[f"gpu-{number}"]
        attributes = dict(device["attributes"])
        assert attributes.pop("uuid") == {"string": f"GPU-{node.name}-{number}"}
        assert attributes.pop("index") == {"int": number}
        assert attributes == l4["attributes"]
        assert device["capacity"] == {"memory": {"value": l4["capacity"]["memory"]}}


def test_a_dra_box_gets_the_allocated_gpu_and_gives_it_back_when_stopped(
    real_testbed: Testbed, key: Path, tmp_path: Path
) -> None:
    node = real_testbed.real_node
    assert node is not None
    gpu = example_settings(DRA_NAMESPACE)["gpu"]
    gpu["profiles"].append(REAL_L4_DRA)
    process = serve(real_testbed, DRA_NAMESPACE, key, tmp_path, gpu=gpu)
    try:
        api = Api(process)
        api.created("real-dra", gpu={"profile": REAL_L4_DRA["name"]})
        box = api.wait_ready("real-dra", timeout=180)
        assert box["gpu"]["kind"] == "dra"
        pod = kubectl(real_testbed, DRA_NAMESPACE, "get", "pods", "-l", BOX_LABEL, "-o", "json")
        (pod_object,) = json.loads(pod)["items"]
        assert pod_object["spec"]["nodeName"] == node.name
        claim = json.loads(
            kubectl(
                real_testbed, DRA_NAMESPACE, "get", "resourceclaims", "-l", BOX_LABEL, "-o", "json"
            )
        )["items"]
        (claim_object,) = claim
        (result,) = claim_object["status"]["allocation"]["devices"]["results"]
        published = node_slice(real_testbed)
        assert published is not None
        device = next(d for d in published["spec"]["devices"] if d["name"] == result["device"])
        uuid = device["attributes"]["uuid"]["string"]
        index = device["attributes"]["index"]["int"]

        session = ssh(box, key, "echo $NVIDIA_VISIBLE_DEVICES; ls /dev/nvidia*; nvidia-smi -L")
        assert session.returncode == 0, session.stderr
        assert session.stdout.strip().splitlines() == [
            uuid,
            f"/dev/nvidia{index}",
            f"GPU 0: NVIDIA L4 (simulated) (UUID: {uuid})",
        ]
        spec = node.cdi_dir / f"{NVIDIA}-{claim_object['metadata']['uid']}.json"
        assert spec.is_file()
        (reported,) = wait_for(lambda: api.box("real-dra")["gpu"]["allocated"], timeout=60)
        assert reported == {
            "product": device["attributes"]["productName"]["string"],
            "memory": device["capacity"]["memory"]["value"],
            "alternative": 0,
        }

        # A claim that says it holds the box's device too is refused by the node's plugin,
        # the last line against two boxes sharing a GPU.
        refused = intruding_pod(real_testbed, claim_object)
        assert f"is prepared for claim {claim_object['metadata']['uid']}" in refused

        # Stopped, the box's pod and claim go, and the plugin removes the claim's spec.
        assert api.verb("real-dra", "stop").status_code == 200
        wait_for(lambda: api.box("real-dra")["state"] == "stopped", timeout=120)

        def claims() -> list[Any]:
            found = kubectl(real_testbed, DRA_NAMESPACE, "get", "resourceclaims", "-o", "name")
            return found.split()

        wait_for(lambda: claims() == [], timeout=60)
        wait_for(lambda: not spec.exists(), timeout=60)
        assert list(node.cdi_dir.iterdir()) == []
        api.purge("real-dra")
    finally:
        process.stop()


def intruding_pod(bed: Testbed, held: dict[str, Any]) -> str:
    """Run a pod on the real node with a claim whose allocation is that of ``held``, as no
    scheduler would write it; the kubelet's event saying why it cannot start, once the pod
    is gone again."""
    node = bed.real_node
    assert node is not None
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "intruder"},
        "spec": held["spec"],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "intruder"},
        "spec": {
            "nodeName": node.name,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "intruder"}],
            "containers": [
                {
                    "name": "main",
                    "image": "devboxes/workspace:0.1.0",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "infinity"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    for manifest in (claim, pod):
        created = kubectl_run(bed, DRA_NAMESPACE, "create", "-f", "-", input=json.dumps(manifest))
        assert created.returncode == 0, created.stderr
    uid = kubectl(bed, DRA_NAMESPACE, "get", "pod/intruder", "-o", "jsonpath={.metadata.uid}")
    status = {
        "status": {
            "allocation": held["status"]["allocation"],
            "reservedFor": [{"resource": "pods", "name": "intruder", "uid": uid}],
        }
    }
    kubectl(
        bed, DRA_NAMESPACE, "patch", "resourceclaim/intruder", "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip

    def refusal() -> str | None:
        events = kubectl(
            bed, DRA_NAMESPACE, "get", "events",
            "--field-selector=involvedObject.kind=Pod,involvedObject.name=intruder", "-o", "json",
        )  # fmt: skip
        reasons = [e["message"] for e in json.loads(events)["items"] if e["type"] == "Warning"]
        return next((m for m in reasons if "prepared for claim" in m), None)

    message = wait_for(refusal, timeout=60)
    phase = kubectl(bed, DRA_NAMESPACE, "get", "pod/intruder", "-o", "jsonpath={.status.phase}")
    assert phase == "Pending"
    kubectl(bed, DRA_NAMESPACE, "delete", "pod/intruder", "resourceclaim/intruder", "--wait")
    return message


def test_image_profiles_run_as_the_workspace_and_beside_it(
    api: Api, key: Path, real_testbed: Testbed
) -> None:
    # testbed/settings.yaml: "python" replaces the workspace image; "web-preview" serves
    # HTTP on 8080 from a sidecar running as nobody.
    api.created("real-python", image="python")
    api.created("real-web", image="web-preview")
    workspace = api.wait_ready("real-python", timeout=180)
    assert workspace["image"]["mode"] == "workspace"
    login = ssh(workspace, key, "id -un")
    assert (login.returncode, login.stdout.strip()) == (0, "dev"), login.stderr
    main = json.loads(
        kubectl(
            real_testbed,
            NAMESPACE,
            "get",
            f"pod/{pod_name(real_testbed, NAMESPACE, 'real-python')}",
            "-o",
            "jsonpath={.spec.containers[0]}",
        )
    )
    assert (main["name"], main["image"], main["imagePullPolicy"]) == (
        "devbox",
        "devboxes/workspace:0.1.0",
        "IfNotPresent",
    )

    web = api.wait_ready("real-web", timeout=180)
    assert web["image"]["ports"] == [{"name": "http", "container_port": 8080, "protocol": "TCP"}]
    # From an SSH session in the box, the sidecar answers on the pod's own localhost.
    fetch = (
        "python3 -c \"import urllib.request as r; a = r.urlopen('http://localhost:8080/', "
        'timeout=10); print(a.status, a.read().decode())"'
    )
    answer = wait_for(
        lambda: (done := ssh(web, key, fetch)).returncode == 0 and done,
        timeout=60,
    )
    assert answer.stdout.startswith("200 "), answer.stdout
    assert "Directory listing for /" in answer.stdout
    pod = pod_name(real_testbed, NAMESPACE, "real-web")
    who = kubectl(real_testbed, NAMESPACE, "exec", f"pod/{pod}", "-c", "environment", "--", "id")
    assert who.startswith("uid=65534(nobody)"), who
    # The sidecar has none of the box's credentials or devices.
    sidecar_env = kubectl(
        real_testbed, NAMESPACE, "exec", f"pod/{pod}", "-c", "environment", "--", "env"
    )
    assert "NVIDIA_VISIBLE_DEVICES" not in sidecar_env
    assert "DEVBOX_" not in sidecar_env
    api.purge("real-python", "real-web")


def test_the_devbox_kernel_runs_a_cell_in_a_box_on_the_real_node(
    api: Api, key: Path, real_testbed: Testbed, tmp_path: Path
) -> None:
    node = real_testbed.real_node
    assert node is not None
    owner = "realnode"
    args = [
        f"--DevboxKernelProvisioner.ssh_key_file={key}",
        f"--DevboxKernelProvisioner.owner={owner}",
        f"--DevboxKernelProvisioner.known_hosts_file={tmp_path / 'known_hosts'}",
    ]
    controller = api.controller
    with running_lab(tmp_path / "lab", controller.url, controller.token, args) as lab:
        kernel = f"devbox-{L4}"
        wait_for(lambda: kernel in lab.api("GET", "api/kernelspecs")["kernelspecs"], timeout=60)
        with KernelChannels.start(lab, kernel, timeout=300) as channels:
            result = channels.execute(
                "import os, socket\n"
                "print(socket.gethostname(), os.environ['NVIDIA_VISIBLE_DEVICES'])"
            )
    assert result.status == "ok", result.errors
    host, device = result.stdout.split()
    box = box_name(owner, L4)
    assert host.startswith(f"devbox-{box}-")
    assert device in node.gpu_ids
    api.purge(box)


def test_a_persons_lab_runs_a_kernel_with_a_key_of_its_own_that_only_their_boxes_accept(
    real_testbed: Testbed, key: Path, issuer: Issuer, tmp_path: Path
) -> None:
    """A Lab acting as alice, with no key configured: the kernel makes its own key, adds it
    to alice's keys and logs in to alice's box on the real node, whose sshd reads alice's
    keys; the operator's key, which opens the operator's boxes, does not open hers."""
    auth = {"oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID}}
    process = serve(real_testbed, PEOPLE_NAMESPACE, key, tmp_path / "controller", auth=auth)
    try:
        token = issuer.token_for("alice")
        args = [
            "--DevboxKernelProvisioner.owner=alice",
            f"--DevboxKernelProvisioner.known_hosts_file={tmp_path / 'known_hosts'}",
        ]
        alice = Api(process)
        alice.session.headers["Authorization"] = f"Bearer {token}"
        with running_lab(tmp_path / "lab", process.url, token, args) as lab:
            wait_for(lambda: CPU_KERNEL in lab.api("GET", "api/kernelspecs")["kernelspecs"])
            # While the kernel runs: a Lab that stops gives its kernels' boxes back.
            with KernelChannels.start(lab, CPU_KERNEL, timeout=300) as channels:
                result = channels.execute("import getpass; print(getpass.getuser())")
                assert result.status == "ok", result.errors
                assert result.stdout.strip() == "dev"
                own = lab.data.parent / "user-data" / "devboxes" / "kernel_ed25519"
                keys = alice.call("GET", "/keys")["items"]
                assert [k["comment"] for k in keys] == ["devbox-kernels-alice"]
                box = alice.box(box_name("alice", None))
                assert box["owner"] == "alice"
                # Her kernel's key logs in; the operator's does not.
                assert ssh(box, own, "true").returncode == 0
                refused = ssh(box, key, "true")
                assert refused.returncode == 255
                assert "Permission denied" in refused.stderr
        alice.purge(box["name"])
    finally:
        process.stop()


KEYS_NAMESPACE = "keys-boxes"
DEVBOX_SCRIPT = str(Path(sys.executable).with_name("devbox"))
# Well inside the real node's kubelet sync period (10 s), at which the mount would be
# rewritten anyway: a key that only counts from then misses this twice in a row.
KEY_TAKES_EFFECT_SECONDS = 5


def test_a_key_added_with_the_cli_opens_a_running_box_within_seconds(
    real_testbed: Testbed, key: Path, issuer: Issuer, tmp_path: Path
) -> None:
    """Bob adds keys with `devbox keys add` while his box runs on the real node: each
    opens the box within seconds, as the CLI says, not at the kubelet's next sync."""
    auth = {"oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID}}
    process = serve(real_testbed, KEYS_NAMESPACE, key, tmp_path / "controller", auth=auth)
    try:
        token = issuer.token_for("bob")
        bob = Api(process)
        bob.session.headers["Authorization"] = f"Bearer {token}"
        box = bob.created("bobs-box")
        box = bob.wait_ready(box["name"], timeout=300)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("DEVBOX_")},
            "DEVBOX_URL": process.url,
            "DEVBOX_TOKEN": token,
            "DEVBOX_CONFIG": str(tmp_path / "devbox.toml"),
        }
        for turn in ("first", "second"):
            (tmp_path / turn).mkdir()
            new = make_key(tmp_path / turn)
            refused = ssh(box, new, "true")
            assert (refused.returncode, "Permission denied" in refused.stderr) == (255, True)
            added = run_cli(DEVBOX_SCRIPT, env, "keys", "add", str(new.with_suffix(".pub")))
            assert added.returncode == 0, added.stderr
            assert added.stdout.endswith("; your boxes accept it within seconds.\n")

            def opens(new: Path = new) -> bool:
                """the key just added opens the running box"""
                return ssh(box, new, "true").returncode == 0

            wait_for(opens, timeout=KEY_TAKES_EFFECT_SECONDS)
        bob.purge(box["name"])
    finally:
        process.stop()


def test_an_idle_box_is_stopped_and_one_whose_gpu_is_busy_is_not(
    real_testbed: Testbed, key: Path, tmp_path: Path
) -> None:
    node = real_testbed.real_node
    assert node is not None
    # Every simulated GPU is busy before the GPU box starts, so no sample ever says idle.
    for device in node.gpu_ids:
        (node.gpu_share / "devices" / device / "utilization").write_text("90\n")
    controller = serve(real_testbed, IDLE_NAMESPACE, key, tmp_path, idle_minutes=0.25)
    try:
        api = Api(controller)
        api.created("quiet")
        api.created("busy", gpu={"profile": L4})
        api.wait_ready("quiet", timeout=180)
        api.wait_ready("busy", timeout=180)

        def stopped() -> dict[str, Any] | None:
            """the CPU box, idle from its agent's first report, is stopped for it"""
            box = api.box("quiet")
            return box if box["state"] == "stopped" else None

        quiet = wait_for(stopped, timeout=180)
        assert "idle" in quiet["message"], quiet
        selector = "reason=IdleStopped,involvedObject.name=devbox-quiet"

        def recorded() -> str:
            """an IdleStopped event for the idle box (Events are written after the stop)"""
            return kubectl(
                real_testbed,
                IDLE_NAMESPACE,
                "get",
                "events",
                "-o",
                "name",
                f"--field-selector={selector}",
            ).strip()

        wait_for(recorded, timeout=60)

        # The GPU box's agent has reported (its reports reach the controller) and, with
        # its GPU busy, it is active and running, well past its window.
        def reported() -> dict[str, Any] | None:
            """the GPU box's agent has reported a known utilization"""
            box = api.box("busy")
            activity = box.get("activity") or {}
            return box if activity.get("state") == "active" else None

        busy = wait_for(reported, timeout=180)
        assert busy["state"] == "ready", busy
        assert busy["activity"]["stops_at"] is None

        # It stays so across its agent's next two reports (one a minute), each written back
        # before it is counted as taken. Once the idle box's pod is gone, they are the only
        # reports the controller takes.
        def quiet_gone() -> bool:
            """the idle box's pod, and with it its agent, is gone"""
            return not kubectl(
                real_testbed,
                IDLE_NAMESPACE,
                "get",
                "pods",
                "-l",
                "devboxes.io/box=quiet",
                "-o",
                "name",
            ).strip()

        wait_for(quiet_gone, timeout=120)
        pod = pod_uid(real_testbed, IDLE_NAMESPACE, "busy")
        taken = reports_taken(controller)
        for more in (1, 2):
            wait_for(
                lambda more=more: reports_taken(controller) >= taken + more, timeout=150, interval=1
            )
            assert idle_since(real_testbed, IDLE_NAMESPACE, "busy") is None
            box = api.box("busy")
            assert (box["state"], box["activity"]["state"]) == ("ready", "active"), box
        assert pod_uid(real_testbed, IDLE_NAMESPACE, "busy") == pod

        # A new operator token invalidates every activity credential; the leader writes the
        # box's new one into its Secret and the kubelet updates the running pod's file.
        agent = [
            "exec",
            f"pod/{pod_name(real_testbed, IDLE_NAMESPACE, 'busy')}",
            "-c",
            "activity",
            "--",
        ]
        old = kubectl(
            real_testbed,
            IDLE_NAMESPACE,
            *agent,
            "sh",
            "-c",
            'cat "$DEVBOX_ACTIVITY_CREDENTIAL_FILE"',
        )
        controller.stop()
        controller = Controller(
            controller.kubeconfig,
            controller.settings,
            tmp_path,
            port=controller.fixed_port,
            listen_host=ANY_ADDRESS,
        ).start()
        api = Api(controller)

        def accepted() -> bool:
            """a report of the running GPU box's own agent is accepted after the rotation"""
            result = kubectl_run(
                real_testbed, IDLE_NAMESPACE, *agent, "devbox-activity-agent", "--once"
            )
            return result.returncode == 0 and not result.stderr.strip()

        wait_for(accepted, timeout=120, interval=2)
        new = kubectl(
            real_testbed,
            IDLE_NAMESPACE,
            *agent,
            "sh",
            "-c",
            'cat "$DEVBOX_ACTIVITY_CREDENTIAL_FILE"',
        )
        assert new != old
        assert pod_uid(real_testbed, IDLE_NAMESPACE, "busy") == pod
        api.purge("quiet", "busy")
    finally:
        controller.stop()


NOTICE_NAMESPACE = "notice-boxes"


class Session:
    """An interactive ssh session, with a terminal, opened straight to a box's SSH port
    by the command the API printed; what the terminal shows is collected as it comes."""

    def __init__(self, box: dict[str, Any], key: Path) -> None:
        printed = shlex.split(box["ssh_command"])
        self._process = subprocess.Popen(
            [
                printed[0], "-tt", "-i", str(key),
                "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no",
                "-o", f"UserKnownHostsFile={key.parent / 'known_hosts'}",
                *printed[1:], "echo session-open; sleep 600",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.shown = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        while chunk := self._process.stdout.read1(4096):
            self.shown += chunk

    def close(self) -> None:
        self._process.kill()
        self._process.wait(timeout=30)
        self._reader.join(timeout=30)


def test_a_session_opened_straight_to_the_box_is_warned_of_each_stop_once(
    real_testbed: Testbed, key: Path, tmp_path: Path
) -> None:
    # Every stop within the lead time: one at once when the box starts, which no session
    # sees, and one for the stop an extend moves it to, which the open session is shown.
    controller = serve(
        real_testbed, NOTICE_NAMESPACE, key, tmp_path, stopWarnings={"leadMinutes": 179}
    )
    session = None
    try:
        api = Api(controller)
        api.created("warned", ttl_hours=1)
        box = api.wait_ready("warned", timeout=180)
        wait_for(lambda: api.box("warned").get("stop_warning") is not None, timeout=60)
        # Once the node forwards the box's port (the helper waits for that), a session.
        assert ssh(box, key, "true").returncode == 0
        session = Session(box, key)
        assert wait_for(lambda: b"session-open" in session.shown, timeout=60), session.shown
        extended = api.call("POST", "/devboxes/warned/extend", json={"hours": 1})
        stops_at = extended["expires_at"][11:16]

        def shown() -> bytes | None:
            """the open session shows the warning of the stop the extend moved it to"""
            return session.shown if f"at {stops_at} UTC".encode() in session.shown else None

        seen = wait_for(shown, timeout=180)
        lines = [line for line in seen.split(b"\r\n") if line.startswith(b"\a*** Box warned")]
        assert len(lines) == 1, seen
        assert b"its time to live ends" in lines[0], seen
        # The same stop is never shown twice.
        time.sleep(15)
        assert session.shown.count(b"*** Box warned") == 1, session.shown
        api.purge("warned")
    finally:
        if session is not None:
            session.close()
        controller.stop()


def reports_taken(controller: Controller) -> float:
    """The activity reports the controller has taken, as its metrics count them."""
    metrics = requests.get(f"{controller.url}/metrics", headers=controller.headers(), timeout=30)
    assert metrics.status_code == 200, metrics.text
    for line in metrics.text.splitlines():
        if line.startswith(ACTIVITY_TAKEN):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def idle_since(bed: Testbed, namespace: str, box: str) -> str | None:
    """Since when the box's activity record says it is idle, as the apiserver has it."""
    record = kubectl(
        bed, namespace, "get", f"deployment/devbox-{box}",
        "-o", "jsonpath={.metadata.annotations.devboxes\\.io/activity}",
    )  # fmt: skip
    since = json.loads(record)["idleSince"]
    return None if since is None else str(since)


def pod_uid(bed: Testbed, namespace: str, box: str) -> str:
    uids = kubectl(
        bed, namespace, "get", "pods", "-l", f"devboxes.io/box={box}",
        "-o", "jsonpath={.items[*].metadata.uid}",
    ).split()  # fmt: skip
    assert len(uids) == 1, uids
    return uids[0]


def pod_name(bed: Testbed, namespace: str, box: str) -> str:
    names = kubectl(
        bed, namespace, "get", "pods", "-l", f"devboxes.io/box={box}", "-o", "name"
    ).split()
    assert len(names) == 1, names
    return names[0].removeprefix("pod/")


TRANSCRIPT = REPO / "test-artifacts" / "walkthrough.txt"
WALKTHROUGH_BLOCK = re.compile(r"<!-- walkthrough: ([a-z-]+) -->\n```bash\n(.*?)\n```\n", re.S)
# The block with the walkthrough's example addresses, which an operator replaces with their
# own.
ADDRESSES = "registry"
# How long each block may take, each below the test's own limit so that a stuck block
# fails with its name and output. Building the images cold takes minutes; helm's and
# devbox's own waits (5 minutes) end before theirs.
BLOCK_SECONDS = {"build": 600, "push": 300, "install": 420, "first-box": 420, "jupyter": 300}
BLOCK_SECONDS_OTHERWISE = 120
WALKTHROUGH_SECONDS = 1200
GPU_KERNEL = f"devbox-{L4}"


def walkthrough() -> list[tuple[str, str]]:
    """The operator guide's walkthrough: each block's name and its commands, in order."""
    return WALKTHROUGH_BLOCK.findall((REPO / "docs" / "operator-guide.md").read_text())


def checkout_copy(to: Path) -> Path:
    """This checkout's files as git sees them (tracked and new, not ignored), with their
    times, and its virtualenv: the walkthrough writes `dist/` and `values.yaml` there, not
    in the checkout others work in. The times are kept so that make finds the virtualenv
    as up to date as in the checkout, and never reinstalls it from the copy."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    (to / ".venv").symlink_to(REPO / ".venv")
    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=to, capture_output=True)
    if stale.returncode != 0:
        pytest.fail("the virtualenv is older than pyproject.toml: run `make venv` first")
    return to


class Terminal:
    """One bash that the walkthrough is typed into block by block, as into a terminal:
    exports and background jobs carry from block to block. Everything it prints goes to
    the transcript; its standard input is empty, as an operator types nothing more."""

    def __init__(self, cwd: Path, env: dict[str, str], transcript: Path) -> None:
        self.transcript = transcript
        reader, self.writer = os.pipe()
        with transcript.open("w") as out:
            self.shell = subprocess.Popen(
                ["bash", f"/dev/fd/{reader}"],
                pass_fds=(reader,),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        os.close(reader)
        self.type(
            "set -euo pipefail\n"
            # The port-forward of the first box goes with the shell.
            "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
        )

    def type(self, text: str) -> None:
        os.write(self.writer, text.encode())

    def text(self) -> str:
        return self.transcript.read_text(errors="replace")

    def start(self, name: str, commands: str) -> None:
        """Run one block, echoed as written, never expanded: the token stays out of the
        transcript."""
        self.type(
            f'echo "== walkthrough: {name} at ${{SECONDS}} s"\n'
            f"set -v\n{commands}\nset +v\n"
            f'echo "== walkthrough: {name} ended at ${{SECONDS}} s"\n'
        )

    def wait(self, name: str, seconds: float) -> None:
        ended = re.compile(rf"^== walkthrough: {re.escape(name)} ended at \d+ s$", re.M)

        def block_ended() -> bool:
            if ended.search(self.text()):
                return True
            if self.shell.poll() is not None:
                pytest.fail(f"block {name} failed:\n{self.text()[-6000:]}")
            return False

        block_ended.__doc__ = f"block {name} ended, within {seconds} s; see {self.transcript}"
        wait_for(block_ended, timeout=seconds, interval=0.5)

    def close(self) -> int:
        """End the shell (its EXIT trap stops its background jobs) and anything left in
        its session, such as a block that did not end; its exit code."""
        os.close(self.writer)
        try:
            code = self.shell.wait(30)
        except subprocess.TimeoutExpired:
            code = -1
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.shell.pid, signal.SIGKILL)
        self.shell.wait()
        return code


def kernel_offered(home: Path, kernel: str, seconds: float) -> dict[str, Any]:
    """The kernelspec ``kernel`` once the JupyterLab running with ``home`` offers it; the
    Lab is then stopped, as its operator stops it when done."""

    def server() -> dict[str, Any] | None:
        """JupyterLab wrote down its URL, token and pid"""
        runtime = home / ".local" / "share" / "jupyter" / "runtime"
        for found in runtime.glob("jpserver-*.json"):
            return dict(json.loads(found.read_text()))
        return None

    lab = wait_for(server, timeout=seconds)

    def offered() -> dict[str, Any] | None:
        """JupyterLab offers the kernel"""
        try:
            answer = requests.get(
                f"{lab['url']}api/kernelspecs", params={"token": lab["token"]}, timeout=10
            )
        except requests.ConnectionError:
            # Written down a moment before it listens, or refusing while the machine is busy.
            return None
        answer.raise_for_status()
        specs: dict[str, Any] = answer.json()["kernelspecs"]
        return specs.get(kernel)

    spec: dict[str, Any] = wait_for(offered, timeout=60)
    os.kill(lab["pid"], signal.SIGTERM)
    return spec


@pytest.mark.timeout(WALKTHROUGH_SECONDS)
def test_the_operator_guides_walkthrough_runs_on_the_real_node(
    real_testbed: Testbed, tmp_path: Path
) -> None:
    """Every block of the guide's walkthrough, as an operator runs it from a checkout: the
    images built here are pushed to the testbed's registry and pulled from there by the
    node, the package is installed from the wheel into the operator's own virtualenv,
    the chart runs the controller as a pod, the doctors agree, a GPU box made by the
    chart's controller answers SSH, JupyterLab offers the profile's kernel, and the
    clean-up leaves nothing."""
    from kubernetes import client

    node = real_testbed.real_node
    assert node is not None
    assert real_testbed.bin_dir is not None
    blocks = walkthrough()
    assert [name for name, _ in blocks] == [
        "cluster", "build", "registry", "push", "values", "install", "first-box", "jupyter",
        "clean-up",
    ]  # fmt: skip
    checkout = checkout_copy(tmp_path / "checkout")

    # The operator's own machine: a key pair, an ssh that trusts a box's new host key as a
    # person answering "yes" would, skopeo told that the registry speaks plain HTTP, a
    # JupyterLab that may run as root and opens no browser, and a virtualenv to install in.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    identity = home / ".ssh" / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(identity)], check=True)
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "ssh").write_text(
        "#!/bin/sh\n"
        f"exec /usr/bin/ssh -i {identity} -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
        f' -o UserKnownHostsFile={home / ".ssh" / "known_hosts"} "$@"\n'
    )
    (shims / "ssh").chmod(0o755)
    containers = home / ".config" / "containers"
    containers.mkdir(parents=True)
    (containers / "registries.conf").write_text(
        f'[[registry]]\nlocation = "{real_testbed.registry}"\ninsecure = true\n'
    )
    (home / ".jupyter").mkdir()
    (home / ".jupyter" / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"allow_root": True, "open_browser": False}})
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    verdicts = tmp_path / "verdicts"
    verdicts.mkdir()

    environment = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DEVBOX_", "JUPYTER_")) and k != "VIRTUAL_ENV"
        },
        "HOME": str(home),
        "KUBECONFIG": str(real_testbed.kubeconfig),
        # pip's cache stays where it is on this machine, not in the operator's new home.
        "PIP_CACHE_DIR": str(Path.home() / ".cache" / "pip"),
        "PATH": os.pathsep.join(
            [str(shims), str(venv / "bin"), str(real_testbed.bin_dir), os.environ["PATH"]]
        ),
    }
    ours = {"registry.example.com": real_testbed.registry}
    TRANSCRIPT.parent.mkdir(parents=True, exist_ok=True)
    terminal = Terminal(checkout, environment, TRANSCRIPT)
    try:
        for name, commands in blocks:
            if name == ADDRESSES:
                for example, address in ours.items():
                    assert example in commands, example
                    commands = commands.replace(example, address)
            if name == "clean-up":
                # The test's own look, before the clean-up: each doctor's verdicts.
                terminal.type(
                    "devboxes-controller doctor --settings values.yaml --namespace devboxes"
                    f" --json > {verdicts / 'doctor.json'}\n"
                    f"devbox gpu doctor --json > {verdicts / 'api.json'}\n"
                )
            terminal.start(name, commands)
            if name == "jupyter":
                # The Lab runs in the foreground until the operator stops it.
                spec = kernel_offered(home, GPU_KERNEL, BLOCK_SECONDS[name])
                assert spec["spec"]["display_name"] == "Python 3 on NVIDIA L4 (devbox)"
            terminal.wait(name, BLOCK_SECONDS.get(name, BLOCK_SECONDS_OTHERWISE))
    finally:
        code = terminal.close()
    assert code == 0, terminal.text()[-6000:]

    # What the session in the box printed: its pod's name, its device, the simulated GPU.
    lines = terminal.text().splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("devbox-first-")]
    device, listed = lines[at + 1], lines[at + 2]
    assert device in node.gpu_ids, lines[at:]
    assert f"(UUID: {device})" in listed
    # devbox create printed how to connect: through the controller, no Service of its own.
    assert "Connect with: devbox ssh first" in terminal.text().splitlines()

    def verdict(name: str) -> list[tuple[str, str]]:
        report = json.loads((verdicts / name).read_text())
        return sorted(
            (check["profile"] or "", check["check"], check["verdict"]) for check in report["checks"]
        )

    assert verdict("doctor.json") == verdict("api.json")

    # The node pulled both images from the registry: nothing was put into it by hand. The
    # kubelet lists images from a cache it refreshes every 30 s, so a pull shows up late.
    core = client.CoreV1Api(real_testbed.api_client())
    wanted = {
        f"{real_testbed.registry}/devboxes/{image}:0.1.0" for image in ("controller", "workspace")
    }

    def both_pulled() -> bool:
        """the node's status lists the controller and workspace images from the registry"""
        listed = {name for entry in core.read_node(node.name).status.images for name in entry.names}
        return wanted <= listed

    wait_for(both_pulled, timeout=120, interval=2)

    def nothing_left() -> bool:
        """the purge and the uninstall left no pod, Service, volume or chart Secret"""
        pods = core.list_namespaced_pod("devboxes").items
        services = core.list_namespaced_service("devboxes").items
        claims = core.list_namespaced_persistent_volume_claim("devboxes").items
        secrets = core.list_namespaced_secret(
            "devboxes", label_selector="app.kubernetes.io/instance=devboxes"
        ).items
        return not (pods or services or claims or secrets)

    wait_for(nothing_left, timeout=120)


def kubectl_run(
    bed: Testbed, namespace: str, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    assert bed.bin_dir is not None
    return subprocess.run(
        [str(bed.bin_dir / "kubectl"), f"--kubeconfig={bed.kubeconfig}", "-n", namespace, *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=input,
    )


def kubectl(bed: Testbed, namespace: str, *args: str) -> str:
    result = kubectl_run(bed, namespace, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def api_node_address(api: Api) -> str:
    return str(api.controller.settings["ssh"]["host"])


TUNNEL_NAMESPACE = "tunnel-boxes"


class Proxy:
    """An HTTP proxy on loopback, as a person's network may put between them and the
    controller: it opens tunnels (CONNECT), which it counts, and passes plain requests on."""

    def __init__(self) -> None:
        self.tunnels = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, target, rest = head.split(b" ", 2)
            if method == b"CONNECT":
                where, _, port = target.decode().rpartition(":")
                first = b""
            else:
                # http://host:port/path: the request goes on with the path alone.
                address = urllib.parse.urlsplit(target.decode())
                where, port = address.hostname or "", str(address.port or 80)
                first = b" ".join([method, (address.path or "/").encode(), rest])
            with socket.create_connection((where, int(port)), timeout=10) as upstream:
                if method == b"CONNECT":
                    self.tunnels += 1
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    upstream.sendall(first)
                upstream.settimeout(None)
                copy = threading.Thread(target=self._copy, args=(upstream, client), daemon=True)
                copy.start()
                self._copy(client, upstream)
                copy.join(30)

    @staticmethod
    def _copy(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()


def test_a_box_without_a_service_is_reached_through_the_controller_by_every_ssh_tool(
    real_testbed: Testbed, key: Path, tmp_path: Path
) -> None:
    """With no per-box Service, ssh, scp, sftp and ssh -L reach a box through the
    controller's tunnel by the block `devbox config-ssh` writes, checking the box's host
    key against the one the API publishes; also through an HTTP CONNECT proxy."""
    controller = serve(
        real_testbed,
        TUNNEL_NAMESPACE,
        key,
        tmp_path / "controller",
        ssh={"serviceType": "None", "authorizedKeysSecret": KEYS_SECRET},
    )
    proxy = Proxy()
    try:
        api = Api(controller)
        api.created("tunneled")
        box = api.wait_ready("tunneled", timeout=180)
        assert (box["ssh_host"], box["ssh_command"]) == (None, "devbox ssh tunneled")
        (published,) = box["ssh_host_keys"]
        core = kube_client.CoreV1Api(real_testbed.api_client())
        assert core.list_namespaced_service(TUNNEL_NAMESPACE).items == []
        environment = {
            **os.environ,
            "DEVBOX_URL": controller.url,
            "DEVBOX_TOKEN": controller.token,
        }
        config = tmp_path / "ssh_config"
        written = subprocess.run(
            [sys.executable, "-m", "devboxes_sdk", "config-ssh", "--file", str(config)],
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        assert written.returncode == 0, written.stderr
        options = [
            "-F", str(config),
            "-i", str(key),
            "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes",
            # Only the key the controller published is trusted: none was recorded before.
            "-o", "UserKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes",
        ]  # fmt: skip

        def run(*argv: str, via: dict[str, str] = environment) -> str:
            done = subprocess.run(
                list(argv), env=via, capture_output=True, text=True, timeout=120, check=False
            )
            assert done.returncode == 0, f"{argv[0]}: {done.stderr}"
            return done.stdout

        assert run("ssh", *options, "tunneled.devbox", "uname -n").startswith("devbox-tunneled")

        # scp of 100 MB, both ways equal.
        big = tmp_path / "big"
        big.write_bytes(os.urandom(100 * 1024 * 1024))
        run("scp", *options, str(big), "tunneled.devbox:/tmp/big")
        local = hashlib.sha256(big.read_bytes()).hexdigest()
        assert run("ssh", *options, "tunneled.devbox", "sha256sum /tmp/big").split()[0] == local

        batch = tmp_path / "sftp-batch"
        batch.write_text("ls -l /tmp/big\n")
        assert "/tmp/big" in run("sftp", *options, "-b", str(batch), "tunneled.devbox")

        # ssh -L to a port in the box.
        run(
            "ssh", *options, "tunneled.devbox",
            "nohup python3 -m http.server 8765 --bind 127.0.0.1 --directory /tmp "
            ">/dev/null 2>&1 &",
        )  # fmt: skip
        local_port = free_port()
        forward = subprocess.Popen(
            ["ssh", *options, "-N", "-L", f"127.0.0.1:{local_port}:127.0.0.1:8765",
             "tunneled.devbox"],
            env=environment,
        )  # fmt: skip
        try:

            def listing() -> str | None:
                with contextlib.suppress(requests.RequestException):
                    return requests.get(f"http://127.0.0.1:{local_port}/", timeout=5).text
                return None

            assert "big" in wait_for(listing, timeout=60)
        finally:
            forward.terminate()
            forward.wait(15)

        # devbox port-forward, with the person's key in their agent as ssh finds it.
        agent = dict(
            line.split(";")[0].split("=", 1)
            for line in run("ssh-agent", "-s").splitlines()
            if line.startswith("SSH_AUTH_SOCK=") or line.startswith("SSH_AGENT_PID=")
        )
        with_agent = {**environment, **agent}
        try:
            run("ssh-add", str(key), via=with_agent)
            local_port = free_port()
            forwarding = subprocess.Popen(
                [sys.executable, "-m", "devboxes_sdk", "port-forward", "tunneled",
                 f"8765:{local_port}"],
                env=with_agent,
            )  # fmt: skip
            try:
                assert "big" in wait_for(listing, timeout=60)
            finally:
                forwarding.terminate()
                forwarding.wait(15)
        finally:
            subprocess.run(["ssh-agent", "-k"], env=with_agent, capture_output=True, check=False)

        # Through an HTTP proxy: the same, and the tunnel went through CONNECT.
        proxied = {name: value for name, value in environment.items() if name.lower() != "no_proxy"}
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            proxied[name] = proxy.url
        assert run("ssh", *options, "tunneled.devbox", "true", via=proxied) == ""
        assert proxy.tunnels >= 1

        # A box answering with another key than the published one is refused.
        other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKkjqDdHrvbNz0BMqo9aYthg2EPqhEXqfGvE3oTSnGuu"
        assert other != published
        refused = subprocess.run(
            ["ssh", *options, "-o", f"KnownHostsCommand=/bin/echo %H {other}",
             "tunneled.devbox", "true"],
            env=environment, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert refused.returncode == 255
        assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stderr

        # A stopped box: one line that says so, from the tunnel's refusal.
        api.call("POST", "/devboxes/tunneled/stop")
        stopped = subprocess.run(
            ["ssh", *options, "tunneled.devbox", "true"],
            env=environment, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert stopped.returncode == 255
        assert "devbox 'tunneled' is stopped; start it with: devbox start tunneled" in (
            stopped.stderr
        )
    finally:
        proxy.close()
        controller.stop()


PREVIEW_NAMESPACE = "preview-boxes"
ARTIFACTS = REPO / "test-artifacts" / "realnode"
PREVIEW_PAGE = "<h1 id=made>made in the box</h1>"


def test_a_web_preview_serves_what_the_person_writes_and_opens_from_the_dashboard(
    real_testbed: Testbed, key: Path, tmp_path: Path
) -> None:
    """The "web-preview" sidecar serves the box's ~/public, which the box makes its
    person's; with no per-box Service, the dashboard opens it in Chromium on the preview's
    own origin, and `devbox status` says where."""
    need_chromium()
    from playwright.sync_api import expect

    controller = serve(
        real_testbed,
        PREVIEW_NAMESPACE,
        key,
        tmp_path / "controller",
        previews=True,
        ssh={"serviceType": "None", "authorizedKeysSecret": KEYS_SECRET},
    )
    try:
        api = Api(controller)
        api.created("site", image="web-preview")
        api.wait_ready("site", timeout=180)
        pod = pod_name(real_testbed, PREVIEW_NAMESPACE, "site")
        as_person = ["exec", f"pod/{pod}", "-c", MAIN_CONTAINER, "--", "runuser", "-u", "dev"]
        owner = kubectl(
            real_testbed, PREVIEW_NAMESPACE, *as_person, "--", "stat", "-c", "%U %a",
            "/home/dev/public",
        )  # fmt: skip
        assert owner.split() == ["dev", "755"]
        kubectl(
            real_testbed, PREVIEW_NAMESPACE, *as_person, "--", "sh", "-c",
            f"echo '{PREVIEW_PAGE}' > /home/dev/public/index.html",
        )  # fmt: skip
        # The sidecar sees that folder only, read-only.
        refused = subprocess.run(
            ["kubectl", "--kubeconfig", str(real_testbed.kubeconfig), "-n", PREVIEW_NAMESPACE,
             "exec", f"pod/{pod}", "-c", "environment", "--", "touch", "/srv/x"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert refused.returncode != 0
        assert "Read-only file system" in refused.stderr

        environment = {**os.environ, "DEVBOX_URL": controller.url, "DEVBOX_TOKEN": controller.token}
        status = subprocess.run(
            [sys.executable, "-m", "devboxes_sdk", "status", "site"],
            env=environment, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert f"{controller.url}/dashboard/devboxes/site/ports/8080/" in status.stdout

        with chromium_browser() as browser:
            context = browser.new_context(viewport={"width": 1200, "height": 800})
            page = context.new_page()
            page.goto(f"{controller.url}/dashboard")
            page.get_by_label("Operator token").fill(controller.token)
            page.get_by_label("Operator token").press("Enter")
            with context.expect_page() as opened:
                page.get_by_role("link", name="Open http (8080)").click()
            preview = opened.value
            expect(preview.locator("#made")).to_have_text("made in the box")
            port = controller.url.rsplit(":", 1)[1]
            assert preview.url == f"http://8080-site.localhost:{port}/"
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            preview.screenshot(path=str(ARTIFACTS / "real-node-web-preview.png"))
        api.purge("site")
    finally:
        controller.stop()
