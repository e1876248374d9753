"""Watch-backed caches: one shared list-then-watch per kind, served from memory.

Each :class:`Informer` lists its kind once, then watches from the list's
resourceVersion, resumes from the last seen version when a watch ends, and lists
again when the apiserver answers 410 Gone (as it does after a restart, when its watch
cache no longer reaches back to our version). The watch stream is read line by line
here rather than through the client library's watch helper, so that every ERROR
event, HTTP status and dropped connection reaches the recovery logic. Readers never
touch the apiserver. Each object is kept as ``strip`` makes it (see ``slim``): only what
the controller reads.

One informer per watch of ``watches.WATCHES``, shared: every reader of a kind subscribes
to its one informer (:meth:`Informer.subscribe`) rather than watching it again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..k8s.kube import CONNECT_SECONDS, Obj, describe, resource_version, status_of
from .metrics import METRICS

log = logging.getLogger(__name__)

# The apiserver ends each watch after this long; the read timeout adds a margin so a
# connection that went silent (a frozen apiserver, a dropped route) is noticed too.
WATCH_SECONDS = 120
READ_MARGIN_SECONDS = 30
LIST_READ_SECONDS = 60
# Objects per list request: the full objects of one page at most are held before they are
# stripped, so a controller starting beside thousands of boxes stays small.
LIST_PAGE = 500
FIRST_BACKOFF = 0.25
MAX_BACKOFF = 5.0

BoxOf = Callable[[Obj], str | None]
OnChange = Callable[[str], None]
OnObject = Callable[[Obj | None, Obj | None], None]
Strip = Callable[[Obj], Obj]
Keep = Callable[[Obj], bool]


def _no_box(obj: Obj) -> str | None:
    return None


def _ignore(box: str) -> None:
    return None


class WatchExpired(Exception):
    """The apiserver no longer has our resourceVersion: only a fresh list can resume."""


class WatchFailed(Exception):
    """The apiserver ended the watch with an ERROR event other than 410."""


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-delimited JSON events of a watch response, as they arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from (line for line in complete if line.strip())
    if buffer.strip():
        yield buffer


class Informer:
    """The live set of one kind's objects in one namespace, indexed by box.

    ``synced`` is set once the first list has been loaded. ``healthy`` is set while a
    watch is established and cleared from the first failure until the next watch is
    established again, so a replica can tell fresh caches from stale ones; ``failure``
    then holds the error that broke it.

    With ``namespace`` None the informer covers the whole cluster and keys objects by
    ``namespace/name``. ``field_selector`` narrows the kind to, say, one object by name.
    ``strip`` keeps only what readers need of each object (it must
    keep ``metadata.name``, ``namespace`` and ``resourceVersion``), so a cache of every pod
    of a cluster stays small. ``keep`` decides which objects are cached at all: one it
    refuses is treated as absent, and a change that makes it refused removes it.
    ``on_change`` is called with each box whose objects changed, ``on_update`` after every
    applied change and every failure. ``on_object`` is called with the object before and
    after each change it applies (None for an object that was or is no more), holding the
    cache's lock, so that what a reader builds from the changes stays in step with the
    cache inside :meth:`paused`. Readers that come later add theirs with :meth:`subscribe`.
    """

    def __init__(
        self,
        kind: str,
        list_function: Callable[..., Any],
        namespace: str | None,
        box_of: BoxOf | None = None,
        on_change: OnChange = _ignore,
        label_selector: str | None = None,
        strip: Strip | None = None,
        keep: Keep | None = None,
        on_update: Callable[[], None] | None = None,
        field_selector: str | None = None,
        on_object: OnObject | None = None,
    ) -> None:
        self.kind = kind
        self._list = list_function
        self._namespace = namespace
        self._box_of = box_of or _no_box
        self._selector = label_selector
        self._fields = field_selector
        self._strip = strip
        self._keep = keep
        self._on_change: list[OnChange] = []
        self._on_update: list[Callable[[], None]] = []
        self._on_object: list[OnObject] = []
        self.subscribe(on_change, on_update, on_object)
        self.failure: Exception | None = None
        self._objects: dict[str, Obj] = {}
        self._by_box: dict[str, dict[str, Obj]] = {}
        self._condition = threading.Condition()
        self._stop = threading.Event()
        self._response: Any = None
        self._incident: tuple[float, int] | None = None
        self.synced = threading.Event()
        self.healthy = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)

    def subscribe(
        self,
        on_change: OnChange | None = None,
        on_update: Callable[[], None] | None = None,
        on_object: OnObject | None = None,
    ) -> None:
        """Add a reader's handlers, called as the constructor's are; before :meth:`start`."""
        if on_change is not None and on_change is not _ignore:
            self._on_change.append(on_change)
        if on_update is not None:
            self._on_update.append(on_update)
        if on_object is not None:
            self._on_object.append(on_object)

    # -- reading -----------------------------------------------------------------------------
    def get(self, name: str) -> Obj | None:
        return self._objects.get(name)

    def all(self) -> list[Obj]:
        return list(self._objects.values())

    def names(self) -> set[str]:
        return set(self._objects)

    def for_box(self, box: str) -> list[Obj]:
        return list(self._by_box.get(box, {}).values())

    def boxes(self) -> set[str]:
        return set(self._by_box)

    def __len__(self) -> int:
        return len(self._objects)

    def paused(self) -> threading.Condition:
        """Held (``with informer.paused():``), no change is applied: a reader sees the
        cache and what ``on_object`` made of it at the same moment."""
        return self._condition

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate`` holds for the cache, or the timeout passes."""
        with self._condition:
            return self._condition.wait_for(predicate, timeout)

    def wait_for_version(self, name: str, version: int, timeout: float = 2.0) -> bool:
        """Until the cache holds ``name`` at ``version`` or later: reads then reflect a write."""
        return self.wait_for(
            lambda: resource_version(self._objects.get(name) or {}) >= version, timeout
        )

    def wait_for_absence(self, name: str, timeout: float = 2.0) -> bool:
        return self.wait_for(
            lambda: (
                name not in self._objects
                or bool(self._objects[name]["metadata"].get("deletionTimestamp"))
            ),
            timeout,
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # Shutting the socket down wakes the thread blocked reading the watch; closing the
        # response from this thread would wait for that read to return.
        connection = getattr(self._response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # -- the watch loop ----------------------------------------------------------------------
    def _kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self._namespace is not None:
            kwargs["namespace"] = self._namespace
        if self._selector:
            kwargs["label_selector"] = self._selector
        if self._fields:
            kwargs["field_selector"] = self._fields
        return kwargs

    def _run(self) -> None:
        backoff = FIRST_BACKOFF
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                version = self._watch(version)
                backoff = FIRST_BACKOFF
            except WatchExpired:
                version = None
            except Exception as err:  # noqa: BLE001 - any failure: back off, then resume
                if self._stop.is_set():
                    break
                if status_of(err) == 410:
                    version = None
                    continue
                self._failed(err)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _failed(self, err: Exception) -> None:
        """Stale from now on; the first failure of an incident is logged, the rest counted."""
        self.healthy.clear()
        self.failure = err
        self._updated()
        METRICS.watch_failures.labels(self.kind).inc()
        if self._incident is None:
            self._incident = (time.monotonic(), 1)
            log.warning(
                "watch failed; serving the cached objects until it recovers",
                extra={"kind": self.kind, "error": describe(err)},
            )
        else:
            started, failures = self._incident
            self._incident = (started, failures + 1)

    def _established(self) -> None:
        self.failure = None
        self.healthy.set()
        if self._incident is not None:
            started, failures = self._incident
            self._incident = None
            log.info(
                "watch recovered",
                extra={
                    "kind": self.kind,
                    "failures": failures,
                    "seconds": round(time.monotonic() - started, 1),
                },
            )

    def _relist(self) -> str:
        items: dict[str, Obj] = {}
        page: dict[str, Any] = {}
        while True:
            response = self._list(
                limit=LIST_PAGE,
                _request_timeout=(CONNECT_SECONDS, LIST_READ_SECONDS),
                **page,
                **self._kwargs(),
            )
            body = json.loads(response.data)
            for item in body.get("items") or []:
                if (kept := self._kept(item)) is not None:
                    items[self._key(item)] = kept
            version = str(body["metadata"]["resourceVersion"])
            token = body["metadata"].get("continue")
            del body  # the full objects: a relist of every box's pods must not linger
            if not token:
                break
            # Every page comes from the snapshot of the first; an expired token is a 410,
            # which relists from the start.
            page = {"_continue": token}
        touched: set[str] = set()
        with self._condition:
            for name in set(self._objects) - set(items):
                touched |= self._remove(name)
            for name, item in items.items():
                if resource_version(item) != resource_version(self._objects.get(name) or {}):
                    touched |= self._put(item)
            self._condition.notify_all()
        self.synced.set()
        self._notify(touched)
        self._updated()
        return version

    def _watch(self, version: str) -> str:
        response = self._list(
            watch=True,
            resource_version=version,
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
            _request_timeout=(CONNECT_SECONDS, WATCH_SECONDS + READ_MARGIN_SECONDS),
            **self._kwargs(),
        )
        self._response = response
        self._established()
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(obj.get("message"))
                    raise WatchFailed(f"{obj.get('code')}: {obj.get('message')}")
                version = str(obj["metadata"]["resourceVersion"])
                if kind == "BOOKMARK":
                    continue
                # Stripped before the lock, so readers never wait on a copy.
                name = self._key(obj)
                kept = None if kind == "DELETED" else self._kept(obj)
                with self._condition:
                    touched = self._remove(name) if kept is None else self._put(kept)
                    self._condition.notify_all()
                self._notify(touched)
                self._updated()
        finally:
            self._response = None
            response.release_conn()
        return version

    def _key(self, obj: Obj) -> str:
        metadata = obj["metadata"]
        if self._namespace is None and metadata.get("namespace"):
            return f"{metadata['namespace']}/{metadata['name']}"
        return str(metadata["name"])

    def _kept(self, obj: Obj) -> Obj | None:
        if self._keep is not None and not self._keep(obj):
            return None
        return self._strip(obj) if self._strip is not None else obj

    def _updated(self) -> None:
        for on_update in self._on_update:
            on_update()

    def _put(self, obj: Obj) -> set[str]:
        name = self._key(obj)
        old = self._objects.get(name)
        touched = self._drop(name)
        self._objects[name] = obj
        box = self._box_of(obj)
        if box:
            self._by_box.setdefault(box, {})[name] = obj
            touched.add(box)
        self._changed(old, obj)
        return touched

    def _remove(self, name: str) -> set[str]:
        old = self._objects.get(name)
        touched = self._drop(name)
        if old is not None:
            self._changed(old, None)
        return touched

    def _changed(self, old: Obj | None, new: Obj | None) -> None:
        for on_object in self._on_object:
            try:
                on_object(old, new)
            except Exception:
                # The watch must go on; a reader's own check finds what it missed.
                log.exception("object change handler failed", extra={"kind": self.kind})

    def _drop(self, name: str) -> set[str]:
        """Forget an object; the boxes it belonged to."""
        old = self._objects.pop(name, None)
        if old is None:
            return set()
        box = self._box_of(old)
        if not box:
            return set()
        members = self._by_box.get(box, {})
        members.pop(name, None)
        if not members:
            self._by_box.pop(box, None)
        return {box}

    def _notify(self, boxes: set[str]) -> None:
        for box in boxes:
            for on_change in self._on_change:
                try:
                    on_change(box)
                except Exception:
                    log.exception("status update failed", extra={"box": box})
