"""The seconds people feel, on the testbed's real node: from asking for a box to the
first output of a command in it, and where those seconds go.

Starts a testbed whose only node is the real one (tests/data/nodes-real.yaml) and the
controller on it with no Service per box, so that SSH goes through the controller's
tunnel, as `devbox ssh` does by default. Then, with the images cached:

- ``--boxes`` CPU boxes one after another: create request → first output of
  `devbox ssh NAME -- echo` (the person's own path: the CLI's create waits for ready,
  then ssh logs in through the tunnel);
- the same number at once: each box's request → first output, and the last one;
- ``--restarts`` times, a stopped box started: start request → first output;
- ``--handoffs`` times, a GPU box holding the last free L4 stopped while another waits
  in line for one: stop request → the waiting box's first output;
- ``--kernels`` times, in a JupyterLab with this checkout's extension: a devbox CPU
  kernel's start (what a click on its launcher tile asks) → the first output of a cell
  in it, once with its box to create and once with the box ready, kept by the previous
  kernel's grace.

Each figure comes with its breakdown, from a watch on the pods that notes when each
step was seen here (sub-second, unlike Kubernetes' own timestamps): the API's answer,
the pod's creation by the Deployment and ReplicaSet controllers, scheduling (with the
gate for a device), the volume and the pod's sandbox (PodReadyToStartContainers), the
container's start, the SSH server's readiness (the Ready condition), the API's report
of it, and the login; a kernel's figure splits into its start (box, SSH through the
tunnel, the kernel's own start in the box) and the cell.

    PYTHONPATH=testbed:bench:tests:tests/jupyter .venv/bin/python bench/seconds_bench.py --results
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import real_node
from devboxes_jupyter.kernelspecs import CPU_KERNEL
from devboxes_jupyter.provisioner import box_name
from devboxes_testbed import L4
from devboxes_testbed.api import Api
from devboxes_testbed.controller import example_settings
from devboxes_testbed.rig import Rig
from kubernetes import client, watch
from labserver import KERNEL_START_TIMEOUT, KernelChannels, Lab, running_lab, wait_offered

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "seconds"
KEYS_SECRET = "devbox-keys"  # noqa: S105 - the name of a Secret, not a secret
BOX_LABEL = "devboxes.io/box"
# The steps of a box's way to a login, in order, as the pod watch sees them.
STEPS = ("created", "scheduled", "sandbox", "running", "ready")
STEP_NAMES = {
    "created": "pod created (Deployment, ReplicaSet)",
    "scheduled": "scheduled (gates, scheduler)",
    "sandbox": "volume and sandbox",
    "running": "container started (image, runtime)",
    "ready": "SSH server ready (entrypoint, probe)",
}


@dataclass
class Timeline:
    """When each step of one box's newest pod was first seen here (monotonic seconds)."""

    seen: dict[str, float] = field(default_factory=dict)

    def note(self, step: str, at: float) -> None:
        self.seen.setdefault(step, at)


class PodSteps:
    """A watch on the namespace's pods, noting the steps of each box's newest pod."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self._core = core
        self._lock = threading.Lock()
        self._boxes: dict[str, dict[str, Timeline]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self._core.list_namespaced_pod, NAMESPACE, timeout_seconds=30
                ):
                    self._seen(event["object"], time.monotonic())
                    if self._stop.is_set():
                        stream.stop()
            except Exception:  # noqa: BLE001 - a dropped watch is started again
                time.sleep(0.1)

    def _seen(self, pod: Any, at: float) -> None:
        box = (pod.metadata.labels or {}).get(BOX_LABEL)
        if box is None or pod.metadata.deletion_timestamp is not None:
            return
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        running = any(s.state and s.state.running for s in pod.status.container_statuses or [])
        with self._lock:
            timeline = self._boxes.setdefault(box, {}).setdefault(pod.metadata.uid, Timeline())
            timeline.note("created", at)
            if conditions.get("PodScheduled") == "True":
                timeline.note("scheduled", at)
            if conditions.get("PodReadyToStartContainers") == "True":
                timeline.note("sandbox", at)
            if running:
                timeline.note("running", at)
            if conditions.get("Ready") == "True":
                timeline.note("ready", at)

    def newest(self, box: str, after: float) -> Timeline:
        """The timeline of the box's first pod seen after ``after``, else of its newest:
        a box waiting in line for a device has its pod before the request that frees one."""
        with self._lock:
            timelines = list(self._boxes.get(box, {}).values())
        assert timelines, f"no pod of {box} seen"
        later = [t for t in timelines if t.seen["created"] >= after]
        if later:
            return min(later, key=lambda t: t.seen["created"])
        return max(timelines, key=lambda t: t.seen["created"])

    def close(self) -> None:
        self._stop.set()


@dataclass
class Sample:
    """One way from a request to a first output, split into its steps (seconds)."""

    total: float
    parts: dict[str, float]


class Boxes:
    def __init__(self, api: Api, steps: PodSteps, environment: dict[str, str]) -> None:
        self.api = api
        self.steps = steps
        self.environment = environment

    def first_output(self, name: str) -> float:
        """Log in through the tunnel as `devbox ssh` does, run echo; when it printed."""
        done = subprocess.run(
            [sys.executable, "-m", "devboxes_sdk", "ssh", name, "--", "echo", "in-the-box"],
            env=self.environment, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.stdout.strip() == "in-the-box", done.stderr
        return time.monotonic()

    def wait_ready(self, name: str) -> float:
        box = self.api.request(
            "GET", f"/devboxes/{name}", params={"wait": "ready", "timeout": "300"}, timeout=360
        ).json()
        assert box["state"] == "ready", box
        return time.monotonic()

    def sample(self, name: str, asked: float, answered: float) -> Sample:
        """After an ask answered at ``answered``: wait for ready, log in, and split."""
        reported = self.wait_ready(name)
        printed = self.first_output(name)
        timeline = self.steps.newest(name, asked).seen
        parts = {"API answer": answered - asked}
        previous = answered
        for step in STEPS:
            at = timeline.get(step)
            if at is None:
                continue
            parts[STEP_NAMES[step]] = max(at - previous, 0.0)
            previous = max(at, previous)
        parts["ready reported by the API"] = max(reported - previous, 0.0)
        parts["login and first output"] = printed - reported
        return Sample(printed - asked, parts)

    def create(self, name: str, **body: Any) -> Sample:
        asked = time.monotonic()
        response = self.api.request("POST", "/devboxes", json={"name": name, **body})
        while response.status_code == 429:
            # Past the person's share of changes in flight: the SDK and the CLI wait and
            # send again, and so does the person here; the wait counts.
            time.sleep(float(response.headers.get("Retry-After", "1")))
            response = self.api.request("POST", "/devboxes", json={"name": name, **body})
        assert response.status_code == 201, response.text
        return self.sample(name, asked, time.monotonic())

    def start(self, name: str) -> Sample:
        asked = time.monotonic()
        assert self.api.request("POST", f"/devboxes/{name}/start").status_code == 200
        return self.sample(name, asked, time.monotonic())

    def stop(self, name: str) -> None:
        assert self.api.request("POST", f"/devboxes/{name}/stop").status_code == 200
        self.wait_gone(name)

    def purge(self, name: str) -> None:
        self.api.request("DELETE", f"/devboxes/{name}", params={"purge": "true"})
        self.wait_gone(name)
        # A box of the same name can be created again once its home volume is gone.
        self.wait_gone(name, self.steps._core.list_namespaced_persistent_volume_claim)

    def wait_gone(self, name: str, listing: Callable[..., Any] | None = None) -> None:
        """Wait until ``listing`` (the pods, unless given) lists nothing of box ``name``."""
        listing = listing or self.steps._core.list_namespaced_pod
        deadline = time.monotonic() + 120
        while listing(NAMESPACE, label_selector=f"{BOX_LABEL}={name}").items:
            assert time.monotonic() < deadline, f"{name} still has objects: {listing.__name__}"
            time.sleep(0.2)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def report(title: str, samples: list[Sample]) -> None:
    totals = [s.total for s in samples]
    print(
        f"{title} ({len(samples)}): p50 {statistics.median(totals):.2f} s / "
        f"p99 {percentile(totals, 0.99):.2f} s / max {max(totals):.2f} s"
    )
    names = list(dict.fromkeys(name for s in samples for name in s.parts))
    for name in names:
        values = [s.parts.get(name, 0.0) for s in samples]
        print(f"    {name:<40} p50 {statistics.median(values):5.2f} s   max {max(values):5.2f} s")


def handoff(boxes: Boxes, index: int) -> Sample:
    """Two GPU boxes hold both L4s; a third waits in line; one of the two is stopped:
    the stop request → the waiting box's first output."""
    holders = [f"hold-{index}-{n}" for n in range(2)]
    for name in holders:
        boxes.create(name, gpu={"profile": L4})
    waiting = f"next-{index}"
    response = boxes.api.request(
        "POST", "/devboxes", json={"name": waiting, "gpu": {"profile": L4}}
    )
    assert response.status_code == 201, response.text
    deadline = time.monotonic() + 60
    while "line" not in (boxes.api.request("GET", f"/devboxes/{waiting}").json()["summary"] or ""):
        assert time.monotonic() < deadline, "the third box never waited in line"
        time.sleep(0.2)
    asked = time.monotonic()
    assert boxes.api.request("POST", f"/devboxes/{holders[0]}/stop").status_code == 200
    sample = boxes.sample(waiting, asked, time.monotonic())
    for name in [*holders, waiting]:
        boxes.purge(name)
    return sample


def kernel_first_output(lab: Lab) -> Sample:
    """A devbox CPU kernel started as the launcher's tile starts one, then a cell run in
    it: the start request → the cell's first output."""
    asked = time.monotonic()
    with KernelChannels.start(lab, CPU_KERNEL, timeout=KERNEL_START_TIMEOUT) as channels:
        started = time.monotonic()
        result = channels.execute("print('in-the-box')")
        printed = time.monotonic()
    assert result.stdout.strip() == "in-the-box", result.errors
    return Sample(
        printed - asked,
        {"kernel started (box, SSH, kernel)": started - asked, "cell run": printed - started},
    )


def kernels(boxes: Boxes, count: int, key: Path, base: Path, url: str, token: str) -> None:
    owner = "bench"
    settings = [
        f"--DevboxKernelProvisioner.ssh_key_file={key}",
        f"--DevboxKernelProvisioner.owner={owner}",
        f"--DevboxKernelProvisioner.known_hosts_file={base / 'known_hosts'}",
    ]
    name = box_name(owner, None)
    created, ready = [], []
    with running_lab(base / "lab", url, token, settings) as lab:
        wait_offered(lab, CPU_KERNEL)
        for _ in range(count):
            created.append(kernel_first_output(lab))
            # Within the stop grace the box is still ready: the next kernel finds it so.
            ready.append(kernel_first_output(lab))
            boxes.purge(name)
    report("kernel start → first cell output, its box to create", created)
    report("kernel start → first cell output, its box ready", ready)


def measure(args: argparse.Namespace, rig: Rig) -> None:
    home = rig.workdir / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    bed = rig.testbed
    core = client.CoreV1Api(bed.api_client())
    rig.create_namespace(NAMESPACE)
    core.create_namespaced_secret(
        NAMESPACE,
        {
            "metadata": {"name": KEYS_SECRET},
            "stringData": {"authorized_keys": key.with_suffix(".pub").read_text()},
        },
    )
    settings = example_settings(NAMESPACE)
    settings["ssh"] = {"serviceType": "None", "authorizedKeysSecret": KEYS_SECRET}
    # Small enough that the boxes created at once all fit the real node's two cores.
    settings["presets"] = {
        "small": {"cpu": "100m", "memoryRequest": "256Mi", "memoryLimit": "2Gi", "storage": "1Gi"},
        "medium": {"cpu": "250m", "memoryRequest": "512Mi", "memoryLimit": "4Gi", "storage": "1Gi"},
        "large": {"cpu": "500m", "memoryRequest": "1Gi", "memoryLimit": "8Gi", "storage": "1Gi"},
    }
    controller = rig.start_controller(settings)
    api = Api(controller.url, controller.token)
    # ssh reads the user's home from the password database, not HOME: the key goes to
    # an agent of the bench's own, as a person's key sits in theirs.
    agent = dict(
        line.split(";")[0].split("=", 1)
        for line in subprocess.run(
            ["ssh-agent", "-s"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        if line.startswith(("SSH_AUTH_SOCK=", "SSH_AGENT_PID="))
    )
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEVBOX_")},
        **agent,
        "HOME": str(home),
        "DEVBOX_URL": controller.url,
        "DEVBOX_TOKEN": controller.token,
    }
    subprocess.run(["ssh-add", "-q", str(key)], env=environment, check=True)
    steps = PodSteps(core)
    boxes = Boxes(api, steps, environment)
    try:
        # The first box pulls nothing (images cached) but warms the node's caches.
        boxes.create("warm-up")
        boxes.purge("warm-up")
        one_by_one = []
        for n in range(args.boxes):
            one_by_one.append(boxes.create(f"one-{n}"))
            if n:
                # Kept: one-0, for the starts below.
                boxes.purge(f"one-{n}")
        report("create request → first output, one box at a time", one_by_one)
        began = time.monotonic()
        with ThreadPoolExecutor(args.boxes) as pool:
            at_once = list(pool.map(boxes.create, [f"many-{n}" for n in range(args.boxes)]))
        print(
            f"{args.boxes} creates at once: the last first output {time.monotonic() - began:.2f} s"
        )
        report(f"create request → first output, {args.boxes} at once", at_once)
        for n in range(args.boxes):
            boxes.purge(f"many-{n}")
        if args.restarts:
            restarts = []
            for _ in range(args.restarts):
                boxes.stop("one-0")
                restarts.append(boxes.start("one-0"))
            report("start request → first output, a stopped box", restarts)
        if args.handoffs:
            report(
                "stop of an L4 box → the next in line's first output",
                [handoff(boxes, n) for n in range(args.handoffs)],
            )
        if args.kernels:
            kernels(boxes, args.kernels, key, rig.workdir, controller.url, controller.token)
    finally:
        steps.close()
        controller.stop()
        subprocess.run(["ssh-agent", "-k"], env=environment, capture_output=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=10, help="CPU boxes, one by one and at once")
    parser.add_argument("--restarts", type=int, default=5, help="starts of a stopped box")
    parser.add_argument("--handoffs", type=int, default=3, help="hand-offs of a freed L4")
    parser.add_argument(
        "--kernels", type=int, default=3, help="devbox kernel starts, with a create and without"
    )
    return real_node.run("seconds_bench", parser, measure)


if __name__ == "__main__":
    sys.exit(main())
