"""Giving back the boxes of closed devbox kernels.

A box holds its device for as long as it runs, so a box nobody's kernel uses any more is
stopped: when a devbox kernel shuts down (not for a restart), its box is stopped once a
grace has passed, unless by then another kernel of this server uses it (a start or a
running kernel in ``progress.REGISTRY``) or the box's activity agent last reported it in
use (an SSH session or a busy kernel). When the server itself stops, the boxes of its
kernels and those still in their grace are stopped at once: nothing would be left to
stop them later. A server that dies without stopping leaves them to the idle window.

A kernel that pinned a cluster (several clusters configured, see ``box_start``) has its
box stopped on that cluster, whatever the configuration says by then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import datetime

from devboxes_jupyter import progress
from devboxes_jupyter.box_start import controller, on_cluster
from devboxes_sdk import models
from devboxes_sdk.client import Devbox
from devboxes_sdk.errors import DevboxesError, NotFound

# (cluster, box name) -> its grace, while it runs: a later shutdown on the same box
# restarts it. The cluster is None for a kernel that pinned none.
_pending: dict[tuple[str | None, str], asyncio.Task[None]] = {}
_server_stopping = False
Log = logging.Logger | logging.LoggerAdapter[logging.Logger]


def in_use(box: str, cluster: str | None = None) -> bool:
    """Whether a kernel of this server is starting or running in ``box`` (of ``cluster``,
    for kernels that pinned one)."""
    return (cluster, box) in progress.REGISTRY.boxes_in_use()


def stop_unless_used(box: str, created_at: datetime, log: Log, cluster: str | None = None) -> None:
    """Stop ``box`` (on ``cluster``, when its kernel pinned one) unless a kernel of this
    server or an SSH session uses it, or it is another box of the name than the one
    created at ``created_at``."""
    named = on_cluster(box, cluster)
    if in_use(box, cluster):
        log.info("devbox kernels: box %s kept, another kernel of this server uses it", named)
        return
    try:
        client = controller(cluster)
        current = client.get(box)
        if current.created_at != created_at or current.state is models.DevboxState.STOPPED:
            return
        if current.activity is not None and current.activity.state == "active":
            log.info("devbox kernels: box %s kept, it is in use (SSH or a busy kernel)", named)
            return
        client.stop(box)
    except NotFound:
        return
    except DevboxesError as error:
        log.warning("devbox kernels: box %s could not be stopped: %s", named, error)
        return
    log.info("devbox kernels: box %s stopped, no kernel of this server uses it", named)


def _stop_now(boxes: Iterable[tuple[str | None, str]], log: logging.Logger) -> None:
    for cluster, box in boxes:
        named = on_cluster(box, cluster)
        try:
            controller(cluster).stop(box)
        except NotFound:
            continue
        except DevboxesError as error:
            log.warning("devbox kernels: box %s could not be stopped: %s", named, error)
            continue
        log.info("devbox kernels: box %s stopped with the server", named)


async def _after_grace(
    box: str, created_at: datetime, grace: float, log: Log, cluster: str | None
) -> None:
    await asyncio.sleep(grace)
    await asyncio.to_thread(stop_unless_used, box, created_at, log, cluster)


def kernel_closed(box: Devbox, grace: float, log: Log, cluster: str | None = None) -> None:
    """A kernel that used ``box`` (on ``cluster``, when it pinned one) shut down: stop
    the box after ``grace`` seconds unless it is used by then. Called on the server's
    event loop."""
    if _server_stopping:
        # The server's own stop has stopped the box already.
        return
    key = (cluster, box.name)
    earlier = _pending.pop(key, None)
    if earlier is not None:
        earlier.cancel()
    task = asyncio.get_running_loop().create_task(
        _after_grace(box.name, box.created_at, grace, log, cluster)
    )
    _pending[key] = task

    def done(finished: asyncio.Task[None]) -> None:
        if _pending.get(key) is finished:
            del _pending[key]

    task.add_done_callback(done)


async def server_stopping(log: logging.Logger) -> None:
    """Stop, at once, the boxes of this server's kernels and those still in their grace."""
    global _server_stopping
    _server_stopping = True
    boxes = set(_pending)
    for task in _pending.values():
        task.cancel()
    _pending.clear()
    boxes.update(progress.REGISTRY.boxes_in_use())
    ordered = sorted(boxes, key=lambda key: (key[0] or "", key[1]))
    await asyncio.to_thread(_stop_now, ordered, log)
