"""Every generated file of the project is what its source makes of it now.

`make generated` writes them all afresh. Each row of GENERATED names a committed file,
what it is made from, and how it is compared: a file made by Python with what the code
makes now, a file made by an npm script with that script's own ``--check``. A stale file
fails naming itself, its source and that command.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from devboxes_controller.config.chart_schema import text as chart_schema_text
from devboxes_controller.web.api import contract
from devboxes_jupyter.models import watch_contract

REPO = Path(__file__).resolve().parent.parent
EXTENSION = REPO / "jupyter_ext"
NODE_MODULES = EXTENSION / "node_modules"
COMMAND = "make generated"

# Why the committed file at the path is not what its source makes, or None when it is.
Check = Callable[[Path], str | None]


def same_json(make: Callable[[], dict[str, Any]]) -> Check:
    """The file holds the JSON document ``make`` returns (compared as data, not as text)."""

    def check(path: Path) -> str | None:
        return None if json.loads(path.read_text()) == make() else "its document differs"

    return check


def same_text(make: Callable[[], str]) -> Check:
    def check(path: Path) -> str | None:
        return None if path.read_text() == make() else "its text differs"

    return check


def npm_check(script: str) -> Check:
    """The extension's npm script, which holds one generator command, compares the file
    with what it would write when given ``--check``."""

    def check(path: Path) -> str | None:
        result = subprocess.run(
            ["npm", "run", "--silent", script, "--", "--check"],
            cwd=EXTENSION,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return None if result.returncode == 0 else f"{result.stdout}\n{result.stderr}"

    return check


@dataclass(frozen=True)
class Generated:
    path: str
    source: str
    check: Check
    # The npm package the check runs, when it needs Node.js.
    tool: Path | None = None

    def __str__(self) -> str:
        return self.path


GENERATED = [
    Generated(
        "jupyter_ext/openapi.json",
        "the controller's API (devboxes_controller.web.api.contract)",
        same_json(contract),
    ),
    Generated(
        "jupyter_ext/watch-openapi.json",
        "the server extension's watch view (devboxes_jupyter.models.watch_contract)",
        same_json(watch_contract),
    ),
    Generated(
        "jupyter_ext/src/openapi.ts",
        "jupyter_ext/openapi.json through openapi-typescript (npm run openapi)",
        npm_check("openapi"),
        NODE_MODULES / ".bin" / "openapi-typescript",
    ),
    Generated(
        "jupyter_ext/src/watch-openapi.ts",
        "jupyter_ext/watch-openapi.json through openapi-typescript (npm run openapi:watch)",
        npm_check("openapi:watch"),
        NODE_MODULES / ".bin" / "openapi-typescript",
    ),
    Generated(
        "controller/devboxes_controller/web/static/labels.js",
        "jupyter_ext/src/words.ts with its types taken out (npm run labels)",
        npm_check("labels"),
        NODE_MODULES / "typescript",
    ),
    Generated(
        "charts/devboxes/values.schema.json",
        "the controller's settings models (devboxes_controller.config.chart_schema.text)",
        same_text(chart_schema_text),
    ),
]


@pytest.mark.parametrize("generated", GENERATED, ids=str)
def test_the_committed_file_is_what_its_source_makes(generated: Generated) -> None:
    if generated.tool is not None and (shutil.which("node") is None or not generated.tool.exists()):
        pytest.skip("node and the npm packages are needed: `make node-deps` installs them")
    why = generated.check(REPO / generated.path)
    assert why is None, (
        f"{generated.path} is not what {generated.source} makes: run `{COMMAND}`\n{why}"
    )
