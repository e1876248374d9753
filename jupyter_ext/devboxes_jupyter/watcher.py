"""One background thread per server that keeps the controller's view fresh.

- While a browser watches (asked within the last minute), it lists the boxes every
  ``poll_interval`` seconds, and GPU availability when the controller offers it. Many
  browser tabs cost the controller one request per interval, not one each.
- It keeps the devbox kernelspecs in step with the GPU catalog and with which profiles
  some node serves (GPU availability).
- A failed kernel start goes once a later kernel of its box runs.

Browsers long-poll ``/devboxes/api/watch``: the answer is held until the view changes
(a box, availability, a kernel start's progress) or the wait runs out.

A server that serves the several clusters of the SDK configuration file lists them all
at once, each within the clusters' short timeout: a cluster that does not answer keeps
its last listing with why, and never holds up the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devboxes_jupyter import progress
from devboxes_jupyter.client_factory import ClusterSet
from devboxes_jupyter.kernelspecs import unservable, write_kernelspecs
from devboxes_jupyter.models import ClusterView, KernelProgress, WatchView
from devboxes_sdk import models
from devboxes_sdk.client import Client
from devboxes_sdk.errors import DevboxesError, NotFound

# A browser that has not asked for this long is gone; stop listing boxes for it.
WATCHER_IDLE_SECONDS = 60.0
CATALOG_REFRESH_SECONDS = 300.0
# How often each cluster's capabilities (its GPU catalog, for the create form) are read
# again on a server of several clusters.
CLUSTER_CATALOG_SECONDS = 60.0
# The phase of a start whose kernel runs.
RUNNING = "running"


def replaced(
    kernels: Iterable[KernelProgress], cluster_of: Callable[[str], str | None]
) -> list[str]:
    """The failed starts of a box whose kernel, started later, now runs: the box works,
    so the old failure says nothing any more. A box is its name on its kernel's cluster
    (``cluster_of`` a kernel's id): one of the same name on another cluster is another."""
    kernels = list(kernels)

    def box(kernel: KernelProgress) -> tuple[str | None, str]:
        return cluster_of(kernel.kernel_id), kernel.box

    running: dict[tuple[str | None, str], float] = {}
    for kernel in kernels:
        if kernel.phase == RUNNING:
            key = box(kernel)
            running[key] = max(running.get(key, kernel.updated), kernel.updated)
    return [
        k.kernel_id
        for k in kernels
        if k.phase == progress.FAILED and box(k) in running and k.updated < running[box(k)]
    ]


@dataclass(frozen=True)
class _Listing:
    """The controller's part of the view; a failed listing keeps the last good one."""

    items: list[models.Devbox] | None = None
    observed_at: datetime | None = None
    error: str | None = None
    availability: models.GpuAvailability | None = None
    when: models.GpuWhen | None = None
    dashboard_url: str | None = None
    # A cluster's catalog, on a server of several clusters.
    capabilities: models.Capabilities | None = None


def _or_none(read: Callable[[], Any]) -> Any:
    """What ``read`` answers, or None from a controller without that route."""
    try:
        return read()
    except NotFound:
        return None


class Watcher:
    def __init__(
        self,
        client: Callable[[], Client],
        poll_interval: float,
        kernel_dir: Path | None,
        kernel_python: str,
        log: Any,
        dashboard_url: str = "",
        clusters: ClusterSet | None = None,
    ) -> None:
        self._client = client
        self._dashboard_url = dashboard_url
        # The clusters of a server that serves several, each with its listing, in the
        # configuration's order; the default cluster's is also ``_listing``.
        self._clusters = clusters
        self._cluster_listings: dict[str, _Listing] = (
            {name: _Listing() for name in clusters.names()} if clusters is not None else {}
        )
        self._default_cluster: str | None = clusters.default() if clusters is not None else None
        self._notes: list[str] = []
        # Each cluster URL's catalog and when it was read (monotonic seconds).
        self._catalogs: dict[str, tuple[float, models.Capabilities]] = {}
        self.poll_interval = poll_interval
        self._kernel_dir = kernel_dir
        self._kernel_python = kernel_python
        self._log = log
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._last_watch = 0.0
        self._next_catalog = 0.0
        self._availability_missing = False
        self._when_missing = False
        # The catalog's profiles once read, and the profiles held back from the kernelspecs
        # because no node serves them, with why.
        self._profiles: list[models.GpuProfile] | None = None
        self._held: dict[str, str] = {}
        self._version = 0
        self._listing = _Listing()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="devboxes-watcher", daemon=True)
        progress.REGISTRY.listeners.extend([self._drop_replaced, self._bump])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        for listener in (self._drop_replaced, self._bump):
            with contextlib.suppress(ValueError):
                progress.REGISTRY.listeners.remove(listener)
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float) -> None:
        """Wait for the call in flight, if any, to end after :meth:`stop`."""
        self._thread.join(timeout)

    # -- the thread ---------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            # The catalog only feeds the kernelspecs.
            if self._kernel_dir is not None and now >= self._next_catalog:
                self._refresh_catalog()
            if now - self._last_watch < WATCHER_IDLE_SECONDS:
                self._refresh_boxes()
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def _refresh_catalog(self) -> None:
        try:
            client = self._client()
            catalog = client.capabilities().gpu
            self._profiles = catalog.profiles if catalog.enabled else []
            self._offer_kernels(self._availability(client))
            self._next_catalog = time.monotonic() + CATALOG_REFRESH_SECONDS
        except (DevboxesError, OSError) as error:
            # Try again on the next round; the CPU kernelspec is there meanwhile.
            self._log.warning("devboxes: cannot refresh the GPU catalog: %s", error)

    def _offer_kernels(self, availability: models.GpuAvailability | None) -> None:
        """A kernelspec for each profile of the catalog that some node serves."""
        assert self._kernel_dir is not None
        assert self._profiles is not None
        held = unservable(availability)
        offered = [p for p in self._profiles if p.name not in held]
        write_kernelspecs(self._kernel_dir, offered, self._kernel_python)
        for name, reason in held.items():
            if self._held.get(name) != reason:
                self._log.info("devboxes: no devbox kernel for profile %s: %s", name, reason)
        self._held = held

    def _refresh_boxes(self) -> None:
        if self._clusters is not None:
            self._refresh_clusters(self._clusters)
            return
        try:
            client = self._client()
            listing = _Listing(
                items=list(client.list()),
                observed_at=datetime.now(UTC),
                availability=self._availability(client),
                when=self._when(client),
                dashboard_url=self._dashboard_url or client.url,
            )
        except DevboxesError as error:
            listing = replace(self._listing, error=str(error))
        self._follow_kernels(listing)
        with self._lock:
            changed = listing != self._listing
            self._listing = listing
        if changed:
            self._bump()

    def _follow_kernels(self, listing: _Listing) -> None:
        """Before the view changes: a page that sees new counts finds the kernelspecs
        that follow from them."""
        if (
            self._kernel_dir is not None
            and self._profiles is not None
            and unservable(listing.availability) != self._held
        ):
            try:
                self._offer_kernels(listing.availability)
            except OSError as error:
                self._log.warning("devboxes: cannot write the devbox kernelspecs: %s", error)

    def _refresh_clusters(self, clusters: ClusterSet) -> None:
        """Every cluster listed at once; one that gives no answer keeps its last listing
        with why (``did not answer in 3 s``)."""
        previous = self._cluster_listings
        try:
            merged = clusters.merged()
            default = clusters.default()
            answers = merged.ask(self._read_cluster)
        except DevboxesError as error:
            # The configuration itself cannot be read: every cluster says so.
            listings = {name: replace(kept, error=str(error)) for name, kept in previous.items()}
            notes: list[str] = []
            default = self._default_cluster or ""
        else:
            found: dict[str, _Listing] = {a.cluster: a.value for a in answers.answers}
            for silent in answers.errors:
                found[silent.cluster] = replace(
                    previous.get(silent.cluster, _Listing()), error=silent.message
                )
            listings = {name: found[name] for name in merged.names if name in found}
            notes = list(answers.notes)
        if default not in listings and listings:
            default = next(iter(listings))
        listing = listings.get(default, _Listing())
        self._follow_kernels(listing)
        with self._lock:
            changed = (listings, notes, default) != (
                self._cluster_listings,
                self._notes,
                self._default_cluster,
            )
            self._cluster_listings, self._notes = listings, notes
            self._default_cluster, self._listing = default, listing
        if changed:
            self._bump()

    def _read_cluster(self, client: Client) -> _Listing:
        """One cluster's boxes, free counts, "when?" and catalog (read again once a minute)."""
        items: list[models.Devbox] = list(client.list())
        read = self._catalogs.get(client.url)
        if read is None or time.monotonic() - read[0] >= CLUSTER_CATALOG_SECONDS:
            read = (time.monotonic(), client.capabilities())
            self._catalogs[client.url] = read
        return _Listing(
            items=items,
            observed_at=datetime.now(UTC),
            availability=_or_none(client.gpu.availability),
            when=_or_none(client.gpu.when),
            dashboard_url=client.url,
            capabilities=read[1],
        )

    def _availability(self, client: Client) -> models.GpuAvailability | None:
        """``GET /api/v1/gpu/availability`` if this controller has it, else None."""
        if self._availability_missing:
            return None
        try:
            return client.gpu.availability()
        except NotFound:
            self._availability_missing = True
            return None

    def _when(self, client: Client) -> models.GpuWhen | None:
        """``GET /api/v1/gpu/when`` if this controller has it, else None."""
        if self._when_missing:
            return None
        try:
            return client.gpu.when()
        except NotFound:
            self._when_missing = True
            return None

    def _drop_replaced(self) -> None:
        for kernel_id in replaced(progress.REGISTRY.snapshot(), progress.REGISTRY.cluster_of):
            progress.REGISTRY.dismiss(kernel_id)

    # -- the event loop side ------------------------------------------------------

    def _bump(self) -> None:
        with self._lock:
            self._version += 1
        loop, changed = self._loop, self._changed
        if loop is not None and changed is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(changed.set)

    def snapshot(self) -> WatchView:
        with self._lock:
            listing, version = self._listing, self._version
            listings, notes = dict(self._cluster_listings), list(self._notes)
            default = self._default_cluster
        clusters = None
        if self._clusters is not None:
            clusters = [
                ClusterView(
                    name=name,
                    default=name == default,
                    items=kept.items,
                    observed_at=kept.observed_at,
                    error=kept.error,
                    availability=kept.availability,
                    when=kept.when,
                    capabilities=kept.capabilities,
                    dashboard_url=kept.dashboard_url,
                )
                for name, kept in listings.items()
            ]
        return WatchView(
            version=version,
            items=listing.items,
            observed_at=listing.observed_at,
            error=listing.error,
            availability=listing.availability,
            when=listing.when,
            dashboard_url=listing.dashboard_url,
            kernels=progress.REGISTRY.snapshot(),
            poll_interval=self.poll_interval,
            clusters=clusters,
            notes=notes,
        )

    def refresh_now(self) -> None:
        """After the browser changed a box: list again without waiting for the interval."""
        self._wake.set()

    async def wait(self, after: int, timeout: float) -> WatchView:
        """The view once its version passes ``after``, or as it is after ``timeout``."""
        if self._changed is None:
            self._loop = asyncio.get_running_loop()
            self._changed = asyncio.Event()
        first = self._last_watch == 0.0
        self._last_watch = time.monotonic()
        # With several clusters, the others' fresh listings would answer each watch at
        # once, and each watch would list again: only the first one does.
        if first or (self._listing.items is None and self._clusters is None):
            self._wake.set()
        deadline = time.monotonic() + timeout
        while True:
            # Cleared before the check: a change after it sets the event again.
            self._changed.clear()
            with self._lock:
                if self._version > after:
                    break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return self.snapshot()
