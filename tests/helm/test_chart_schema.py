"""The chart's values schema is generated from the controller's settings models.

``make chart-schema`` writes ``charts/devboxes/values.schema.json`` (tests/test_generated_files.py
checks it is fresh); test_chart.py renders the chart to check the rules it holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from devboxes_controller.config.chart_schema import DRAFT_07, text, values_schema
from devboxes_controller.config.settings import validate


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


_WORKSPACE = {
    "name": "ws",
    "displayName": "Workspace",
    "image": "example/ws:1",
    "mode": "workspace",
    "accelerators": ["cpu"],
}
_SIDECAR = {
    "name": "web",
    "displayName": "Web",
    "image": "example/web@sha256:" + "a" * 64,
    "resources": {
        "cpuRequest": "10m",
        "memoryRequest": "8Mi",
        "cpuLimit": "1",
        "memoryLimit": "1Gi",
    },
}


@pytest.mark.parametrize(
    "profile",
    [
        _WORKSPACE,
        {**_WORKSPACE, "command": [], "runAsUser": None, "resources": None},
        {**_WORKSPACE, "command": ["sh"]},
        {**_WORKSPACE, "args": ["-c"]},
        {**_WORKSPACE, "runAsUser": 1000},
        {**_WORKSPACE, "resources": _SIDECAR["resources"]},
        {**_WORKSPACE, "accelerators": []},
        {k: v for k, v in _WORKSPACE.items() if k != "accelerators"},
        _SIDECAR,
        {**_SIDECAR, "mode": "sidecar", "accelerators": []},
        {**_SIDECAR, "accelerators": ["cpu"]},
        {**_SIDECAR, "resources": None},
        {k: v for k, v in _SIDECAR.items() if k != "resources"},
        {**_SIDECAR, "image": "example/web"},
        {**_SIDECAR, "image": "example/web:latest"},
        {**_SIDECAR, "image": "localhost:5000/web"},
        {**_SIDECAR, "ports": [{"name": "http", "containerPort": 8080, "protocol": "UDP"}]},
        {**_SIDECAR, "ports": [{"name": "ssh", "containerPort": 8080}]},
        {**_SIDECAR, "ports": [{"name": "a--b", "containerPort": 8080}]},
        {**_SIDECAR, "ports": [{"name": "8080", "containerPort": 8080}]},
        {**_SIDECAR, "ports": [{"name": "http", "containerPort": 2222}]},
        {**_SIDECAR, "ports": [{"name": "http", "containerPort": 1023}]},
    ],
)
def test_schema_and_controller_agree_on_each_image_profile(profile: dict[str, Any]) -> None:
    """Rules of one profile that JSON Schema can state: the schema and the controller give
    the same verdict."""
    values = {"controller": {"images": {"enabled": True, "profiles": [profile]}}}
    schema = values_schema()
    # Only the image profile is judged: the rest of these values is incomplete on purpose.
    found = [
        error
        for error in jsonschema.Draft7Validator(schema).iter_errors(values)
        if list(error.absolute_path)[:2] == ["controller", "images"]
    ]
    settings, _ = validate({"images": values["controller"]["images"]})
    assert (not found) == (settings is not None), [e.message for e in found]
