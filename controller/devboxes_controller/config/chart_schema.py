"""The Helm chart's values schema, generated from the models of its values file
(:mod:`.chart_values`): the controller's settings and what only the chart reads.
``make chart-schema`` writes :func:`text` to ``charts/devboxes/values.schema.json``.

Helm validates values with JSON Schema draft-07, and pydantic writes a later draft: its
definitions are written in place here, since draft-07 ignores every keyword beside a
``$ref``, and key constraints it writes as ``patternProperties`` or an ``enum`` of
property names become rules that refuse unknown keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from .chart_values import ChartValues

DRAFT_07 = "http://json-schema.org/draft-07/schema#"

Schema = dict[str, Any]

# Keywords that describe rather than check; pydantic's defaults are the controller's, not
# the chart's.
_DROPPED = frozenset({"title", "default"})
_NULL: Schema = {"type": "null"}


def _draft07(schema: Any, definitions: Mapping[str, Any]) -> Any:
    """A pydantic JSON Schema (or a part of it) as draft-07, every ``$ref`` resolved."""
    if isinstance(schema, list):
        return [_draft07(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = definitions[schema["$ref"].removeprefix("#/$defs/")]
        siblings = {key: value for key, value in schema.items() if key != "$ref"}
        return _draft07({**target, **siblings}, definitions)
    converted: Schema = {}
    for key, value in schema.items():
        if key in _DROPPED:
            continue
        if key in ("properties", "patternProperties"):
            converted[key] = {name: _draft07(sub, definitions) for name, sub in value.items()}
        else:
            converted[key] = _draft07(value, definitions)
    return _keys_closed(_null_first(converted))


def _null_first(schema: Schema) -> Schema:
    # Helm lists an anyOf's failures in order: null first, so that the last line of the
    # report says what the value should look like.
    choices = schema.get("anyOf")
    if isinstance(choices, list) and _NULL in choices:
        schema["anyOf"] = [_NULL, *(choice for choice in choices if choice != _NULL)]
    return schema


def _keys_closed(schema: Schema) -> Schema:
    """A mapping's key constraints as rules that refuse every other key."""
    patterns = schema.pop("patternProperties", None)
    if patterns is not None:
        # pydantic moves a key pattern here, where keys that miss it pass unchecked.
        ((pattern, values),) = patterns.items()
        schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
        schema["additionalProperties"] = values
    names = schema.get("propertyNames", {}).get("enum")
    if names is not None:
        # A mapping over a fixed set of keys, such as the presets: name each key, so that
        # an unknown one is reported as such.
        values = schema.pop("additionalProperties")
        del schema["propertyNames"]
        schema["properties"] = dict.fromkeys(names, values)
        schema["additionalProperties"] = False
    return schema


class _AsWritten(GenerateJsonSchema):
    """Keywords in the order the models write them, ``type`` first, for a reader of the
    chart rather than pydantic's alphabetical order."""

    def sort(self, value: JsonSchemaValue, parent_key: str | None = None) -> JsonSchemaValue:
        return value


def values_schema() -> Schema:
    """The schema of the chart's values, from :class:`.ChartValues`."""
    schema = ChartValues.model_json_schema(by_alias=True, schema_generator=_AsWritten)
    converted: Schema = _draft07(schema, schema.pop("$defs"))
    return {"$schema": DRAFT_07, "title": "Devboxes chart values", **converted}


def text() -> str:
    """The schema as the chart holds it."""
    return json.dumps(values_schema(), indent=2) + "\n"
