"""Box names in name order, kept per state and per profile so that a filtered or paged
list is a lookup and a slice, never a scan of every box.

Each box sits in four sorted lists: all boxes, its state's, its profile's, and its
state-and-profile's. A list's key is ``(state, profile)`` with ``None`` meaning "any".
Name order is what makes paging stable: a box's name never changes, so "the names after
the last one I saw" picks up exactly where the previous page ended, whatever was created
or deleted in between.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass

# The profile of a box without a GPU.
CPU = "cpu"

Key = tuple[str | None, str | None]


@dataclass(frozen=True)
class Page:
    names: list[str]
    # True when the filter holds names after the last one on this page.
    more: bool


def _keys(state: str, profile: str) -> tuple[Key, ...]:
    return ((None, None), (state, None), (None, profile), (state, profile))


class BoxIndex:
    """Not thread-safe: the store calls it with its status lock held."""

    def __init__(self) -> None:
        self._lists: dict[Key, list[str]] = {}
        self._placed: dict[str, tuple[str, str]] = {}

    def put(self, name: str, state: str, profile: str) -> None:
        """Record the box's current state and profile, moving it between lists if they
        changed."""
        placed = self._placed.get(name)
        if placed == (state, profile):
            return
        if placed is not None:
            self.remove(name)
        self._placed[name] = (state, profile)
        for key in _keys(state, profile):
            insort(self._lists.setdefault(key, []), name)

    def remove(self, name: str) -> None:
        placed = self._placed.pop(name, None)
        if placed is None:
            return
        for key in _keys(*placed):
            names = self._lists[key]
            del names[bisect_left(names, name)]
            if not names:
                del self._lists[key]

    def names(self, state: str | None, profile: str | None) -> list[str]:
        return list(self._lists.get((state, profile), ()))

    def page(self, state: str | None, profile: str | None, after: str, limit: int | None) -> Page:
        """Up to ``limit`` names greater than ``after`` (every name when ``after`` is
        empty), in name order."""
        names = self._lists.get((state, profile), [])
        start = bisect_right(names, after)
        end = len(names) if limit is None else min(start + limit, len(names))
        return Page(names[start:end], end < len(names))

    def profiles(self) -> set[str]:
        """The profiles some box has now."""
        return {profile for state, profile in self._lists if state is None and profile is not None}

    def __len__(self) -> int:
        return len(self._placed)
