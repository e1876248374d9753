"""Watch-backed caches: one shared list-then-watch per kind, served from memory.

Each :class:`Informer` lists its kind once, then watches from the list's
resourceVersion, resumes from the last seen version when a watch ends, and lists
again when the apiserver answers 410 Gone. Readers never touch the apiserver.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from .kube import Obj, resource_version

log = logging.getLogger(__name__)

WATCH_SECONDS = 240
MAX_BACKOFF = 30.0

BoxOf = Callable[[Obj], str | None]
OnChange = Callable[[str], None]


class Informer:
    """The live set of one kind's objects in one namespace, indexed by box."""

    def __init__(
        self,
        kind: str,
        list_function: Callable[..., Any],
        namespace: str,
        box_of: BoxOf,
        on_change: OnChange,
        label_selector: str | None = None,
    ) -> None:
        self.kind = kind
        self._list = list_function
        self._namespace = namespace
        self._box_of = box_of
        self._on_change = on_change
        self._selector = label_selector
        self._objects: dict[str, Obj] = {}
        self._by_box: dict[str, dict[str, Obj]] = {}
        self._condition = threading.Condition()
        self._stop = threading.Event()
        self.synced = threading.Event()
        self.healthy = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)

    # -- reading -----------------------------------------------------------------------------
    def get(self, name: str) -> Obj | None:
        return self._objects.get(name)

    def all(self) -> list[Obj]:
        return list(self._objects.values())

    def for_box(self, box: str) -> list[Obj]:
        return list(self._by_box.get(box, {}).values())

    def boxes(self) -> set[str]:
        return set(self._by_box)

    def __len__(self) -> int:
        return len(self._objects)

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

    # -- the watch loop ----------------------------------------------------------------------
    def _kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"namespace": self._namespace}
        if self._selector:
            kwargs["label_selector"] = self._selector
        return kwargs

    def _run(self) -> None:
        backoff = 0.5
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                version = self._watch(version)
                backoff = 0.5
            except client.ApiException as err:
                if err.status == 410:
                    log.info("watch expired, listing again", extra={"kind": self.kind})
                    version = None
                    continue
                self._failed(err, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except Exception as err:  # noqa: BLE001 - any transport failure: back off and resume
                self._failed(err, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _failed(self, err: Exception, backoff: float) -> None:
        self.healthy.clear()
        log.warning(
            "watch failed, retrying",
            extra={"kind": self.kind, "error": type(err).__name__, "backoff": backoff},
        )
        self._stop.wait(backoff)

    def _relist(self) -> str:
        response = self._list(_preload_content=False, **self._kwargs())
        body = json.loads(response.data)
        items = {item["metadata"]["name"]: item for item in body.get("items") or []}
        touched: set[str] = set()
        with self._condition:
            for name in set(self._objects) - set(items):
                touched |= self._remove(name)
            for item in items.values():
                touched |= self._put(item)
            self._condition.notify_all()
        self.synced.set()
        self.healthy.set()
        self._notify(touched)
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> str:
        stream = watch.Watch()
        for event in stream.stream(
            self._list,
            resource_version=version,
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
            deserialize=False,
            **self._kwargs(),
        ):
            if self._stop.is_set():
                stream.stop()
                break
            kind, obj = event["type"], event["object"]
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise client.ApiException(status=410, reason="Gone")
                raise client.ApiException(status=obj.get("code") or 500, reason=obj.get("message"))
            version = str(obj["metadata"]["resourceVersion"])
            if kind == "BOOKMARK":
                continue
            with self._condition:
                touched = (
                    self._remove(obj["metadata"]["name"]) if kind == "DELETED" else self._put(obj)
                )
                self._condition.notify_all()
            self.healthy.set()
            self._notify(touched)
        self.healthy.set()
        return version

    def _put(self, obj: Obj) -> set[str]:
        name = obj["metadata"]["name"]
        touched = self._remove(name)
        self._objects[name] = obj
        box = self._box_of(obj)
        if box:
            self._by_box.setdefault(box, {})[name] = obj
            touched.add(box)
        return touched

    def _remove(self, name: str) -> set[str]:
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
            try:
                self._on_change(box)
            except Exception:
                log.exception("status update failed", extra={"box": box})
