"""What the read routes answer, kept: each box's status and its response body, and the
list bodies of the filters asked for, made once per change rather than once per request.

Not thread-safe: the store changes it with its status lock held. ``box`` and ``body`` may
be read without the lock (a box removed between two reads is absent).
"""

from __future__ import annotations

from devboxes_sdk.models import Devbox, DevboxState

from .bodies import Body, body
from .index import CPU, BoxIndex, Key


class Answers:
    def __init__(self) -> None:
        self._status: dict[str, Devbox] = {}
        self._status_body: dict[str, Body] = {}
        # List bodies by (owner, state, profile) filter, made when first asked for and
        # dropped when one of their boxes changes.
        self._list_bodies: dict[Key, Body] = {}
        self._index = BoxIndex()

    def box(self, name: str) -> Devbox | None:
        return self._status.get(name)

    def body(self, name: str) -> Body | None:
        return self._status_body.get(name)

    def put(self, box: Devbox) -> bool:
        """Keep the box's status; whether it reads otherwise than before."""
        answer = body(box.model_dump_json().encode())
        before = self._status_body.get(box.name)
        self._status[box.name] = box
        self._status_body[box.name] = answer
        profile = box.gpu.profile if box.gpu else CPU
        moved = self._index.put(box.name, box.owner, box.state.value, profile)
        # Watches resend objects whose box reads the same: those leave every list as it was.
        changed = before is None or before.etag != answer.etag
        self._drop_lists(moved | set(self._index.keys_of(box.name)) if changed else moved)
        return changed

    def remove(self, name: str) -> bool:
        """Forget the box; whether it was known."""
        known = self._status.pop(name, None) is not None
        self._status_body.pop(name, None)
        self._drop_lists(self._index.remove(name))
        return known

    def summarize(self, summaries: dict[str, str]) -> set[str]:
        """Give boxes their summaries; the boxes whose summary changed."""
        touched: set[str] = set()
        for name, summary in summaries.items():
            box = self._status.get(name)
            if box is not None and box.summary != summary:
                self.put(box.model_copy(update={"summary": summary}))
                touched.add(name)
        return touched

    def _drop_lists(self, keys: set[Key]) -> None:
        for key in keys:
            self._list_bodies.pop(key, None)

    def _newest_first(self, boxes: list[Devbox]) -> Body:
        order = sorted(boxes, key=lambda b: (b.created_at, b.name), reverse=True)
        parts = [self._status_body[b.name].data for b in order]
        return body(b'{"items":[' + b",".join(parts) + b"]}", compress=True)

    def filtered(self, key: Key) -> Body:
        """The list body of the ``(owner, state, profile)`` filter (``None``: any)."""
        answer = self._list_bodies.get(key)
        if answer is None:
            names = self._index.names(key)
            answer = self._newest_first([self._status[name] for name in names])
            # A filter no box matches is not kept: anyone may ask for countless such.
            if names:
                self._list_bodies[key] = answer
        return answer

    def names(self, key: Key) -> list[str]:
        """The names of the filter's boxes, in name order."""
        return self._index.names(key)

    def page(self, key: Key, after: str, limit: int | None) -> tuple[list[bytes], str | None]:
        """The bodies of up to ``limit`` boxes of the filter named after ``after``, in name
        order, and the name to continue after when more boxes follow."""
        page = self._index.page(key, after, limit)
        parts = [self._status_body[name].data for name in page.names]
        return parts, page.names[-1] if page.more else None

    def profiles(self) -> set[str]:
        return self._index.profiles()

    def counts(self) -> dict[str, int]:
        """Boxes by state."""
        totals = {state.value: 0 for state in DevboxState}
        for box in list(self._status.values()):
            totals[box.state.value] += 1
        return totals
