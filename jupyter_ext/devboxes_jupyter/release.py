"""Giving back the boxes of closed devbox kernels.

A box holds its device for as long as it runs, so a box nobody's kernel uses any more is
stopped: when a devbox kernel shuts down (not for a restart), its box is stopped once a
grace has passed, unless by then another kernel of this server uses it (a start or a
running kernel in ``progress.REGISTRY``) or the box's activity agent last reported it in
use (an SSH session or a busy kernel). When the server itself stops, the boxes of its
kernels and those still in their grace are stopped at once: nothing would be left to
stop them later. A server that dies without stopping leaves them to the idle window.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import datetime

from devboxes_jupyter import progress
from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import DevboxesError, NotFound

# Box name -> its grace, while it runs: a later shutdown on the same box restarts it.
_pending: dict[str, asyncio.Task[None]] = {}
_server_stopping = False
Log = logging.Logger | logging.LoggerAdapter[logging.Logger]


def in_use(box: str) -> bool:
    """Whether a kernel of this server is starting or running in ``box``."""
    return any(
        item.box == box and item.phase != progress.FAILED for item in progress.REGISTRY.snapshot()
    )


def stop_unless_used(box: str, created_at: datetime, log: Log) -> None:
    """Stop ``box`` unless a kernel of this server or an SSH session uses it, or it is
    another box of the name than the one created at ``created_at``."""
    if in_use(box):
        log.info("devbox kernels: box %s kept, another kernel of this server uses it", box)
        return
    client = Client()
    try:
        current = client.get(box)
        if current.created_at != created_at or current.state is models.DevboxState.STOPPED:
            return
        if current.activity is not None and current.activity.state == "active":
            log.info("devbox kernels: box %s kept, it is in use (SSH or a busy kernel)", box)
            return
        client.stop(box)
    except NotFound:
        return
    except DevboxesError as error:
        log.warning("devbox kernels: box %s could not be stopped: %s", box, error)
        return
    log.info("devbox kernels: box %s stopped, no kernel of this server uses it", box)


def _stop_now(boxes: Iterable[str], log: logging.Logger) -> None:
    for box in boxes:
        try:
            Client().stop(box)
        except NotFound:
            continue
        except DevboxesError as error:
            log.warning("devbox kernels: box %s could not be stopped: %s", box, error)
            continue
        log.info("devbox kernels: box %s stopped with the server", box)


async def _after_grace(box: str, created_at: datetime, grace: float, log: Log) -> None:
    await asyncio.sleep(grace)
    await asyncio.to_thread(stop_unless_used, box, created_at, log)


def kernel_closed(box: Devbox, grace: float, log: Log) -> None:
    """A kernel that used ``box`` shut down: stop the box after ``grace`` seconds unless
    it is used by then. Called on the server's event loop."""
    if _server_stopping:
        # The server's own stop has stopped the box already.
        return
    name = box.name
    earlier = _pending.pop(name, None)
    if earlier is not None:
        earlier.cancel()
    task = asyncio.get_running_loop().create_task(_after_grace(name, box.created_at, grace, log))
    _pending[name] = task

    def done(finished: asyncio.Task[None]) -> None:
        if _pending.get(name) is finished:
            del _pending[name]

    task.add_done_callback(done)


async def server_stopping(log: logging.Logger) -> None:
    """Stop, at once, the boxes of this server's kernels and those still in their grace."""
    global _server_stopping
    _server_stopping = True
    boxes = set(_pending)
    for task in _pending.values():
        task.cancel()
    _pending.clear()
    boxes.update(item.box for item in progress.REGISTRY.snapshot() if item.phase != progress.FAILED)
    await asyncio.to_thread(_stop_now, sorted(boxes), log)
