"""The server extension switches itself on only where the [jupyter] extra is installed.

The shipped server config enables it in every Jupyter of the environment, so the check
reads the installed distribution's own requirements; tests/release/test_wheel.py checks
a fresh virtualenv with the base install and a jupyter-server of other origin.
"""

from __future__ import annotations

from importlib.metadata import PathDistribution
from pathlib import Path

import devboxes_jupyter
import pytest
from devboxes_jupyter import missing_requirements
from devboxes_jupyter.app import DevboxesJupyterApp


def _distribution(tmp_path: Path, *requires: str) -> PathDistribution:
    info = tmp_path / "example-1.0.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", "Name: example", "Version: 1.0"]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    return PathDistribution(info)


def test_only_the_extras_own_absent_requirements_count(tmp_path: Path) -> None:
    package = _distribution(
        tmp_path,
        "requests>=2",
        "devboxes-absent-base-package",
        'devboxes-absent-other-package; extra == "controller"',
        'jupyter-server>=2; extra == "jupyter"',
        'devboxes-absent-widgets>=1; extra == "jupyter"',
        "devboxes-absent-lab; extra == 'jupyter' and python_version >= '3'",
    )
    assert missing_requirements(package, "jupyter") == [
        "devboxes-absent-widgets",
        "devboxes-absent-lab",
    ]


def test_an_installed_extra_misses_nothing(tmp_path: Path) -> None:
    package = _distribution(
        tmp_path, 'jupyter-server>=2; extra == "jupyter"', 'ipywidgets; extra == "jupyter"'
    )
    assert missing_requirements(package, "jupyter") == []


def test_with_the_extra_installed_the_extension_point_is_offered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # This virtualenv is installed with [jupyter] (make venv).
    assert devboxes_jupyter._jupyter_server_extension_points() == [
        {"module": "devboxes_jupyter", "app": DevboxesJupyterApp}
    ]
    assert "devboxes_jupyter is off" not in caplog.text
