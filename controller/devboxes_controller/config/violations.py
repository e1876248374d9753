"""How a broken setting is reported: ``path: message``, with the keys of the values file.

Paths use the camelCase keys an operator writes (``gpu.profiles[1].name``); messages
say what was found and what is allowed, never pydantic's own wording.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticCustomError

Loc = tuple[str | int, ...]
Violation = tuple[Loc, str]
T = TypeVar("T")

# The error type of a rule that relates several values, raised by a model validator.
# The same rules are reported again from the raw input with precise paths, so these are
# dropped whenever anything else failed.
RULE_ERROR = "devboxes_rule"
# The error type of a per-field rule; its message is shown as is.
FIELD_ERROR = "devboxes_field"

# Keys shown after a dot in error paths; others (label keys, say) are shown quoted.
_PLAIN_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")


class ConfigError(Exception):
    """The settings break one or more rules; ``violations`` lists every one."""

    def __init__(self, violations: list[str]) -> None:
        self.violations = list(violations)
        super().__init__("\n".join(self.violations))


def fail(message: str) -> PydanticCustomError:
    """The failure of a per-field rule, shown with exactly this message."""
    return PydanticCustomError(FIELD_ERROR, "{message}", {"message": message})


def rules_failed(found: list[Violation]) -> PydanticCustomError:
    """The failure of a model's cross-field rules, all in one message."""
    text = "; ".join(join(loc, message) for loc, message in found)
    return PydanticCustomError(RULE_ERROR, "{text}", {"text": text})


def repeats(entries: object, key: Callable[[object], T | None]) -> Iterator[tuple[int, int, T]]:
    """``(index, first index, key)`` for each entry of a list whose key an earlier entry
    has. Entries without a key (None) and values that are not lists are passed over."""
    if not isinstance(entries, list):
        return
    first: dict[T, int] = {}
    for index, entry in enumerate(entries):
        found = key(entry)
        if found is None:
            continue
        if found in first:
            yield index, first[found], found
        else:
            first[found] = index


def join(loc: Loc, message: str) -> str:
    where = path(loc)
    return f"{where}: {message}" if where else message


def path(loc: Loc) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            # pydantic marks a failing dict key; the message already says it is the key.
            continue
        elif _PLAIN_KEY_RE.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


def show(value: object) -> str:
    """A value as the operator wrote it, or its kind when it is a collection."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return type(value).__name__


def unwrap(annotation: Any) -> Any:
    """The annotation without Annotated metadata and without ``| None``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def field_name(model: type[BaseModel], key: str | int) -> str | None:
    """The field of ``model`` that ``key`` names, by its alias or its own name."""
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return name
    return None


def _model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model that ``loc`` points into, for naming its allowed keys."""
    annotation: Any = root
    for part in loc:
        annotation = unwrap(annotation)
        if is_model(annotation):
            name = field_name(annotation, part)
            if name is None:
                return None
            annotation = annotation.model_fields[name].annotation
        elif get_origin(annotation) is list:
            annotation = get_args(annotation)[0]
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        else:
            return None
    annotation = unwrap(annotation)
    return annotation if is_model(annotation) else None


def describe(error: Mapping[str, Any], root: type[BaseModel]) -> str:
    """The message for one of pydantic's errors, validating ``root``."""
    kind = error["type"]
    loc: Loc = tuple(error["loc"])
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    given = error.get("input")
    if kind in (FIELD_ERROR, RULE_ERROR):
        return str(error["msg"])
    if kind == "extra_forbidden":
        key = loc[-1] if loc else ""
        model = _model_at(root, loc[:-1])
        if model is None:
            return f"unknown key {key!r}"
        allowed = [field.alias or name for name, field in model.model_fields.items()]
        hint = difflib.get_close_matches(str(key), allowed, n=1)
        suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
        return f"unknown key {key!r} (allowed: {', '.join(allowed)}){suggestion}"
    if kind == "missing":
        return "is required"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if kind == "int_type":
        return f"must be an integer, got {show(given)}"
    if kind == "string_type":
        quote = "; quote it in YAML" if isinstance(given, int | float) else ""
        return f"must be a string, got {show(given)}{quote}"
    if kind == "bool_type":
        return f"must be true or false, got {show(given)}"
    if kind == "list_type":
        return f"must be a list, got {show(given)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping, got {show(given)}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, got {show(given)}"
    if kind == "too_long":
        return (
            f"at most {ctx.get('max_length')} entries are allowed, got {ctx.get('actual_length')}"
        )
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}, got {show(given)}"
    message = str(error["msg"])
    return message[:1].lower() + message[1:]


def config_error(violations: list[tuple[str, str]]) -> ConfigError:
    """The error listing ``(path, message)`` violations, one line each."""
    return ConfigError(
        [f"{where}: {message}" if where else message for where, message in violations]
    )
