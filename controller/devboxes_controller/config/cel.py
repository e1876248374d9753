"""Checks of the CEL device selectors a DRA profile carries.

Kubernetes evaluates a selector against every published device. A selector that reads an
attribute or capacity a device does not publish (``device.attributes['gpu.nvidia.com']
.productName`` on an AMD device) is not a non-match there but an evaluation error, and
the scheduler refuses the pod rather than skip that device. So a selector must parse, and every
such read must be guarded in the same selector by ``has()`` of the same path, e.g.
``has(device.attributes['gpu.nvidia.com'].productName) && device.attributes[
'gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'``. Only the grammar is checked
here: Kubernetes' own functions (``quantity()``, ``semver()``, ``compareTo``) are
evaluated by the apiserver, which the doctor asks in a dry run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING

from lark import Token, Tree

if TYPE_CHECKING:
    from celpy.celparser import CELParser

# Selectors are pinned in a box's snapshot annotation, which has a fixed size budget
# (settings.SNAPSHOT_MAX_BYTES): they are short and printable ASCII, as device attribute
# names and product names are.
MAX_SELECTOR_LENGTH = 512
_PRINTABLE = re.compile(r"^[ -~]*$")
# The two maps of a device whose keys differ from one device to another.
_GUARDED_MAPS = ("attributes", "capacity")


@cache
def _parser() -> CELParser:
    """The CEL grammar, built when the first selector is checked: settings without one
    never load cel-python."""
    from celpy.celparser import CELParser

    return CELParser()


def _unwrap(node: object) -> object:
    """A member expression without the single-child wrappers of the grammar."""
    while (
        isinstance(node, Tree)
        and node.data in ("member", "primary", "ident")
        and len(node.children) == 1
    ):
        node = node.children[0]
    return node


def _read(node: Tree[Token]) -> tuple[str, str, str] | None:
    """(map, domain, name) when ``node`` is ``device.<map>['<domain>'].<name>``."""
    if node.data != "member_dot" or len(node.children) != 2:
        return None
    inner, name = _unwrap(node.children[0]), node.children[1]
    if not isinstance(inner, Tree) or inner.data != "member_index" or len(inner.children) != 2:
        return None
    device_map, key = _unwrap(inner.children[0]), inner.children[1]
    if not isinstance(device_map, Tree) or device_map.data != "member_dot":
        return None
    device, map_name = _unwrap(device_map.children[0]), device_map.children[1]
    if not (isinstance(device, Token) and device == "device" and map_name in _GUARDED_MAPS):
        return None
    if not isinstance(key, Tree):
        return None
    literal = list(key.scan_values(lambda v: isinstance(v, Token)))
    if len(literal) != 1 or literal[0].type not in ("STRING_LIT", "MLSTRING_LIT"):
        return None
    return str(map_name), str(literal[0])[1:-1], str(name)


def _reads(node: Tree[Token], guarded: bool) -> Iterator[tuple[tuple[str, str, str], bool]]:
    """Every device map read in ``node``, and whether it is the argument of ``has()``."""
    if node.data == "ident_arg" and node.children and node.children[0] == "has":
        guarded = True
    found = _read(node)
    if found is not None:
        yield found, guarded
    for child in node.children:
        if isinstance(child, Tree):
            yield from _reads(child, guarded)


def selector_problem(expression: str) -> str | None:
    """Why a selector cannot be used, or None."""
    if not expression.strip():
        return "a selector must not be empty"
    if len(expression) > MAX_SELECTOR_LENGTH:
        return f"at most {MAX_SELECTOR_LENGTH} characters are allowed, got {len(expression)}"
    if not _PRINTABLE.fullmatch(expression):
        return "only printable ASCII characters are allowed in a selector"
    from celpy.celparser import CELParseError

    try:
        tree = _parser().parse(expression)
    except CELParseError as exc:
        where = " ".join(str(exc).split())
        return f"not a CEL expression: {where}"
    reads = list(_reads(tree, False))
    guards = {read for read, guarded in reads if guarded}
    for (device_map, domain, name), _ in reads:
        if (device_map, domain, name) not in guards:
            path = f"device.{device_map}['{domain}'].{name}"
            return (
                f"{path} is read without a guard: a device that does not publish it fails "
                "the scheduling of the box instead of not matching; write "
                f"has({path}) && ... instead"
            )
    return None
