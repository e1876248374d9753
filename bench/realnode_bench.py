"""What the testbed's real node costs: its start, its memory, and boxes running on it.

Starts a testbed whose only node is the real one (tests/data/nodes-real.yaml) and this
repository's controller on it, then creates ``--boxes`` CPU boxes one after another and
reports:

- how long the real node took to start (images cached) and what its own processes
  (containerd, kubelet, kube-proxy, device plugin, DRA plugin) hold in memory, idle and
  with the boxes running;
- per box: create → ready as the API reports it, and what the box's pod holds in its
  memory cgroup once ready;
- ``--restarts`` times, one box stopped and started again at once: start → ready, and the
  most pods of the box with a container running at the same moment (1: a start waits for
  the previous pod to be gone); ``--slow-sidecar`` gives boxes a sidecar that ignores
  SIGTERM, so that the previous pod takes the whole termination grace;
- how long stopping the testbed took, and what it left behind (nothing, or a list).

    PYTHONPATH=testbed .venv/bin/python bench/realnode_bench.py --results
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import real_node
from devboxes_testbed.api import Api
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import example_settings
from devboxes_testbed.rig import Rig
from kubernetes import client

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def node_memory(bed: Testbed) -> dict[str, float]:
    """Resident memory of the node's own processes (not its pods), by process name."""
    node = bed.real_node
    assert node is not None
    memory: dict[str, float] = {}
    for component in node.components:
        assert component.process is not None
        name = Path(component.argv()[component.argv().index("--") + 1]).name
        memory[name] = rss_mib(component.process.pid)
    shims = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    total = 0.0
    for proc in shims:
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"containerd-shim-runc-v2")
            and str(node.state_dir).encode() in b" ".join(argv)
        ):
            total += rss_mib(int(proc.name))
    memory["containerd-shim-runc-v2 (all)"] = total
    return memory


def pod_memory_mib(bed: Testbed, pod_uid: str) -> float:
    """The pod's memory cgroup usage, as the kubelet accounts it."""
    node = bed.real_node
    assert node is not None
    root = Path("/sys/fs/cgroup/memory") / node.name
    for usage in root.rglob(f"pod{pod_uid}/memory.usage_in_bytes"):
        return int(usage.read_text()) / 2**20
    return float("nan")


# A sidecar whose first process ignores SIGTERM, as a shell or `sleep` does: its pod stays
# for the whole termination grace.
SLOW_SIDECAR = {"name": "slow", "command": ["sleep", "infinity"]}


def running_pods(core: client.CoreV1Api, name: str) -> int:
    """How many pods of the box have a container running, the home volume mounted."""
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"devboxes.io/box={name}").items
    return sum(
        1
        for pod in pods
        if any(status.state.running for status in pod.status.container_statuses or [])
    )


def restart(api: Api, core: client.CoreV1Api, name: str) -> tuple[float, int]:
    """Stop the box and start it again at once: seconds from the start to ready, and the
    most pods of the box with a running container seen at once meanwhile."""
    assert api.request("POST", f"/devboxes/{name}/stop").status_code == 200
    began = time.monotonic()
    assert api.request("POST", f"/devboxes/{name}/start").status_code == 200
    most = 0
    while True:
        most = max(most, running_pods(core, name))
        box = api.request("GET", f"/devboxes/{name}").json()
        if box["state"] == "ready":
            return time.monotonic() - began, max(most, running_pods(core, name))
        assert time.monotonic() - began < 180, box
        time.sleep(0.1)


def show(memory: dict[str, float]) -> str:
    return ", ".join(f"{name} {mib:.0f}" for name, mib in memory.items())


def measure(args: argparse.Namespace, rig: Rig) -> None:
    """A controller on the real node's testbed: the node's memory idle and with boxes,
    each box's time to ready and its pod's memory, and restarts of one box."""
    bed = rig.testbed
    rig.create_namespace(NAMESPACE)
    settings = example_settings(NAMESPACE)
    if args.slow_sidecar:
        settings["sidecars"] = [SLOW_SIDECAR]
    controller = rig.start_controller(settings)
    api = Api(controller.url, controller.token)
    time.sleep(5)
    idle = node_memory(bed)
    print(f"node processes, no boxes (MiB RSS): {show(idle)}; total {sum(idle.values()):.0f}")
    ready: list[float] = []
    pods: list[float] = []
    core = client.CoreV1Api(bed.api_client())
    for index in range(args.boxes):
        name = f"bench-{index}"
        began = time.monotonic()
        response = api.request("POST", "/devboxes", json={"name": name})
        assert response.status_code == 201, response.text
        box = api.request(
            "GET", f"/devboxes/{name}", params={"wait": "ready", "timeout": "180"},
            timeout=240,
        ).json()  # fmt: skip
        assert box["state"] == "ready", box
        ready.append(time.monotonic() - began)
        (pod,) = core.list_namespaced_pod(NAMESPACE, label_selector=f"devboxes.io/box={name}").items
        pods.append(pod_memory_mib(bed, pod.metadata.uid))
    time.sleep(5)
    busy = node_memory(bed)
    print(f"create → ready, {args.boxes} boxes one after another (s): "
          f"p50 {statistics.median(ready):.2f} / max {max(ready):.2f}")  # fmt: skip
    print(f"each box's pod memory cgroup once ready (MiB): "
          f"p50 {statistics.median(pods):.1f} / max {max(pods):.1f}")  # fmt: skip
    print(f"node processes, {args.boxes} boxes running (MiB RSS): {show(busy)}; "
          f"total {sum(busy.values()):.0f}")  # fmt: skip
    restarts = [restart(api, core, "bench-0") for _ in range(args.restarts)]
    if restarts:
        seconds = [r[0] for r in restarts]
        most = max(r[1] for r in restarts)
        print(f"stop then start at once → ready, {args.restarts} times (s): "
              f"p50 {statistics.median(seconds):.2f} / max {max(seconds):.2f}; "
              f"most pods of the box with a container running at once: {most}")  # fmt: skip
    controller.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=8, help="CPU boxes to run at once")
    parser.add_argument(
        "--restarts", type=int, default=5, help="times one box is stopped and started again"
    )
    parser.add_argument(
        "--slow-sidecar",
        action="store_true",
        help="give boxes a sidecar that ignores SIGTERM, as a shell or sleep does",
    )
    return real_node.run("realnode_bench", parser, measure)


if __name__ == "__main__":
    sys.exit(main())
