"""The example notebooks run unmodified against the real controller."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.parametrize("notebook", ["quickstart.ipynb", "widgets-tour.ipynb"])
def test_notebook_runs_top_to_bottom(
    notebook: str,
    controller_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for key, value in controller_env.items():
        monkeypatch.setenv(key, value)
    # nbformat has no type hints; strict configurations flag the call.
    book = nbformat.read(NOTEBOOKS / notebook, as_version=4)  # type: ignore[no-untyped-call, unused-ignore]
    client = NotebookClient(
        book,
        kernel_name="python3",
        timeout=600,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    outputs = [
        output
        for cell in book.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    ]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    text = "".join(output.get("text", "") for output in outputs)
    assert "ready" in text
