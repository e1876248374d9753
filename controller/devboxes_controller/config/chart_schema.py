"""The Helm chart's values schema, generated from the settings models.

The chart hands its ``controller`` block, with ``gpu`` beside it, to the controller as the
settings file, so those two blocks are :class:`.Settings` as pydantic describes it. What
only the chart reads (image, replicas, token, Service, Ingress, resources, disruption
budget) and what the chart reads differently from the controller is written here, on top.
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

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from .formats import DnsSubdomain, Quantity
from .settings import Settings

DRAFT_07 = "http://json-schema.org/draft-07/schema#"

Schema = dict[str, Any]

# Keywords that describe rather than check; pydantic's defaults are the controller's, not
# the chart's.
_DROPPED = frozenset({"title", "default"})
_NULL: Schema = {"type": "null"}

# Keys the chart's defaults set that a values file may not delete by setting them to null
# (Helm drops such a key): the controller must not fall back to its own defaults unseen,
# and the templates read ttl, availability and gpu.enabled.
_KEPT: dict[tuple[str, ...], list[str]] = {
    ("controller",): ["workspaceImage", "ttl", "ssh", "presets"],
    ("controller", "ttl"): ["defaultHours", "maxHours"],
    ("controller", "ssh"): ["serviceType"],
    ("controller", "availability"): ["enabled"],
    ("gpu",): ["enabled"],
}


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


def _settings() -> Schema:
    schema = Settings.model_json_schema(by_alias=True, schema_generator=_AsWritten)
    converted: Schema = _draft07(schema, schema.pop("$defs"))
    return converted


def _format(annotation: Any) -> Schema:
    return TypeAdapter(annotation).json_schema(schema_generator=_AsWritten)


def _chart_only() -> Schema:
    """The values that only the chart reads, as properties of the values file."""
    subdomain = _format(DnsSubdomain)
    resource_list = {
        "type": "object",
        "additionalProperties": {
            "anyOf": [_format(Quantity), {"type": "number", "minimum": 0}],
        },
    }
    return {
        "global": {"type": "object"},
        "image": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "repository": {"type": "string", "minLength": 1},
                "tag": {"type": "string"},
                "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
            },
            "required": ["repository", "tag", "pullPolicy"],
        },
        "replicaCount": {"type": "integer", "minimum": 1, "maximum": 10},
        "token": {
            "description": "The operator bearer token's Secret. The token itself is never a "
            "value, since values are kept in the release history.",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "existingSecret": {
                    "description": "Name of an existing Secret holding the token (at least 32 "
                    "characters); empty: the chart generates one and keeps it across upgrades.",
                    "type": "string",
                    "anyOf": [{"maxLength": 0}, subdomain],
                },
                "key": {
                    "description": "Key of the token in the Secret, generated or existing.",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 253,
                    "pattern": "^[-._a-zA-Z0-9]+$",
                },
            },
            "required": ["existingSecret", "key"],
        },
        "service": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "type": {"type": "string", "enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
            },
            "required": ["type", "port"],
        },
        "ingress": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "enabled": {"type": "boolean"},
                "className": {"type": "string"},
                "host": {"type": "string"},
                "tls": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "secretName": {"type": "string"},
                            "hosts": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
            },
            "required": ["enabled"],
            "if": {"properties": {"enabled": {"const": True}}},
            "then": {"required": ["host"], "properties": {"host": subdomain}},
        },
        "resources": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"requests": resource_list, "limits": resource_list},
        },
        "podDisruptionBudget": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "minAvailable": {
                    "anyOf": [
                        {"type": "integer", "minimum": 0},
                        {"type": "string", "pattern": "^([0-9]|[1-9][0-9]|100)%$"},
                    ]
                }
            },
            "required": ["minAvailable"],
        },
    }


def values_schema() -> Schema:
    """The schema of the chart's values: the settings, and the chart's own values on top."""
    controller = _settings()
    properties = controller["properties"]
    gpu = properties.pop("gpu")
    # Empty stands for the release's namespace, which the chart fills in.
    properties["namespace"] = {
        "type": "string",
        "anyOf": [{"maxLength": 0}, properties["namespace"]],
    }
    values: Schema = {
        "$schema": DRAFT_07,
        "title": "Devboxes chart values",
        "type": "object",
        "additionalProperties": False,
        "properties": {**_chart_only(), "controller": controller, "gpu": gpu},
        "required": ["image", "replicaCount", "token", "service", "controller", "gpu"],
    }
    for path, keys in _KEPT.items():
        node = values
        for key in path:
            node = node["properties"][key]
        node["required"] = [*node.get("required", []), *keys]
    return values


def text() -> str:
    """The schema as the chart holds it."""
    return json.dumps(values_schema(), indent=2) + "\n"
