"""What the benches among thousands of boxes share: a testbed with this checkout's
controller, stopped boxes written straight to the apiserver, and the controller's memory."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devboxes_testbed.boxes import write_replica_history, write_stopped
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.rig import Rig
from kubernetes import client

REPO = Path(__file__).resolve().parent.parent
# Boxes written per call of write_stopped, so that progress shows.
BATCH = 1000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Stage:
    """The testbed's apiserver client, the settings the controller runs with, the
    controller, and the rig they run on: a bench may stop the controller and start a fresh
    one on the rig."""

    kube: Any
    settings: dict[str, Any]
    controller: Controller
    rig: Rig


@contextmanager
def staged(name: str, nodes: str, namespace: str) -> Iterator[Stage]:
    """A testbed of ``testbed/<nodes>`` and a controller on ``namespace``, stopped on leaving,
    also when the bench is sent SIGTERM."""
    workdir = Path(tempfile.mkdtemp(prefix=f"devboxes-{name}-"))
    with Rig(workdir) as rig:
        log(f"starting a testbed in {workdir} ...")
        bed = rig.start_testbed(REPO / "testbed" / nodes)
        rig.create_namespace(namespace)
        settings = example_settings(namespace)
        controller = rig.start_controller(settings, lease_seconds=None)
        yield Stage(bed.api_client(), settings, controller, rig)


def write_boxes(
    stage: Stage,
    names: list[str],
    gpu: Collection[str] = (),
    owner: Callable[[str], str | None] | None = None,
) -> float:
    """Write each name as a stopped box, those in ``gpu`` of the nvidia-l4 profile, logging
    progress every BATCH; the seconds it took."""
    started = time.monotonic()
    for first in range(0, len(names), BATCH):
        batch = names[first : first + BATCH]
        cpu = [n for n in batch if n not in gpu]
        write_stopped(stage.kube, stage.settings, cpu, owner=owner)
        gpus = [n for n in batch if n in gpu]
        write_stopped(stage.kube, stage.settings, gpus, "nvidia-l4", owner=owner)
        log(f"  {first + len(batch)} stopped boxes written, {time.monotonic() - started:.0f}s")
    return time.monotonic() - started


def replicaset_count(kube: Any, namespace: str) -> int:
    apps = client.AppsV1Api(kube)
    count, token = 0, None
    while True:
        page = apps.list_namespaced_replica_set(namespace, limit=2000, _continue=token)
        count += len(page.items)
        token = page.metadata._continue
        if not token:
            return count


def write_history(stage: Stage, names: list[str], timeout: float) -> float:
    """Write the older ReplicaSets of each stopped box two starts and stops would leave,
    and wait until the apiserver lists them; the seconds it took."""
    namespace = stage.settings["namespace"]
    started = time.monotonic()
    expected = replicaset_count(stage.kube, namespace)
    for first in range(0, len(names), BATCH):
        expected += write_replica_history(stage.kube, namespace, names[first : first + BATCH])
        log(f"  {expected} ReplicaSets, {time.monotonic() - started:.0f}s")
    wait_for_replicasets(stage, expected, timeout)
    return time.monotonic() - started


def wait_for_replicasets(stage: Stage, expected: int, timeout: float) -> float:
    """Wait until the apiserver lists at least ``expected`` ReplicaSets in the namespace;
    the seconds it took."""
    started = time.monotonic()
    while (count := replicaset_count(stage.kube, stage.settings["namespace"])) < expected:
        if time.monotonic() - started > timeout:
            raise SystemExit(f"{count} ReplicaSets listed, {expected} expected")
        time.sleep(3)
    return time.monotonic() - started


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} for pid {pid}")


def settled_rss_mib(pid: int, samples: int = 5, interval: float = 2.0) -> float:
    """The median of a few readings of the resident memory, so one allocation burst does
    not decide the figure."""
    readings = []
    for _ in range(samples):
        readings.append(status_kib(pid, "VmRSS") / 1024)
        time.sleep(interval)
    return statistics.median(readings)
