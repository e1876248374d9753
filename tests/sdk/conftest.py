"""Cassette matching for the SDK's recorded HTTP exchanges."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlparse

# Seconds asked of the server-side wait depend on the time left, so they are not matched.
UNMATCHED_QUERY = {"timeout"}


def _stable_query(request: Any) -> list[tuple[str, str]]:
    pairs = parse_qsl(urlparse(request.uri).query)
    return sorted(p for p in pairs if p[0] not in UNMATCHED_QUERY)


def _match_stable_query(first: Any, second: Any) -> None:
    assert _stable_query(first) == _stable_query(second)


def pytest_recording_configure(config: Any, vcr: Any) -> None:
    vcr.register_matcher("stable_query", _match_stable_query)
