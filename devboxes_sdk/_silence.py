"""Clusters that recently did not answer, remembered across commands.

A frozen controller accepts connections and never answers, so the only way to tell it
from a slow one is to wait out the merged calls' timeout. Having waited once, the next
commands within ``REMEMBERED_SECONDS`` give that cluster only ``SHORT_SECONDS``: a person
running ``devbox list`` again does not wait the whole timeout for it every time. The
full timeout comes back once the window has passed, so a slow cluster is never shut out
for longer than that; an answer forgets the silence at once.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

REMEMBERED_SECONDS = 60.0
SHORT_SECONDS = 0.5


def silence_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/devbox/silent-clusters.json``, or under ``~/.cache``."""
    environ = os.environ if env is None else env
    cache = environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(cache) if cache else Path(environ.get("HOME") or Path.home()) / ".cache"
    return root / "devbox" / "silent-clusters.json"


class Silences:
    """When each cluster URL last did not answer within the full timeout (Unix time)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._since: dict[str, float] = {}
        self._changed = False
        if path is None:
            return
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            # Nothing remembered, or a file not ours to trust: every cluster gets its time.
            return
        if isinstance(loaded, dict):
            self._since = {
                url: float(at) for url, at in loaded.items() if isinstance(at, int | float)
            }

    def since(self, url: str, now: float) -> float | None:
        """When ``url`` went silent, while that is remembered."""
        at = self._since.get(url)
        return at if at is not None and 0 <= now - at < REMEMBERED_SECONDS else None

    def budget(self, url: str, timeout: float, now: float) -> float:
        """The seconds ``url`` is given: the short time while its silence is remembered."""
        return min(SHORT_SECONDS, timeout) if self.since(url, now) is not None else timeout

    def silent(self, url: str, now: float) -> None:
        """``url`` did not answer within the full timeout at ``now``."""
        self._since[url] = now
        self._changed = True

    def answered(self, url: str) -> None:
        if self._since.pop(url, None) is not None:
            self._changed = True

    def save(self, now: float) -> None:
        """Write what is still remembered, if anything changed; a cache that cannot be
        written only costs the next command the full timeout."""
        if not self._changed or self._path is None:
            return
        kept = {url: at for url, at in self._since.items() if now - at < REMEMBERED_SECONDS}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(dir=self._path.parent, suffix=".tmp")
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(kept, handle)
            os.replace(temporary, self._path)
        except OSError:
            return
        self._changed = False
