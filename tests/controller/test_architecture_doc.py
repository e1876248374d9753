"""docs/architecture.md names every module of the controller in its tables, and names
none that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import devboxes_controller

ROOT = Path(devboxes_controller.__file__).resolve().parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
SECTION = "### `devboxes_controller`"
# A module named in a table's first cell: `web.app`, `web.identity.oidc`, `__main__`.
NAMED = re.compile(r"`([A-Za-z_][\w.]*)`")


def modules(root: Path = ROOT) -> set[str]:
    """Every module of the package, dotted from the package, packages' ``__init__`` aside."""
    return {
        ".".join(path.relative_to(root).with_suffix("").parts)
        for path in root.rglob("*.py")
        if path.name != "__init__.py"
    }


def tabled(doc: str) -> set[str]:
    """The modules the rows of the controller section's tables name in their first cell."""
    section = doc.split(SECTION, 1)[1].split("\n### ", 1)[0]
    named: set[str] = set()
    for line in section.splitlines():
        if line.startswith("|"):
            first_cell = line.split("|")[1]
            named.update(NAMED.findall(first_cell))
    return named


def test_the_module_map_names_every_module_and_only_those() -> None:
    present = modules()
    named = tabled(DOC.read_text())
    missing = ", ".join(sorted(present - named))
    stale = ", ".join(sorted(named - present))
    assert not missing, f"docs/architecture.md names no row for: {missing}"
    assert not stale, f"docs/architecture.md has rows for modules that do not exist: {stale}"


def test_a_missing_module_and_a_stale_row_are_both_caught(tmp_path: Path) -> None:
    for module in ("__main__", "web/app", "web/identity/oidc"):
        path = tmp_path / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (tmp_path / "web" / "__init__.py").write_text("")
    doc = (
        f"{SECTION}\n\n| Module | Job |\n|---|---|\n| `__main__` | Wires. |\n"
        "| `web.app`, `web.gone` | The app; see `web.identity.oidc`. |\n\n### `next`\n"
        "| `web.identity.oidc` | Outside the section. |\n"
    )
    present = modules(tmp_path)
    named = tabled(doc)
    assert present == {"__main__", "web.app", "web.identity.oidc"}
    assert present - named == {"web.identity.oidc"}
    assert named - present == {"web.gone"}
