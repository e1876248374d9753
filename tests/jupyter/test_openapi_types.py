"""The extension's TypeScript types are generated from OpenAPI documents.

The committed snapshots must be the documents the code defines: ``jupyter_ext/openapi.json``
the controller's API, ``jupyter_ext/watch-openapi.json`` the server extension's watch
view. ``jupyter_ext/src/openapi.ts`` and ``src/watch-openapi.ts`` must be what
openapi-typescript makes of them; ``make openapi`` regenerates all four.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from devboxes_controller.web.api import contract
from devboxes_jupyter.models import watch_contract

EXTENSION = Path(__file__).resolve().parents[2] / "jupyter_ext"
SNAPSHOT = EXTENSION / "openapi.json"
WATCH_SNAPSHOT = EXTENSION / "watch-openapi.json"
GENERATOR = EXTENSION / "node_modules" / ".bin" / "openapi-typescript"


def test_the_snapshot_is_the_contract_the_controller_defines() -> None:
    assert json.loads(SNAPSHOT.read_text()) == contract(), (
        "jupyter_ext/openapi.json no longer matches the API: run `make openapi`"
    )


def test_the_watch_snapshot_is_the_view_the_extension_defines() -> None:
    assert json.loads(WATCH_SNAPSHOT.read_text()) == watch_contract(), (
        "jupyter_ext/watch-openapi.json no longer matches the watch view: run `make openapi`"
    )


@pytest.mark.skipif(
    not GENERATOR.exists(),
    reason="openapi-typescript is not installed: `make node-deps` installs the npm packages",
)
@pytest.mark.parametrize("script", ["openapi", "openapi:watch"])
def test_the_generated_types_are_those_of_the_snapshot(script: str) -> None:
    # Each npm script holds one generator command; --check compares instead of writing.
    result = subprocess.run(
        ["npm", "run", "--silent", script, "--", "--check"],
        cwd=EXTENSION,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"the types of `npm run {script}` are not what openapi-typescript makes of the snapshot: "
        f"run `make openapi`\n{result.stdout}\n{result.stderr}"
    )
