"""Many readers of the dashboard's event stream, and readers that stop reading.

It starts a testbed (testbed/nodes.yaml) and this checkout's controller, writes
``--boxes`` stopped boxes straight to the apiserver (``devboxes_testbed.boxes``), then
opens ``--clients`` event streams (``/dashboard/events``) from one asyncio loop of their
own, and measures:

- the snapshots: how long all streams take to deliver theirs, and that each holds every
  box its reader may see, and nothing else;
- event-to-client latency: ``--samples`` times, a written box is started through the API,
  and on every stream the time from just before that request to the arrival of the box's
  first ``box`` event is taken; so is the spread between the first stream and the last.
  Once with every stream reading, then once more with a reader that never reads (a socket
  with a 4 KiB receive window, stalled in its snapshot) opened before each start, so that
  the second round runs beside stalled readers;
- that each stream was sent the started boxes and no other box;
- how each stalled reader, read at last (oldest first), ended: with the reconnect hint,
  or dropped by the controller once its send buffer had stayed full for
  ``SEND_STALL_SECONDS`` (counted from the controller's /metrics), with how long it had
  been stalled;
- the controller's resident memory with no stream, and with the streams open.

The streams are the operator's (bearer token), who sees every box; with ``--people N``
the boxes belong to N people (``team00`` …) and the streams are theirs, spread evenly:
dashboard session cookies of each person, signed as the controller signs them after a
sign-in through the issuer (the bench holds the operator token their key derives from).
Then a start reaches the streams of the box's owner only, and a box event on any other
stream is counted as a leak. Stalled readers are the operator's in both cases: a
snapshot of the whole list is what fills a connection's buffers at once.

With ``--history`` the streams are opened only once Kubernetes has written every box's own
ReplicaSet and the bench has given each box the two older ones that two starts and stops
leave, so the memory figures hold the ReplicaSets a long-lived cluster keeps.

    PYTHONPATH=testbed:tests .venv/bin/python bench/stream_bench.py --results
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable

import record
import requests
from api_bench import percentile
from devboxes_controller.state.ended_sessions import EndedSessions
from devboxes_controller.web import connections
from devboxes_controller.web.identity.sessions import COOKIE, Person, SessionStore
from devboxes_testbed.api import Api
from stopped_boxes import (
    log,
    replicaset_count,
    settled_rss_mib,
    staged,
    wait_for_replicasets,
    write_boxes,
    write_history,
)
from support import MemoryRecord

PREFIX = "box-"
DROPPED = "slow event-stream reader told to reconnect"
SEND_STALLED = 'reason="send_stalled"'
HINT = b"event: reconnect"
# A stream's snapshot names every box once as ``"name":"box-…"`` or
# ``"name":"team07-box-…"``; no other field does.
BOX_NAME = re.compile(rb'"name":"(?:team[0-9]+-)?' + re.escape(PREFIX.encode()))
# Seconds a stalled reader's snapshot gets to fill the connection's buffers before a start.
STALL_SECONDS = 1.0
# Seconds a stalled reader, read at last, may take to reach the end of its stream.
READ_AT_LAST_SECONDS = 180.0
# Kubernetes writes the boxes' own ReplicaSets at its client rate limit: 24 min at 10,000.
HISTORY_TIMEOUT = 3600.0
# Longer than the controller lets a reader take for one chunk (SLOW_READER_SECONDS).
SLOW_SECONDS = 12.0


class Streams:
    """Event streams, one per request head, read on a loop of their own thread: what each
    snapshot held and when it arrived, and when each stream first saw a ``box`` event of
    each name."""

    def __init__(self, host: str, port: int, heads: list[bytes]) -> None:
        self.heads = heads
        self.host, self.port, self.count = host, port, len(heads)
        self.snapshots: list[tuple[float, int]] = []
        # name -> stream index -> first arrival
        self.first: dict[str, dict[int, float]] = {}
        self.ended = 0
        self.failed: list[str] = []
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def open(self) -> float:
        started = time.monotonic()
        for index in range(self.count):
            asyncio.run_coroutine_threadsafe(self._read(index), self.loop)
        return started

    def arrivals(self, name: str) -> list[float]:
        with self.lock:
            return sorted(self.first.get(name, {}).values())

    async def _read(self, index: int) -> None:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 26)
            writer.write(self.heads[index])
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200 "):
                raise OSError(head.split(b"\r\n", 1)[0].decode())
            # The body is chunked: events are read from the chunks' contents, which a
            # chunk boundary may cut anywhere.
            pending = bytearray()
            searched = 0
            while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
                pending += (await reader.readexactly(size + 2))[:-2]
                while (end := pending.find(b"\n\n", searched)) >= 0:
                    self._arrived(index, bytes(pending[:end]))
                    del pending[: end + 2]
                    searched = 0
                searched = max(0, len(pending) - 1)
        except asyncio.IncompleteReadError:
            pass  # the connection closed, as a stream's last chunk also ends it
        except (OSError, asyncio.LimitOverrunError) as err:
            with self.lock:
                self.failed.append(f"stream {index}: {err!r}")
            return
        with self.lock:
            self.ended += 1

    def _arrived(self, index: int, event: bytes) -> None:
        start = event.find(b"event: ")
        if start < 0:
            return
        kind, _, data = event[start:].partition(b"\ndata: ")
        now = time.monotonic()
        if kind == b"event: snapshot":
            boxes = len(BOX_NAME.findall(data))
            with self.lock:
                self.snapshots.append((now, boxes))
        elif kind == b"event: box":
            name = json.loads(data)["name"]
            with self.lock:
                self.first.setdefault(name, {}).setdefault(index, now)


class Readers:
    """Who reads each stream: the operator, or ``people`` people evenly."""

    def __init__(self, people: int, token: str) -> None:
        self.people = people
        self._sessions = SessionStore(token, EndedSessions(MemoryRecord()))

    def box_names(self, count: int) -> list[str]:
        if not self.people:
            return [f"{PREFIX}{i:05d}" for i in range(count)]
        return [f"{self.owner_of_index(i)}-{PREFIX}{i:05d}" for i in range(count)]

    def owner_of_index(self, index: int) -> str:
        return f"team{index % self.people:02d}"

    def owner_of_box(self, name: str) -> str | None:
        return name.split("-", 1)[0] if self.people else None

    def stream_owner(self, index: int) -> str | None:
        return self.owner_of_index(index) if self.people else None

    def headers(self, index: int, operator: dict[str, str]) -> dict[str, str]:
        owner = self.stream_owner(index)
        if owner is None:
            return operator
        return {"Cookie": f"{COOKIE}={self._sessions.create(Person(owner)).cookie}"}

    def sees(self, index: int, name: str) -> bool:
        owner = self.stream_owner(index)
        return owner is None or owner == self.owner_of_box(name)


def request_head(headers: dict[str, str]) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"GET /dashboard/events HTTP/1.1\r\nHost: bench\r\n{head}\r\n".encode()


def stalled_reader(host: str, port: int, headers: dict[str, str]) -> socket.socket:
    """An event stream that is never read until the end: its snapshot fills the
    connection's buffers at once."""
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect((host, port))
    reader.sendall(request_head(headers))
    return reader


def how_it_ended(reader: socket.socket) -> str:
    """Read the stalled stream at last, to its end: ``hint`` when it ends with the hint,
    ``closed`` when it ends without it, ``reset`` when the controller aborted the
    connection, ``open`` when it had not ended after ``READ_AT_LAST_SECONDS`` (never
    dropped: its heartbeats would keep it open). What the controller queued before the
    end comes through the small receive window slowly, so each read may wait 30 s."""
    deadline = time.monotonic() + READ_AT_LAST_SECONDS
    tail = b""
    with reader:
        try:
            while (left := deadline - time.monotonic()) > 0:
                reader.settimeout(min(left, 30))
                if not (chunk := reader.recv(1 << 20)):
                    return "hint" if HINT in tail else "closed"
                tail = (tail + chunk)[-400:]
        except TimeoutError:
            pass
        except ConnectionResetError:
            return "reset"
    return "open"


def send_stalled_drops(api: Api) -> float:
    """Connections the controller dropped after a full send buffer, by its /metrics."""
    for line in api.session.get(f"{api.url}/metrics", timeout=30).text.splitlines():
        if line.startswith("devboxes_http_connections_closed_total") and SEND_STALLED in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def fan_out(
    streams: Streams,
    readers: Readers,
    url: str,
    headers: dict[str, str],
    names: list[str],
    before: Callable[[], None],
) -> tuple[list[float], list[float], int]:
    """Start each box: the latency from the request to the box's first event on every
    stream that may see it, each start's spread from the first such stream to the last,
    and the arrivals missing."""
    latencies: list[float] = []
    spreads: list[float] = []
    missing = 0
    for name in names:
        expected = sum(readers.sees(index, name) for index in range(streams.count))
        before()
        asked = time.monotonic()
        response = requests.post(f"{url}/api/v1/devboxes/{name}/start", headers=headers, timeout=60)
        if response.status_code != 200:
            raise SystemExit(f"start {name}: {response.status_code} {response.text}")
        deadline = time.monotonic() + 30
        while len(streams.arrivals(name)) < expected and time.monotonic() < deadline:
            time.sleep(0.02)
        arrivals = streams.arrivals(name)
        missing += max(0, expected - len(arrivals))
        latencies.extend((t - asked) * 1000 for t in arrivals)
        if arrivals:
            spreads.append((arrivals[-1] - arrivals[0]) * 1000)
        time.sleep(0.5)
    return latencies, spreads, missing


def summary(latencies: list[float], spreads: list[float], missing: int) -> str:
    return (
        f"{len(latencies)} arrivals, {missing} missing; latency p50 "
        f"{percentile(latencies, 50):.0f} / p90 {percentile(latencies, 90):.0f} / "
        f"p99 {percentile(latencies, 99):.0f} / max {max(latencies):.0f} ms; "
        f"first to last stream p50 {percentile(spreads, 50):.0f} / max {max(spreads):.0f} ms"
    )


def run(args: argparse.Namespace) -> None:
    with staged("stream", "nodes.yaml", args.namespace) as stage:
        controller = stage.controller
        api = Api(controller.url, controller.token)
        readers = Readers(args.people, controller.token)
        names = readers.box_names(args.boxes)
        started = time.monotonic()
        write_boxes(stage, names, owner=readers.owner_of_box)
        while len(api.ok("GET", "/devboxes").json()["items"]) < args.boxes:
            time.sleep(3)
        log(f"  all {args.boxes} listed, {time.monotonic() - started:.0f}s")
        snapshot_bytes = len(api.ok("GET", "/devboxes", headers={"Accept-Encoding": ""}).content)
        if args.history:
            log("waiting for every box's own ReplicaSet ...")
            wait_for_replicasets(stage, args.boxes, HISTORY_TIMEOUT)
            log("writing each box's older ReplicaSets ...")
            write_history(stage, names, HISTORY_TIMEOUT)
            time.sleep(15)  # the controller's watch takes them in
        replicasets = replicaset_count(stage.kube, args.namespace)
        rss_none = settled_rss_mib(controller.pid)

        host, port = "127.0.0.1", int(controller.url.rsplit(":", 1)[1])
        headers = controller.headers()
        heads = [request_head(readers.headers(i, headers)) for i in range(args.clients)]
        streams = Streams(host, port, heads)
        opened = streams.open()
        deadline = time.monotonic() + args.timeout
        while len(streams.snapshots) < args.clients:
            if time.monotonic() > deadline or streams.failed:
                raise SystemExit(
                    f"{len(streams.snapshots)} snapshots arrived; failed: {streams.failed[:3]}"
                )
            time.sleep(0.2)
        snapshot_times = [t - opened for t, _ in streams.snapshots]
        snapshot_boxes = sorted({boxes for _, boxes in streams.snapshots})
        log(f"  {args.clients} snapshots delivered")
        rss_open = settled_rss_mib(controller.pid)

        reading = names[: args.samples]
        log(f"starting {len(reading)} boxes, every stream reading ...")
        alone = fan_out(streams, readers, controller.url, headers, reading, lambda: None)

        stalled: list[tuple[socket.socket, float]] = []
        drops_before = send_stalled_drops(api)

        def stall() -> None:
            # The operator's: the whole list, a snapshot that fills the buffers at once.
            stalled.append((stalled_reader(host, port, headers), time.monotonic()))
            time.sleep(STALL_SECONDS)

        beside = names[args.samples : 2 * args.samples]
        log(f"starting {len(beside)} boxes, a fresh stalled reader opened before each ...")
        with_stalled = fan_out(streams, readers, controller.url, headers, beside, stall)
        rss_stalled = settled_rss_mib(controller.pid)

        # Every stalled reader has now waited longer than the controller allows one chunk.
        time.sleep(SLOW_SECONDS)
        # Read one after another, oldest first; each with how long it had been stalled.
        ends = []
        for reader, since in stalled:
            waited = time.monotonic() - since
            ends.append((how_it_ended(reader), waited))
        time.sleep(1)
        dropped = controller.log.read_text().count(DROPPED)
        send_stalled = send_stalled_drops(api) - drops_before
        with streams.lock:
            sent = {name for name, seen in streams.first.items() if seen}
            per_stream = [
                sum(1 for seen in streams.first.values() if index in seen)
                for index in range(args.clients)
            ]
            leaked = sum(
                1
                for name, seen in streams.first.items()
                for index in seen
                if not readers.sees(index, name)
            )
        started_names = set(reading) | set(beside)

        print(f"boxes: {args.boxes} stopped (written); list body {snapshot_bytes:,} bytes")
        print(f"ReplicaSets when the streams were opened: {replicasets}")
        whose = f"{args.people} people's sessions" if args.people else "the operator's token"
        print(f"streams: {args.clients} reading, {whose}\n")
        print(
            f"snapshots: {len(snapshot_times)} delivered, p50 "
            f"{percentile(snapshot_times, 50):.2f} s, max {max(snapshot_times):.2f} s after "
            f"the streams were opened; boxes per snapshot: {snapshot_boxes}"
        )
        print(f"event-to-client, {len(reading)} starts, every stream reading:")
        print(f"  {summary(*alone)}")
        print(f"event-to-client, {len(beside)} starts, beside 1 to {len(stalled)} stalled readers:")
        print(f"  {summary(*with_stalled)}")
        print(
            f"box events sent: for {len(sent)} names, of them started here "
            f"{len(sent & started_names)}; per stream min {min(per_stream)}, "
            f"max {max(per_stream)} (of {len(started_names)} started)"
        )
        print(f"box events on a stream whose reader may not see the box: {leaked}")
        print(f"reading streams that ended: {streams.ended}; failed: {len(streams.failed)}")
        hinted = sum(end == "hint" for end, _ in ends)
        print(
            f"stalled readers: {len(stalled)}; ended with the reconnect hint once read: "
            f"{hinted}; dropped (controller log): {dropped}"
        )
        print(
            "  each, oldest first (how it ended, seconds stalled when read): "
            + ", ".join(f"{end} {waited:.0f}" for end, waited in ends)
        )
        print(
            f"  connections the controller dropped after "
            f"{connections.SEND_STALL_SECONDS} s of a full send buffer: {send_stalled:.0f}"
        )
        print(f"controller RSS, no stream: {rss_none:.1f} MiB")
        print(f"controller RSS, {args.clients} streams open: {rss_open:.1f} MiB")
        print(f"controller RSS, and {len(stalled)} stalled readers: {rss_stalled:.1f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=10000, help="stopped boxes written")
    parser.add_argument("--clients", type=int, default=200, help="streams that read")
    parser.add_argument("--samples", type=int, default=10, help="boxes started per round")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for the snapshots")
    parser.add_argument("--people", type=int, default=0, help="owners of the boxes and streams")
    parser.add_argument("--namespace", default="devboxes-stream")
    parser.add_argument(
        "--history",
        action="store_true",
        help="open the streams once every box has its own ReplicaSet and the two older ones "
        "two starts and stops leave",
    )
    return record.run("stream_bench", parser, run, argv, check=_check)


def _check(args: argparse.Namespace) -> str | None:
    if not 0 < 2 * args.samples <= args.boxes:
        return "--boxes must hold two rounds of --samples"
    if not 0 <= args.people <= 100:
        return "--people must be between 0 and 100"
    return None


if __name__ == "__main__":
    sys.exit(main())
