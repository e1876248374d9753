"""The shipped notebooks run unmodified in a JupyterLab started as ``make up`` starts it.

Each notebook runs cell by cell in a kernel that the Lab itself started
(``POST /api/kernels``, then its websocket), so the kernel knows the controller only
through what the extension handed it: no ``DEVBOX_*`` variable is set for the Lab.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from devboxes_testbed.controller import Controller
from labserver import KernelChannels, Lab, running_lab

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.fixture(scope="module")
def lab(controller: Controller, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("lab"), controller.url, controller.token) as lab:
        yield lab


@pytest.mark.parametrize("notebook", ["quickstart.ipynb", "widgets-tour.ipynb"])
def test_notebook_runs_in_a_lab_kernel(notebook: str, lab: Lab, controller: Controller) -> None:
    book = json.loads((NOTEBOOKS / notebook).read_text())
    output = ""
    with KernelChannels.start(lab, "python3") as kernel:
        for cell in book["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            execution = kernel.execute(source, timeout=600)
            assert not execution.errors, f"{source!r} failed: {execution.errors}"
            assert execution.status == "ok", source
            output += execution.stdout + "".join(execution.results)
    assert "ready" in output
    assert f"Client(url='{controller.url}')" in output or notebook != "quickstart.ipynb"


def test_kernel_environment_holds_a_token_file_not_the_token(
    lab: Lab, controller: Controller
) -> None:
    with KernelChannels.start(lab, "python3") as kernel:
        execution = kernel.execute(
            "import os\n"
            "print({k: v for k, v in os.environ.items() if k.startswith('DEVBOX_')})\n"
            "from devboxes_sdk import Client\n"
            "print(Client().whoami().user)"
        )
    assert execution.status == "ok", execution.errors
    assert "DEVBOX_TOKEN_FILE" in execution.stdout
    assert f"'DEVBOX_URL': '{controller.url}'" in execution.stdout
    assert controller.token not in execution.stdout
