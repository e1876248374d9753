"""docs/api.md's route table names, for every ``/api/v1`` route, exactly the statuses the
OpenAPI document declares for it."""

from __future__ import annotations

import re
from pathlib import Path

from devboxes_controller.web.api import contract

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ROW = re.compile(r"^\| (GET|POST|DELETE|PUT|PATCH) \| `([^`?]+)[^|]*\| (.*) \| (.*) \|$")
STATUS = re.compile(r"^(\d{3})\b")


def _statuses(*cells: str) -> set[str]:
    """The statuses a cell names: each part, split at commas and semicolons, that starts
    with one (so the numbers inside a body's description do not count)."""
    return {
        found.group(1)
        for cell in cells
        for part in re.split(r"[,;]", cell)
        if (found := STATUS.match(part.strip()))
    }


def documented() -> dict[tuple[str, str], set[str]]:
    rows = (ROW.match(line) for line in REFERENCE.read_text().splitlines())
    return {
        (row.group(1), row.group(2)): _statuses(row.group(3), row.group(4))
        for row in rows
        if row and row.group(2).startswith("/api/v1/")
    }


def declared() -> dict[tuple[str, str], set[str]]:
    return {
        (method.upper(), path): set(operation["responses"])
        for path, operations in contract()["paths"].items()
        for method, operation in operations.items()
    }


def test_cells_name_the_statuses_they_start_parts_with() -> None:
    assert _statuses('200 `{"user": "operator", "mode": "token"}`; 304', "401, 413") == {
        "200",
        "304",
        "401",
        "413",
    }
    assert _statuses("200 `Devbox` (renews the TTL for 168 hours)", "") == {"200"}


def test_every_route_documents_exactly_the_statuses_the_openapi_document_declares() -> None:
    docs, openapi = documented(), declared()
    assert set(docs) == set(openapi), "routes in one and not the other"
    differences = {route: (docs[route], openapi[route]) for route in openapi}
    assert {route: pair for route, pair in differences.items() if pair[0] != pair[1]} == {}
