"""The shipped notebooks run unmodified in a JupyterLab started as ``make up`` starts it.

Each notebook runs cell by cell in a kernel that the Lab itself started
(``POST /api/kernels``, then its websocket), so the kernel knows the controller only
through what the extension handed it: no ``DEVBOX_*`` variable is set for the Lab. They
run against a controller whose one GPU profile has a single device, either free or held
by another box, and must end cleanly and leave nothing behind either way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from devboxes_testbed.controller import Controller
from labserver import KernelChannels, Lab, running_lab
from support import Api, DevicePool, StartController, wait_for

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# Long enough for the waiting box to be given its place in line, short for a test.
WAIT_WHILE_HELD = 20
DELETED = re.compile(r"devbox '((?:quickstart|tour)-[0-9a-f]{6})' deleted with its home volume")


@pytest.fixture(scope="module")
def lab(controller: Controller, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("lab"), controller.url, controller.token) as lab:
        yield lab


@pytest.fixture
def pool_lab(
    start_controller: StartController, namespace: str, pool: DevicePool, tmp_path: Path
) -> Iterator[tuple[Api, Lab]]:
    """A Lab on a controller whose default and only GPU profile is the pool's one device."""
    controller = start_controller(pool.settings(namespace))
    with running_lab(tmp_path, controller.url, controller.token) as lab:
        yield Api(controller), lab


def run_notebook(lab: Lab, notebook: str, parameters: str | None = None) -> str:
    """Everything the notebook's code cells print and show; fails on the first cell that
    fails or writes a traceback. ``parameters`` run right after the cell tagged
    ``parameters``, as papermill injects them."""
    book = json.loads((NOTEBOOKS / notebook).read_text())
    tagged = [c for c in book["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, f"{notebook} has {len(tagged)} cells tagged 'parameters'"
    output = ""
    with KernelChannels.start(lab, "python3") as kernel:
        for cell in book["cells"]:
            if cell["cell_type"] != "code":
                continue
            sources = ["".join(cell["source"])]
            if cell is tagged[0] and parameters is not None:
                sources.append(parameters)
            for source in sources:
                execution = kernel.execute(source, timeout=600)
                assert not execution.errors, f"{source!r} failed: {execution.errors}"
                assert execution.status == "ok", source
                assert "Traceback" not in execution.stdout, execution.stdout
                output += execution.stdout + "".join(execution.results)
    return output


def box_names(api: Api) -> set[str]:
    return {box["name"] for box in api.call("GET", "/devboxes")["items"]}


def assert_nothing_left(api: Api, made: str, others: set[str]) -> None:
    """Neither the box the notebook made nor its home volume is left."""

    def only_others_listed() -> bool:
        """the controller lists no box but the others"""
        return box_names(api) == others

    wait_for(only_others_listed)
    volumes = {volume["name"] for volume in api.call("GET", "/volumes")["items"]}
    assert made not in volumes


def made_box(output: str) -> str:
    """The box the notebook made, from the message of its deletion."""
    names = DELETED.findall(output)
    assert len(names) == 1, f"the notebook did not say it deleted the one box it made: {output}"
    return str(names[0])


@pytest.mark.parametrize("notebook", ["quickstart.ipynb", "widgets-tour.ipynb"])
def test_notebook_gets_a_free_device_and_deletes_its_box(
    notebook: str, pool_lab: tuple[Api, Lab]
) -> None:
    api, lab = pool_lab
    output = run_notebook(lab, notebook)
    name = made_box(output)
    assert "Giving up" not in output
    ready = {
        "quickstart.ipynb": f"stopped — pinned profile still {DevicePool.PROFILE}",
        "widgets-tour.ipynb": "ready ssh ",
    }
    assert ready[notebook] in output
    if notebook == "quickstart.ipynb":
        assert f"Client(url='{api.controller.url}')" in output
    assert_nothing_left(api, name, set())


@pytest.mark.parametrize("notebook", ["quickstart.ipynb", "widgets-tour.ipynb"])
def test_notebook_gives_up_in_line_and_deletes_its_box(
    notebook: str, pool_lab: tuple[Api, Lab]
) -> None:
    api, lab = pool_lab
    api.created("holder", gpu={"profile": DevicePool.PROFILE})
    api.wait_ready("holder")
    output = run_notebook(lab, notebook, f"WAIT_SECONDS = {WAIT_WHILE_HELD}")
    name = made_box(output)
    in_line = f"Waiting for a free {DevicePool.DISPLAY}: 0 of 1 free, 1st in line"
    timed_out = f"Giving up: {name} was not ready within {WAIT_WHILE_HELD}s (starting — {in_line})"
    assert timed_out in output
    if notebook == "quickstart.ipynb":
        # Its progress, printed while it waits; the launcher shows the same in its form.
        assert f"starting — {in_line}\n{timed_out}" in output
    assert_nothing_left(api, name, {"holder"})
    assert api.box("holder")["state"] == "ready"


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
