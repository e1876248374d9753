"""The chart's values schema is generated from the controller's settings models.

``make chart-schema`` writes ``charts/devboxes/values.schema.json``; test_chart.py renders
the chart to check the rules it holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from devboxes_controller.config.chart_schema import DRAFT_07, text, values_schema

SCHEMA = Path(__file__).resolve().parents[2] / "charts" / "devboxes" / "values.schema.json"


def test_the_committed_schema_is_the_one_the_settings_generate() -> None:
    assert SCHEMA.read_text() == text(), (
        "charts/devboxes/values.schema.json no longer matches the controller's settings: "
        "run `make chart-schema`"
    )


def values(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema a value of the values file meets, by where the value is."""
    yield path or "/", schema
    for name, sub in schema.get("properties", {}).items():
        yield from values(sub, f"{path}/{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from values(schema[key], f"{path}/*")
    for choice in schema.get("anyOf", []):
        yield from values(choice, path)


def test_the_schema_is_draft_07_and_refuses_unknown_keys_everywhere() -> None:
    schema = values_schema()
    assert schema["$schema"] == DRAFT_07
    assert "$ref" not in text()
    assert "$defs" not in text()
    assert "patternProperties" not in text()
    open_objects = [
        path
        for path, sub in values(schema)
        if "properties" in sub and sub.get("additionalProperties") is not False
    ]
    assert open_objects == []
