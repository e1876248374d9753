"""Box names in name order, kept per owner, state and profile so that a filtered or paged
list is a lookup and a slice, never a scan of every box.

Each box sits in eight sorted lists: one for every combination of its owner, its state and
its profile, each either named or left open. A list's key is ``(owner, state, profile)``
with ``None`` meaning "any".
Name order is what makes paging stable: a box's name never changes, so "the names after
the last one I saw" picks up exactly where the previous page ended, whatever was created
or deleted in between.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass

# The profile of a box without a GPU.
CPU = "cpu"

Key = tuple[str | None, str | None, str | None]
Place = tuple[str, str, str]


@dataclass(frozen=True)
class Page:
    names: list[str]
    # True when the filter holds names after the last one on this page.
    more: bool


def _keys(place: Place) -> list[Key]:
    owner, state, profile = place
    return [(o, s, p) for o in (None, owner) for s in (None, state) for p in (None, profile)]


class BoxIndex:
    """Not thread-safe: the store calls it with its status lock held."""

    def __init__(self) -> None:
        self._lists: dict[Key, list[str]] = {}
        self._placed: dict[str, Place] = {}

    def put(self, name: str, owner: str, state: str, profile: str) -> set[Key]:
        """Record the box's owner, current state and profile, moving it between lists if
        they changed; returns the keys of the lists it joined or left."""
        placed = self._placed.get(name)
        if placed == (owner, state, profile):
            return set()
        left = self.remove(name)
        self._placed[name] = (owner, state, profile)
        joined = _keys((owner, state, profile))
        for key in joined:
            insort(self._lists.setdefault(key, []), name)
        return left.symmetric_difference(joined)

    def remove(self, name: str) -> set[Key]:
        """Forget the box; returns the keys of the lists it left."""
        placed = self._placed.pop(name, None)
        if placed is None:
            return set()
        left = _keys(placed)
        for key in left:
            names = self._lists[key]
            del names[bisect_left(names, name)]
            if not names:
                del self._lists[key]
        return set(left)

    def keys_of(self, name: str) -> list[Key]:
        """The keys of every list the box is in."""
        placed = self._placed.get(name)
        return _keys(placed) if placed is not None else []

    def names(self, key: Key) -> list[str]:
        return list(self._lists.get(key, ()))

    def page(self, key: Key, after: str, limit: int | None) -> Page:
        """Up to ``limit`` names greater than ``after`` (every name when ``after`` is
        empty), in name order."""
        names = self._lists.get(key, [])
        start = bisect_right(names, after)
        end = len(names) if limit is None else min(start + limit, len(names))
        return Page(names[start:end], end < len(names))

    def profiles(self) -> set[str]:
        """The profiles some box has now."""
        return {
            profile
            for owner, state, profile in self._lists
            if owner is None and state is None and profile is not None
        }

    def __len__(self) -> int:
        return len(self._placed)
