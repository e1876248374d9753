"""Ten thousand boxes on one controller: memory, a cold start beside them, list latency.

It starts a scale testbed (testbed/nodes-scale.yaml) and this checkout's controller,
then, with box names spread over ``--prefixes`` prefixes (``team00-`` to ``team99-``):

1. creates ``--running`` boxes through the API (preset small, no GPU) and waits until
   every one is ready; the controller's resident memory is read then;
2. writes the rest of ``--boxes`` straight to the apiserver as stopped boxes, rendered by
   the controller's own ``box.render`` (``devboxes_testbed.boxes.write_stopped``: a home
   claim and a Deployment at zero replicas, one in ten of the nvidia-l4 profile, each
   owned by the person its prefix names), which
   takes minutes where creating and stopping them through the API would take hours. It
   checks that the controller reads them back as normal boxes: every one listed as
   stopped, a written box's body the same as that of a box stopped through the API (but
   for its name, owner and times), and not one write from the controller meanwhile (nothing to
   repair, no Service to remove). The memory is read again;
3. times the whole list, ``state=ready``, ``profile=nvidia-l4``, one owner's boxes
   (``owner=team07``) and a page of 500 (the
   first and one from the middle), ``--samples`` sequential keep-alive requests each,
   asking for gzip;
   With ``--history``, each stopped box is then given the two older ReplicaSets that
   Kubernetes keeps of a box started and stopped twice (each start is a rollout),
   written straight too, and the memory is read once more;
4. stops that controller and starts a fresh one beside the boxes: the seconds from
   process start to ``/ready``, its peak resident memory (``VmHWM``) then, and its
   resident memory once settled (``--settle`` seconds later).

    PYTHONPATH=testbed .venv/bin/python bench/scale_bench.py --results
"""

from __future__ import annotations

import argparse
import sys
import time

import record
import requests
from api_bench import create_boxes
from devboxes_testbed.api import Api
from list_bench import counted, time_cases
from stopped_boxes import (
    log,
    replicaset_count,
    settled_rss_mib,
    staged,
    status_kib,
    wait_for_replicasets,
    write_boxes,
    write_history,
)

GPU_EVERY = 10
# What may differ between two stopped boxes of the same preset that are the same box; the
# reference box is the operator's, a written one its prefix's.
OWN_FIELDS = {"name", "created_at", "expires_at", "owner"}
# The owner whose list is timed: one of the prefixes.
OWNER = "team07"


def metric_sum(session: requests.Session, url: str, name: str) -> float:
    text = session.get(f"{url}/metrics", timeout=60).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def names(prefixes: int, count: int, kind: str) -> list[str]:
    """``count`` box names spread evenly over the prefixes: team07-run-0003."""
    return [f"team{i % prefixes:02d}-{kind}-{i // prefixes:04d}" for i in range(count)]


def prefix_owner(name: str) -> str:
    """The owner of a written box: its name's prefix (team07-box-0003: team07)."""
    return name.split("-", 1)[0]


def run(args: argparse.Namespace) -> None:
    with staged("scale", "nodes-scale.yaml", args.namespace) as stage:
        controller = stage.controller
        api = Api(controller.url, controller.token)
        session = requests.Session()
        session.headers.update({**controller.headers(), "Accept-Encoding": "gzip"})
        url = f"{controller.url}/api/v1/devboxes"

        def wait_counts(boxes: int, ready: int, timeout: float) -> float:
            started = time.monotonic()
            while (
                counted(session, url, {}) < boxes
                or counted(session, url, {"state": "ready"}) < ready
            ):
                if time.monotonic() - started > timeout:
                    raise SystemExit(f"the controller did not list {boxes} boxes, {ready} ready")
                time.sleep(3)
            return time.monotonic() - started

        idle_rss = settled_rss_mib(controller.pid)
        running = names(args.prefixes, args.running, "run")
        log(f"creating {len(running)} boxes through the API ...")
        started = time.monotonic()
        create_boxes(api, running, args.workers)
        created = time.monotonic() - started
        waited = wait_counts(len(running), len(running), args.settle_timeout)
        log(f"  created in {created:.0f}s, all ready {waited:.0f}s later")
        rss_running = settled_rss_mib(controller.pid)

        # A box stopped through the API, to compare a written one with.
        reference = "team00-check-0000"
        api.ok("POST", "/devboxes", json={"name": reference})
        api.ok("POST", f"/devboxes/{reference}/stop")
        writes_before = metric_sum(session, controller.url, "devboxes_kubernetes_writes_total")

        stopped = names(args.prefixes, args.boxes - args.running, "box")
        gpu = set(stopped[::GPU_EVERY])
        started = time.monotonic()
        written = write_boxes(stage, stopped, gpu, owner=prefix_owner)
        wait_counts(args.boxes + 1, len(running), args.settle_timeout)
        log(
            f"all {args.boxes + 1} boxes listed "
            f"{time.monotonic() - started:.0f}s after the first write"
        )

        # Read back as normal boxes: listed as stopped, and a written box's body is the
        # API-stopped one's but for its own name and times.
        listed_stopped = counted(session, url, {"state": "stopped"})
        mine = api.ok("GET", f"/devboxes/{stopped[1]}").json()
        theirs = api.ok("GET", f"/devboxes/{reference}").json()
        differ = sorted(
            k for k in (mine.keys() | theirs.keys()) - OWN_FIELDS if mine.get(k) != theirs.get(k)
        )
        # Two reconcile passes over every box, at least, before the writes are counted.
        time.sleep(15)
        writes = metric_sum(session, controller.url, "devboxes_kubernetes_writes_total")
        api.ok("DELETE", f"/devboxes/{reference}", params={"purge": "true"})
        rss_all = settled_rss_mib(controller.pid)

        print(f"boxes: {args.boxes} ({args.running} running, created through the API; ")
        print(f"  {len(stopped)} stopped, {len(gpu)} of them nvidia-l4, written straight)")
        print(f"names over {args.prefixes} prefixes; {args.samples} samples per case\n")
        print(f"running boxes created in {created:.0f}s, all ready {waited:.0f}s later")
        print(f"stopped boxes written in {written:.0f}s ({len(stopped) / written:.1f} per second)")
        print("read back as normal boxes:")
        print(f"  listed as stopped: {listed_stopped} (the written ones and the reference)")
        print(f"  fields of a written box that differ from an API-stopped one: {differ}")
        print(f"  controller writes while and after they were written: {writes - writes_before:g}")
        print()
        print("controller RSS (median of 5 readings 2 s apart)")
        print(f"  no boxes                 {idle_rss:7.1f} MiB")
        print(f"  {args.running:>5} running          {rss_running:7.1f} MiB")
        print(f"  {args.boxes:>5} boxes            {rss_all:7.1f} MiB")
        slope = (rss_all - rss_running) * 1024 / len(stopped)
        print(f"  slope {args.running} -> {args.boxes}: {slope:.1f} KiB per box")
        print()

        if args.history:
            # Kubernetes' Deployment controller writes each box's own ReplicaSet at its
            # client's rate limit, minutes after the boxes at 10,000.
            own = wait_for_replicasets(stage, args.boxes, args.settle_timeout)
            rss_own = settled_rss_mib(controller.pid)
            log("writing each stopped box's older ReplicaSets ...")
            took = write_history(stage, stopped, args.settle_timeout)
            replicasets = replicaset_count(stage.kube, stage.settings["namespace"])
            time.sleep(15)  # the controller's watch takes them in
            rss_history = settled_rss_mib(controller.pid)
            print(f"every box's own ReplicaSet listed {own:.0f}s later: RSS {rss_own:.1f} MiB")
            print(f"two older ReplicaSets of each stopped box written in {took:.0f}s: ", end="")
            print(f"{replicasets} ReplicaSets")
            print(f"  RSS                      {rss_history:7.1f} MiB")
            per_box = (rss_history - rss_own) * 1024 / len(stopped)
            print(f"  more per stopped box     {per_box:7.1f} KiB")
            print()

        owner = {f"owner={OWNER}": {"owner": OWNER}}
        time_cases(session, url, args.boxes, args.samples, owner, (50, 90, 99))
        print()

        controller.stop()
        log("starting a fresh controller beside the boxes ...")
        started = time.monotonic()
        cold = stage.rig.start_controller(
            stage.settings, lease_seconds=None, timeout=args.settle_timeout
        )
        to_ready = time.monotonic() - started
        peak_at_ready = status_kib(cold.pid, "VmHWM") / 1024
        rss_at_ready = status_kib(cold.pid, "VmRSS") / 1024
        fresh = Api(cold.url, cold.token)
        listed = len(fresh.ok("GET", "/devboxes").json()["items"])
        time.sleep(args.settle)
        steady = settled_rss_mib(cold.pid)
        peak = status_kib(cold.pid, "VmHWM") / 1024
        print(f"cold start beside {listed} boxes (listed by the fresh controller at /ready)")
        print(f"  process start -> /ready   {to_ready:.1f} s")
        print(
            f"  RSS at /ready             {rss_at_ready:.1f} MiB (peak so far {peak_at_ready:.1f})"
        )
        print(f"  RSS {args.settle:.0f} s later          {steady:.1f} MiB")
        print(f"  peak RSS (VmHWM)          {peak:.1f} MiB, {peak / steady:.2f}x steady")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=10000, help="boxes in all")
    parser.add_argument("--running", type=int, default=1000, help="of them, created and ready")
    parser.add_argument("--prefixes", type=int, default=100, help="name prefixes")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--workers", type=int, default=8, help="clients creating boxes")
    parser.add_argument("--settle", type=float, default=30, help="seconds after a cold start")
    parser.add_argument("--settle-timeout", type=float, default=1800)
    parser.add_argument("--namespace", default="devboxes-scale")
    parser.add_argument(
        "--history",
        action="store_true",
        help="give each stopped box the older ReplicaSets two starts and stops leave",
    )
    return record.run("scale_bench", parser, run, argv, check=record.running_within_boxes)


if __name__ == "__main__":
    sys.exit(main())
