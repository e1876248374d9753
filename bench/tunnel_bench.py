"""SSH through the controller's tunnel beside SSH at the box's node port, on the real node.

Starts a testbed whose only node is the real one (tests/data/nodes-real.yaml) and this
repository's controller with NodePort Services, so that one box is reachable both ways,
then reports for each path:

- connect time: ``ssh BOX true`` from process start to exit (key exchange, login, one
  command), ``--connects`` times, p50 and p99;
- throughput: ``--megabytes`` MiB read from the box (``head -c ... /dev/zero`` over the
  session), ``--copies`` times, the median MiB/s;

and then the controller's resident memory with ``--idle`` tunnels open at once, each an
authenticated ``ssh -N`` session that sends nothing: the growth per tunnel over the
controller's memory before they opened.

    PYTHONPATH=testbed:bench .venv/bin/python bench/tunnel_bench.py --results
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import real_node
import requests
from devboxes_testbed.api import Api
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.rig import Rig
from kubernetes import client

from devboxes_sdk.tunnel import HOST_SUFFIX, proxy_command

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"
BOX = "tunnel-bench"
KEYS_SECRET = "bench-keys"  # noqa: S105 - the name of a Secret, not a secret
# At most this many unauthenticated connections at once: sshd's MaxStartups drops more.
OPENING_AT_ONCE = 8


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Paths:
    """The two ``ssh`` command lines to the box, and the environment they run in."""

    def __init__(self, controller: Controller, box: dict[str, object], key: Path) -> None:
        common = [
            "ssh",
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
        ]
        self.tunnel = [
            *common,
            "-o",
            f"ProxyCommand={proxy_command()}",
            f"dev@{BOX}{HOST_SUFFIX}",
        ]
        self.node_port = [*common, "-p", str(box["ssh_port"]), f"dev@{box['ssh_host']}"]
        self.environment = {
            **os.environ,
            "DEVBOX_URL": controller.url,
            "DEVBOX_TOKEN": controller.token,
        }

    def run(self, argv: list[str], command: str) -> float:
        began = time.monotonic()
        subprocess.run(
            [*argv, command],
            env=self.environment,
            stdout=subprocess.DEVNULL,
            check=True,
            timeout=120,
        )
        return time.monotonic() - began


def connects(paths: Paths, argv: list[str], times: int) -> list[float]:
    return [paths.run(argv, "true") for _ in range(times)]


def throughput(paths: Paths, argv: list[str], megabytes: int, times: int) -> float:
    """Median MiB/s of reading ``megabytes`` MiB from the box."""
    seconds = [paths.run(argv, f"head -c {megabytes}M /dev/zero") for _ in range(times)]
    return megabytes / statistics.median(seconds)


def idle_tunnels(paths: Paths, controller: Controller, count: int) -> tuple[int, int, int]:
    """The controller's RSS (KiB) before, with ``count`` idle sessions open, and how many
    of them the controller counted open."""
    assert controller.process is not None
    pid = controller.process.pid
    time.sleep(3)
    before = rss_kib(pid)
    sessions: list[subprocess.Popen[bytes]] = []
    try:
        for start in range(0, count, OPENING_AT_ONCE):
            batch = [
                subprocess.Popen(
                    [*paths.tunnel[:-1], "-N", "-o", "ServerAliveInterval=60", paths.tunnel[-1]],
                    env=paths.environment,
                    stdin=subprocess.DEVNULL,
                )
                for _ in range(min(OPENING_AT_ONCE, count - start))
            ]
            sessions += batch
            # Each logs in before the next batch opens.
            time.sleep(3)
        time.sleep(5)
        gone = [s for s in sessions if s.poll() is not None]
        if gone:
            print(f"  {len(gone)} of {count} sessions ended early", file=sys.stderr)
        metrics = requests.get(
            f"{controller.url}/metrics", headers=controller.headers(), timeout=30
        ).text
        counted = next(
            int(float(line.split()[1]))
            for line in metrics.splitlines()
            if line.startswith("devboxes_tunnels ")
        )
        return before, rss_kib(pid), counted
    finally:
        for session in sessions:
            session.terminate()
        for session in sessions:
            session.wait(30)


def measure(args: argparse.Namespace, rig: Rig) -> None:
    bed = rig.testbed
    node = bed.real_node
    assert node is not None
    rig.create_namespace(NAMESPACE)
    key = rig.workdir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    client.CoreV1Api(bed.api_client()).create_namespaced_secret(
        NAMESPACE,
        {
            "metadata": {"name": KEYS_SECRET},
            "stringData": {"authorized_keys": key.with_suffix(".pub").read_text()},
        },
    )
    settings = example_settings(NAMESPACE)
    settings["ssh"] = {
        "serviceType": "NodePort",
        "host": node.address,
        "authorizedKeysSecret": KEYS_SECRET,
    }
    # Every idle tunnel is the operator's: one person's bound must let them all open.
    settings["connections"] = {"tunnelsPerPerson": max(args.idle, 16)}
    controller = rig.start_controller(settings)
    api = Api(controller.url, controller.token)
    assert api.request("POST", "/devboxes", json={"name": BOX}).status_code == 201
    box = api.request(
        "GET", f"/devboxes/{BOX}", params={"wait": "ready", "timeout": "180"}, timeout=240
    ).json()
    assert box["state"] == "ready", box
    paths = Paths(controller, box, key)
    # The first connection of each path warms the box's sshd and the page cache.
    paths.run(paths.tunnel, "true")
    paths.run(paths.node_port, "true")
    for label, argv in (("tunnel", paths.tunnel), ("node port", paths.node_port)):
        seconds = connects(paths, argv, args.connects)
        rate = throughput(paths, argv, args.megabytes, args.copies)
        print(
            f"{label}: connect (ssh BOX true), {args.connects} times (s): "
            f"p50 {statistics.median(seconds):.3f} / p99 {percentile(seconds, 0.99):.3f}; "
            f"read {args.megabytes} MiB from the box, median of {args.copies}: "
            f"{rate:.1f} MiB/s"
        )
    before, during, counted = idle_tunnels(paths, controller, args.idle)
    print(
        f"controller RSS (KiB): {before} before, {during} with {counted} idle tunnels open "
        f"(of {args.idle} sessions started): {(during - before) / max(counted, 1):.1f} KiB "
        "per tunnel"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connects", type=int, default=20, help="connections per path")
    parser.add_argument("--megabytes", type=int, default=100, help="MiB read per copy")
    parser.add_argument("--copies", type=int, default=3, help="reads per path")
    parser.add_argument("--idle", type=int, default=100, help="idle tunnels open at once")
    return real_node.run("tunnel_bench", parser, measure)


if __name__ == "__main__":
    sys.exit(main())
