"""The controller's subpackages are layers: a module imports only from its own subpackage
and from the layers below it, never from a layer above or from a peer. Only ``k8s`` talks
to the Kubernetes client; every other layer goes through it, so every write is counted.

Read from the source with ``ast``, so an import inside a function counts as much as one at
the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import devboxes_controller
import pytest

PACKAGE = "devboxes_controller"
ROOT = Path(devboxes_controller.__file__).resolve().parent

# Top first. Packages on one floor are peers and may not import each other.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"web"}),
    frozenset({"control"}),
    frozenset({"state"}),
    frozenset({"placement"}),
    frozenset({"box"}),
    frozenset({"config", "k8s"}),
)
# The one layer that may import the Kubernetes client.
CLIENT_LAYER = "k8s"
FLOOR = {package: height for height, floor in enumerate(reversed(FLOORS)) for package in floor}


def _module(path: Path, root: Path) -> tuple[str, ...]:
    """The dotted name of a source file, as its parts."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return (PACKAGE, *parts)


def _imported(
    path: Path, root: Path, package_name: str = PACKAGE
) -> list[tuple[int, tuple[str, ...]]]:
    """Every name under ``package_name`` that the file imports, with its line."""
    module = _module(path, root)
    package = module if path.name == "__init__.py" else module[:-1]
    found: list[tuple[int, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, tuple(alias.name.split("."))) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = base + tuple(node.module.split(".") if node.module else ())
            else:
                target = tuple((node.module or "").split("."))
            # ``from package import name`` may name a subpackage: count each name.
            found += [(node.lineno, (*target, alias.name)) for alias in node.names]
    return [(line, target) for line, target in found if target[0] == package_name]


def _layer(dotted: tuple[str, ...]) -> str | None:
    """The subpackage a module belongs to; None at the top of the package."""
    return dotted[1] if len(dotted) > 1 and dotted[1] in FLOOR else None


def violations(root: Path = ROOT) -> list[str]:
    """Each import that points up or sideways, as ``file:line: what``."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        layer = _layer(_module(path, root))
        for line, target in _imported(path, root):
            into = _layer(target)
            where = f"{path.relative_to(root)}:{line}: {layer or 'the top'} imports"
            if layer is None:
                # ``__main__`` wires every layer together; the package itself imports none.
                if path.name == "__init__.py" and into is not None:
                    problems.append(f"{where} {into}")
            elif into is None:
                if target[1:2] == ("__main__",):
                    problems.append(f"{where} the entry point")
            elif into != layer and FLOOR[into] >= FLOOR[layer]:
                side = "its peer" if FLOOR[into] == FLOOR[layer] else "the layer above"
                problems.append(f"{where} {side} {into}")
    return problems


def client_importers(root: Path = ROOT) -> list[str]:
    """Each import of the Kubernetes client outside ``CLIENT_LAYER``, as ``file:line``."""
    return [
        f"{path.relative_to(root)}:{line}"
        for path in sorted(root.rglob("*.py"))
        if _layer(_module(path, root)) != CLIENT_LAYER
        for line, _ in _imported(path, root, "kubernetes")
    ]


def test_every_module_belongs_to_a_layer() -> None:
    loose = [
        path.name for path in ROOT.glob("*.py") if path.name not in {"__init__.py", "__main__.py"}
    ]
    assert loose == []
    assert {path.name for path in ROOT.iterdir() if (path / "__init__.py").is_file()} == set(FLOOR)


def test_imports_point_down_only() -> None:
    assert violations() == []


def test_only_k8s_imports_the_kubernetes_client() -> None:
    assert client_importers() == []


@pytest.mark.parametrize(
    ("module", "source", "caught"),
    [
        ("control/writer", "from kubernetes import client\n", True),
        ("state/cache", "import kubernetes.watch\n", True),
        ("web/app", "def f():\n    from kubernetes.client import ApiException\n", True),
        ("k8s/kube", "from kubernetes import client, config\n", False),
        ("box/render", "from ..k8s import kube\n", False),
    ],
)
def test_a_client_import_outside_k8s_is_caught(
    tmp_path: Path, module: str, source: str, caught: bool
) -> None:
    path = tmp_path / f"{module}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    assert client_importers(tmp_path) == (
        [f"{module}.py:{source.count(chr(10))}"] if caught else []
    )


@pytest.mark.parametrize(
    ("module", "source", "complaint"),
    [
        ("box/render", "from ..web.app import create_app\n", "box imports the layer above web"),
        ("box/render", "from .. import control\n", "box imports the layer above control"),
        (
            "box/render",
            "from devboxes_controller.state import store\n",
            "box imports the layer above state",
        ),
        (
            "box/render",
            "import devboxes_controller.placement.capacity\n",
            "box imports the layer above placement",
        ),
        ("box/render", "from ..__main__ import main\n", "box imports the entry point"),
        ("k8s/kube", "from ..config.settings import Settings\n", "k8s imports its peer config"),
        ("__init__", "from . import web\n", "the top imports web"),
        ("box/render", "from ..k8s import kube\n", None),
        ("box/render", "from . import template\n", None),
        ("web/app", "from ..box.render import render_box\n", None),
    ],
)
def test_an_import_that_points_up_or_sideways_is_caught(
    tmp_path: Path, module: str, source: str, complaint: str | None
) -> None:
    path = tmp_path / f"{module}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    found = violations(tmp_path)
    if complaint is None:
        assert found == []
    else:
        assert len(found) == 1
        assert complaint in found[0]
