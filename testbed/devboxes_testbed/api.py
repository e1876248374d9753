"""A controller's /api/v1 over one keep-alive session with its bearer token: the HTTP
client the tests and the benchmarks share."""

from __future__ import annotations

import time
from typing import Any

import requests


def bearer(token: str) -> dict[str, str]:
    """The header every API request carries, whatever client sends it."""
    return {"Authorization": f"Bearer {token}"}


class Api:
    """``request`` returns the response whatever its status, for callers about refusals;
    ``ok`` and ``timed`` fail on any status from 400 up."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.base = f"{self.url}/api/v1"
        self.session = requests.Session()
        self.session.headers.update(bearer(token))

    def request(
        self, method: str, path: str, timeout: float = 60, **kwargs: Any
    ) -> requests.Response:
        return self.session.request(method, f"{self.base}{path}", timeout=timeout, **kwargs)

    def ok(self, method: str, path: str, timeout: float = 60, **kwargs: Any) -> requests.Response:
        response = self.request(method, path, timeout, **kwargs)
        assert response.status_code < 400, (
            f"{method} {path}: {response.status_code} {response.text}"
        )
        return response

    def timed(self, path: str) -> float:
        """Milliseconds from sending ``GET path`` to reading its whole answer."""
        started = time.perf_counter()
        self.ok("GET", path)
        return (time.perf_counter() - started) * 1000
