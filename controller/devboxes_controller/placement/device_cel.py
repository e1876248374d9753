"""A published device as Kubernetes shows it to CEL, and its DRA selectors judged with
cel-python: ``device.driver``, ``device.attributes['<domain>'].<name>`` and
``device.capacity['<domain>'].<name>``, with Kubernetes' ``quantity()``, ``semver()`` and
their ``compareTo``/``isGreaterThan``/``isLessThan``. Loaded only once a selector is
judged (``devices.Matcher``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes

from ..config.formats import quantity_value
from ..k8s.kube import Obj


@dataclass(frozen=True, order=True)
class Quantity:
    """A capacity, compared by value as Kubernetes' CEL quantity is."""

    value: Decimal


_SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")


@dataclass(frozen=True, order=True)
class Semver:
    """A version attribute; pre-release and build parts are not supported."""

    parts: tuple[int, int, int]


def _semver(text: object) -> Semver:
    found = _SEMVER.fullmatch(str(text))
    if found is None:
        raise ValueError(f"{text!r} is not a version this controller compares")
    major, minor, patch = (int(x) for x in found.groups())
    return Semver((major, minor, patch))


def _quantity(text: object) -> Quantity:
    return Quantity(quantity_value(str(text)))


def _comparable(a: object, b: object) -> tuple[Any, Any]:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a.value, b.value
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.parts, b.parts
    raise TypeError("no such overload")


def _compare_to(a: object, b: object) -> celtypes.IntType:
    left, right = _comparable(a, b)
    return celtypes.IntType((left > right) - (left < right))


def _greater(a: object, b: object) -> celtypes.BoolType:
    left, right = _comparable(a, b)
    return celtypes.BoolType(left > right)


def _less(a: object, b: object) -> celtypes.BoolType:
    left, right = _comparable(a, b)
    return celtypes.BoolType(left < right)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "semver": _semver,
    "compareTo": _compare_to,
    "isGreaterThan": _greater,
    "isLessThan": _less,
}


def _attribute(value: Obj) -> Any:
    if "string" in value:
        return celtypes.StringType(value["string"])
    if "bool" in value:
        return celtypes.BoolType(value["bool"])
    if "int" in value:
        return celtypes.IntType(value["int"])
    if "version" in value:
        try:
            return _semver(value["version"])
        except ValueError:
            # Read only by a selector that compares it, which then cannot be judged.
            return None
    return None


def _qualified(name: str, driver: str) -> tuple[str, str]:
    """An attribute or capacity name's domain and name: unqualified names are the driver's."""
    domain, _, short = name.rpartition("/")
    return (domain or driver), short


def cel_device(driver: str, device: Obj) -> celtypes.MapType:
    """The device as the selectors of ``driver``'s devices read it."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, short = _qualified(name, driver)
        attributes.setdefault(domain, {})[short] = _attribute(value or {})
    capacities: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, short = _qualified(name, driver)
        try:
            capacities.setdefault(domain, {})[short] = _quantity((value or {}).get("value"))
        except ValueError:
            capacities.setdefault(domain, {})[short] = None

    def cel_map(table: Mapping[str, Mapping[str, Any]]) -> celtypes.MapType:
        return celtypes.MapType(
            {
                celtypes.StringType(domain): celtypes.MapType(
                    {celtypes.StringType(k): v for k, v in values.items() if v is not None}
                )
                for domain, values in table.items()
            }
        )

    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): cel_map(attributes),
            celtypes.StringType("capacity"): cel_map(capacities),
        }
    )


class Programs:
    """Selectors compiled once each, judged against devices."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}

    def judge(self, expression: str, driver: str, device: Obj) -> bool | None:
        """Whether the selector holds for the device; None when it cannot be judged."""
        try:
            program = self._programs.get(expression)
            if program is None:
                program = self._env.program(self._env.compile(expression), functions=FUNCTIONS)
                self._programs[expression] = program
            result = program.evaluate({"device": cel_device(driver, device)})
        except Exception:  # noqa: BLE001 - any failure means: cannot be judged here
            return None
        if isinstance(result, celtypes.BoolType):
            return bool(result)
        return None
