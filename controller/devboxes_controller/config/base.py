"""What every settings model shares: its pydantic configuration, its rules, and the bounds
and checks of whole numbers.

Settings fail closed, and every violation is reported at once. Two kinds of rules exist.
Per-field rules (formats, ranges, unknown keys) are pydantic validators, which already
collect every failure. Rules that relate several values (unique names, the default
profile, toleration operator and value, ...) are written once as ``_rules`` on each model
and run twice: as a model validator, so that a model built in code is always consistent,
and over the raw input by :func:`raw_rules`, so that they are reported even when an
unrelated field of the same model is invalid.

Where a validator is a function, the type also carries the JSON Schema of what it checks,
and a model states as JSON Schema those of its rules that JSON Schema can express: the
chart's values schema is generated from these models (:mod:`.chart_schema`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Self, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StrictInt,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from .violations import Loc, Violation, fail, is_model, rules_failed, unwrap

MAX_GROUP_ID = 2**31 - 1


# --- whole numbers -----------------------------------------------------------------------


def whole_number(value: object) -> object:
    """Integers, and numbers like 2.0 that JSON Schema and Helm treat as the integer 2."""
    shown = json.dumps(value) if isinstance(value, bool | int | float) else repr(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(f"must be an integer, got {shown}")
    if isinstance(value, float):
        if not value.is_integer():
            raise fail(f"must be an integer, got {shown}")
        return int(value)
    return value


def int_range(low: int, high: int) -> Callable[[int], int]:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise fail(f"must be between {low} and {high}, got {value}")
        return value

    return check


def integers(low: int, high: int) -> WithJsonSchema:
    """The JSON Schema of :func:`int_range`."""
    return WithJsonSchema({"type": "integer", "minimum": low, "maximum": high})


@dataclass(frozen=True)
class WholeNumber:
    """``Annotated[int, WholeNumber(low, high)]``: a whole number (2.0 counts as 2) from
    ``low`` to ``high``, refused with a message naming the bounds, and the JSON Schema
    that says the same."""

    low: int
    high: int

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        checked = core_schema.no_info_after_validator_function(
            int_range(self.low, self.high), handler(source)
        )
        return core_schema.no_info_before_validator_function(whole_number, checked)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "integer", "minimum": self.low, "maximum": self.high}


def _check_group(value: int) -> int:
    if value == 0:
        raise fail("group 0 (root) is never allowed as a supplemental group")
    if not 1 <= value <= MAX_GROUP_ID:
        raise fail(f"a group id must be between 1 and {MAX_GROUP_ID}, got {value}")
    return value


# A Linux group or user id other than root's.
GroupId = Annotated[StrictInt, AfterValidator(_check_group), integers(1, MAX_GROUP_ID)]


# --- raw input ---------------------------------------------------------------------------


def lookup(raw: Mapping[str, Any], name: str) -> Any:
    """A field of raw input, by its camelCase key or its snake_case name."""
    alias = to_camel(name)
    return raw[alias] if alias in raw else raw.get(name)


def entry_name(entry: object) -> str | None:
    """The name of a list entry in raw input, when it has one."""
    name = lookup(entry, "name") if isinstance(entry, Mapping) else None
    return name if isinstance(name, str) else None


def entry_names(entries: object) -> list[str]:
    """The distinct names of a raw list's entries, in order."""
    found = (entry_name(entry) for entry in entries) if isinstance(entries, list) else ()
    return list(dict.fromkeys(name for name in found if name is not None))


# --- models ------------------------------------------------------------------------------


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        strict=True,
        frozen=True,
    )

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        """Rules that relate several values; ``raw`` may hold anything the user wrote."""
        return []

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        found = self._rules(self.model_dump(by_alias=True))
        if found:
            raise rules_failed(found)
        return self


def _nested(annotation: Any) -> tuple[str, type[Model]] | None:
    """How a field holds settings models: one, a list of them or a mapping to them."""
    annotation = unwrap(annotation)
    if is_model(annotation):
        return "one", annotation
    origin = get_origin(annotation)
    if origin in (list, dict):
        item = unwrap(get_args(annotation)[-1])
        if is_model(item):
            return ("list" if origin is list else "dict"), item
    return None


def raw_rules(model: type[Model], raw: object, loc: Loc) -> list[Violation]:
    """Every cross-field rule of ``model`` and of the models inside it, over raw input."""
    if not isinstance(raw, Mapping):
        return []
    found = [(loc + sub, message) for sub, message in model._rules(raw)]
    for name, field in model.model_fields.items():
        nested = _nested(field.annotation)
        child = lookup(raw, name)
        if nested is None or child is None:
            continue
        kind, child_model = nested
        key = field.alias or name
        if kind == "one":
            found += raw_rules(child_model, child, (*loc, key))
        elif kind == "list" and isinstance(child, list):
            for index, item in enumerate(child):
                found += raw_rules(child_model, item, (*loc, key, index))
        elif kind == "dict" and isinstance(child, Mapping):
            for item_key, item in child.items():
                found += raw_rules(child_model, item, (*loc, key, str(item_key)))
    return found
