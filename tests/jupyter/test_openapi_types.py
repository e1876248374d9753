"""The extension's TypeScript types are generated from the API's OpenAPI document.

The committed snapshot (``jupyter_ext/openapi.json``) must be the document the
controller's code defines, and ``jupyter_ext/src/openapi.ts`` must be what
openapi-typescript makes of it; ``make openapi`` regenerates both.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from devboxes_controller.web.api import contract

EXTENSION = Path(__file__).resolve().parents[2] / "jupyter_ext"
SNAPSHOT = EXTENSION / "openapi.json"
GENERATOR = EXTENSION / "node_modules" / ".bin" / "openapi-typescript"


def test_the_snapshot_is_the_contract_the_controller_defines() -> None:
    assert json.loads(SNAPSHOT.read_text()) == contract(), (
        "jupyter_ext/openapi.json no longer matches the API: run `make openapi`"
    )


@pytest.mark.skipif(
    not GENERATOR.exists(),
    reason="openapi-typescript is not installed: `make node-deps` installs the npm packages",
)
def test_the_generated_types_are_those_of_the_snapshot() -> None:
    # The npm script holds the one generator command; --check compares instead of writing.
    result = subprocess.run(
        ["npm", "run", "--silent", "openapi", "--", "--check"],
        cwd=EXTENSION,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        "jupyter_ext/src/openapi.ts is not what openapi-typescript makes of the snapshot: "
        f"run `make openapi`\n{result.stdout}\n{result.stderr}"
    )
