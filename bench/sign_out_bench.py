"""What a flood of dashboard sign-outs costs the cluster, and whether every one lands.

Starts a testbed of its own and two replicas of this repository's controller (one token),
mints ``--sign-outs`` sessions for ``--people`` people as the controller signs them, and
signs each out with ``POST /dashboard/logout``, from ``--clients`` clients at once, half
of them on each replica. It reports:

- the answers by status, and the sign-outs' latency (p50 / p95 / p99 / max);
- the shared record (the ConfigMap ``devboxes-ended-sessions``): entries, bytes of its
  data, and how many times the apiserver reported it written (a watch counts them);
- that a third replica started afterwards refuses the newest session of every person.

    PYTHONPATH=testbed:tests .venv/bin/python bench/sign_out_bench.py --results
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import record
import requests
from api_bench import percentile
from devboxes_controller.state.ended_sessions import CONFIGMAP, EndedSessions
from devboxes_controller.web.identity.sessions import COOKIE, Person, Session, SessionStore
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client, watch
from scratch import scratch_rig
from support import MemoryRecord
from urllib3.exceptions import ProtocolError

NAMESPACE = "sign-outs"


def count_writes(core: client.CoreV1Api, counted: list[int], stop: threading.Event) -> None:
    """Adds one to ``counted[0]`` for every write of the record the apiserver reports."""
    stream = watch.Watch()
    try:
        for event in stream.stream(
            core.list_namespaced_config_map,
            NAMESPACE,
            field_selector=f"metadata.name={CONFIGMAP}",
            timeout_seconds=3600,
        ):
            if event["type"] in ("ADDED", "MODIFIED"):
                counted[0] += 1
            if stop.is_set():
                stream.stop()
    except ProtocolError:
        return


def sign_out(replica: Controller, session: Session, local: threading.local) -> tuple[int, float]:
    if not hasattr(local, "http"):
        local.http = requests.Session()
    started = time.monotonic()
    answer = local.http.post(
        f"{replica.url}/dashboard/logout",
        data={"csrf": session.csrf},
        cookies={COOKIE: session.cookie},
        allow_redirects=False,
        timeout=60,
    )
    return answer.status_code, time.monotonic() - started


def run(args: argparse.Namespace) -> None:
    stop = threading.Event()
    with scratch_rig("devboxes-sign-outs-") as rig:
        bed = rig.start_testbed(log=lambda _: None)
        rig.create_namespace(NAMESPACE)
        core = client.CoreV1Api(bed.api_client())
        first = rig.start_controller(example_settings(NAMESPACE))
        settings = example_settings(NAMESPACE)
        replicas = [first, rig.start_controller(settings, token=first.token)]
        counted = [0]
        watcher = threading.Thread(target=count_writes, args=(core, counted, stop), daemon=True)
        watcher.start()
        try:
            minted = SessionStore(first.token, EndedSessions(MemoryRecord()))
            people = [Person(f"person-{n}@example.com") for n in range(args.people)]
            sessions = [minted.create(people[n % args.people]) for n in range(args.sign_outs)]
            local = threading.local()
            print(f"signing out {args.sign_outs} sessions", file=sys.stderr)
            started = time.monotonic()
            with ThreadPoolExecutor(args.clients) as pool:
                outcomes = list(
                    pool.map(
                        lambda n: sign_out(replicas[n % 2], sessions[n], local),
                        range(args.sign_outs),
                    )
                )
            elapsed = time.monotonic() - started
            time.sleep(2)
            data = core.read_namespaced_config_map(CONFIGMAP, NAMESPACE).data or {}
            size = sum(len(key) + len(value) for key, value in data.items())
            third = rig.start_controller(settings, token=first.token)
            newest = {session.person: session for session in sessions}
            refused = sum(
                requests.get(
                    f"{third.url}/api/v1/whoami", cookies={COOKIE: s.cookie}, timeout=10
                ).status_code
                == 401
                for s in newest.values()
            )
            codes = Counter(code for code, _ in outcomes)
            seconds = [latency for _, latency in outcomes]
            print(
                "\n".join(
                    [
                        f"sign-outs: {args.sign_outs} of {args.people} people from {args.clients} "
                        f"clients on 2 replicas, in {elapsed:.1f} s "
                        f"({args.sign_outs / elapsed:.0f} a second)",
                        "answers: " + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items())),
                        "latency: "
                        + " / ".join(f"{percentile(seconds, q) * 1000:.0f}" for q in (50, 95, 99))
                        + f" / {max(seconds) * 1000:.0f} ms (p50 / p95 / p99 / max)",
                        f"record: {len(data)} entries, {size} bytes of data, "
                        f"{counted[0]} writes reported by the apiserver",
                        f"a replica started afterwards refuses {refused} of {len(newest)} "
                        "people's newest session",
                    ]
                )
            )
        finally:
            stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sign-outs", type=int, default=10_000)
    parser.add_argument("--people", type=int, default=100)
    parser.add_argument("--clients", type=int, default=100)
    return record.run("sign_out_bench", parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
