"""Many readers of the dashboard's event stream, and readers that stop reading.

It starts a testbed (testbed/nodes.yaml) and this checkout's controller, writes
``--boxes`` stopped boxes straight to the apiserver (``devboxes_testbed.boxes``), then
opens ``--clients`` event streams (``/dashboard/events``, the operator's bearer token)
from one asyncio loop of their own, and measures:

- the snapshots: how long all streams take to deliver theirs, and that each holds every
  box, and nothing else;
- event-to-client latency: ``--samples`` times, a written box is started through the API,
  and on every stream the time from just before that request to the arrival of the box's
  first ``box`` event is taken; so is the spread between the first stream and the last.
  Once with every stream reading, then once more with a reader that never reads (a socket
  with a 4 KiB receive window, stalled in its snapshot) opened before each start, so that
  the second round runs beside stalled readers;
- that each stream was sent the started boxes and no other box;
- that each stalled reader, read at last, is told to reconnect and its stream ends (the
  controller logs each one);
- the controller's resident memory with no stream, and with the streams open.

    PYTHONPATH=testbed .venv/bin/python bench/stream_bench.py --results
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
from devboxes_testbed.api import Api
from stopped_boxes import log, settled_rss_mib, staged, write_boxes

PREFIX = "box-"
DROPPED = "slow event-stream reader told to reconnect"
HINT = b"event: reconnect"
# A stream's snapshot names every box once as ``"name":"box-…"``; no other field does.
BOX_NAME = re.compile(rb'"name":"' + re.escape(PREFIX.encode()))
# Seconds a stalled reader's snapshot gets to fill the connection's buffers before a start.
STALL_SECONDS = 1.0
# Longer than the controller lets a reader take for one chunk (SLOW_READER_SECONDS).
SLOW_SECONDS = 12.0


class Streams:
    """``count`` event streams read on a loop of their own thread: what each snapshot held
    and when it arrived, and when each stream first saw a ``box`` event of each name."""

    def __init__(self, host: str, port: int, headers: dict[str, str], count: int) -> None:
        self.request = request_head(headers)
        self.host, self.port, self.count = host, port, count
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
            writer.write(self.request)
            while True:
                self._arrived(index, await reader.readuntil(b"\n\n"))
        except asyncio.IncompleteReadError:
            with self.lock:
                self.ended += 1
        except (OSError, asyncio.LimitOverrunError) as err:
            with self.lock:
                self.failed.append(f"stream {index}: {err!r}")

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


def ends_with_hint(reader: socket.socket) -> bool:
    """Read the stalled stream at last, to its end: whether it ends with the hint."""
    reader.settimeout(30)
    tail = b""
    with reader:
        try:
            while chunk := reader.recv(1 << 20):
                tail = (tail + chunk)[-400:]
        except TimeoutError:
            return False
    return HINT in tail


def fan_out(
    streams: Streams,
    url: str,
    headers: dict[str, str],
    names: list[str],
    before: Callable[[], None],
) -> tuple[list[float], list[float], int]:
    """Start each box: every stream's latency from the request to the box's first event,
    each start's spread from the first stream to the last, and the arrivals missing."""
    latencies: list[float] = []
    spreads: list[float] = []
    missing = 0
    for name in names:
        before()
        asked = time.monotonic()
        response = requests.post(f"{url}/api/v1/devboxes/{name}/start", headers=headers, timeout=60)
        if response.status_code != 200:
            raise SystemExit(f"start {name}: {response.status_code} {response.text}")
        deadline = time.monotonic() + 30
        while len(streams.arrivals(name)) < streams.count and time.monotonic() < deadline:
            time.sleep(0.02)
        arrivals = streams.arrivals(name)
        missing += streams.count - len(arrivals)
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
        names = [f"{PREFIX}{i:05d}" for i in range(args.boxes)]
        started = time.monotonic()
        write_boxes(stage, names)
        while len(api.ok("GET", "/devboxes").json()["items"]) < args.boxes:
            time.sleep(3)
        log(f"  all {args.boxes} listed, {time.monotonic() - started:.0f}s")
        snapshot_bytes = len(api.ok("GET", "/devboxes", headers={"Accept-Encoding": ""}).content)
        rss_none = settled_rss_mib(controller.pid)

        host, port = "127.0.0.1", int(controller.url.rsplit(":", 1)[1])
        headers = controller.headers()
        streams = Streams(host, port, headers, args.clients)
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
        alone = fan_out(streams, controller.url, headers, reading, lambda: None)

        stalled: list[socket.socket] = []

        def stall() -> None:
            stalled.append(stalled_reader(host, port, headers))
            time.sleep(STALL_SECONDS)

        beside = names[args.samples : 2 * args.samples]
        log(f"starting {len(beside)} boxes, a fresh stalled reader opened before each ...")
        with_stalled = fan_out(streams, controller.url, headers, beside, stall)
        rss_stalled = settled_rss_mib(controller.pid)

        # Every stalled reader has now waited longer than the controller allows one chunk.
        time.sleep(SLOW_SECONDS)
        hinted = sum(ends_with_hint(reader) for reader in stalled)
        time.sleep(1)
        dropped = controller.log.read_text().count(DROPPED)
        with streams.lock:
            sent = {name for name, seen in streams.first.items() if seen}
            per_stream = [
                sum(1 for seen in streams.first.values() if index in seen)
                for index in range(args.clients)
            ]
        started_names = set(reading) | set(beside)

        print(f"boxes: {args.boxes} stopped (written); list body {snapshot_bytes:,} bytes")
        print(f"streams: {args.clients} reading, the operator's token\n")
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
        print(f"reading streams that ended: {streams.ended}; failed: {len(streams.failed)}")
        print(
            f"stalled readers: {len(stalled)}; ended with the reconnect hint once read: "
            f"{hinted}; dropped (controller log): {dropped}"
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
    parser.add_argument("--namespace", default="devboxes-stream")
    record.add_arguments(parser)
    args = parser.parse_args(argv)
    if not 0 < 2 * args.samples <= args.boxes:
        parser.error("--boxes must hold two rounds of --samples")

    with record.recording("stream_bench", args):
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
