"""The release: the sdist and wheel built as CI builds them, checked by twine, and installed
into fresh virtualenvs away from this source tree, where each install must work.

Every install names the built wheel by its path, so pip can never take a same-named project
from the index instead; the dependencies come from the index through pip's usual cache.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.release

REPO = Path(__file__).resolve().parents[2]
# The project's one version string; the build reads the Python version from it.
VERSION = json.loads((REPO / "jupyter_ext" / "package.json").read_text())["version"]
SERVER_CONFIG = Path("etc/jupyter/jupyter_server_config.d/devboxes_jupyter.json")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Builds and installs download from the package index. Below pytest's 600 s limit, so that
# a stuck step fails with its own output.
TIMEOUT = 540
# What jupyter-server asks the package for, with the server's log on stderr.
EXTENSION_POINTS = (
    "import logging, devboxes_jupyter; logging.basicConfig(level=logging.INFO);"
    "print(devboxes_jupyter._jupyter_server_extension_points())"
)


def run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """`python -m build`: the sdist, then the wheel built from that sdist alone.

    Both take the committed labextension as it is: an npm that fails if called stands
    first on PATH, as if the build machine had no Node.js.
    """
    out = tmp_path_factory.mktemp("dist")
    no_node = tmp_path_factory.mktemp("no-node")
    for tool in ("npm", "node", "jlpm"):
        (no_node / tool).write_text(f"#!/bin/sh\necho '{tool} must not run' >&2\nexit 1\n")
        (no_node / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{no_node}{os.pathsep}{os.environ['PATH']}"}
    run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], cwd=out, env=env)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Dist(wheel, sdist)


@dataclass(frozen=True)
class Venv:
    root: Path
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A command of the virtualenv, run from outside any source tree."""
        return run([str(self.root / "bin" / args[0]), *args[1:]], cwd=self.root, env=self.env)

    def stdout(self, *args: str) -> str:
        return ANSI.sub("", self.run(*args).stdout).strip()

    def python(self, code: str) -> str:
        return self.stdout("python", "-c", code)

    def server_extensions(self) -> str:
        """What `jupyter server extension list` says about this virtualenv's own config."""
        listing = self.stdout("jupyter", "server", "extension", "list")
        parts = re.split(r"^Config dir: (.*)$", listing, flags=re.MULTILINE)
        sections = dict(zip(parts[1::2], parts[2::2], strict=True))
        return sections.get(str(self.root / "etc" / "jupyter"), "")

    def labextensions(self) -> str:
        # `jupyter labextension list` reports on stderr.
        result = self.run("jupyter", "labextension", "list")
        return ANSI.sub("", result.stdout + result.stderr)

    def install(self, *requirements: str) -> None:
        # This run's own pip serves the fresh interpreter: no pip bootstrap per virtualenv,
        # and one pip version whose cache every run shares.
        python = str(self.root / "bin" / "python")
        pip = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet"]
        run([*pip, *requirements], cwd=self.root, env=self.env)


@pytest.fixture
def venv(tmp_path: Path) -> Venv:
    """An empty virtualenv that sees nothing of this checkout."""
    root = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=tmp_path)
    inherited = {
        key: value
        for key, value in os.environ.items()
        # Nothing of this checkout or of the test run's own virtualenv may leak in.
        if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"} and not key.startswith("JUPYTER")
    }
    env = {
        **inherited,
        "PATH": f"{root / 'bin'}{os.pathsep}{os.defpath}",
        "PYTHONNOUSERSITE": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # The user's own Jupyter config and data stay out of the listings.
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),
    }
    fresh = Venv(root, env)
    search_path = json.loads(fresh.python("import json, sys; print(json.dumps(sys.path))"))
    assert not [entry for entry in search_path if entry and Path(entry).is_relative_to(REPO)]
    return fresh


def test_sdist_and_wheel_carry_the_one_version_and_pass_twine(dist: Dist) -> None:
    assert dist.wheel.name == f"devboxes-{VERSION}-py3-none-any.whl"
    assert dist.sdist.name == f"devboxes-{VERSION}.tar.gz"
    checked = run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist.sdist), str(dist.wheel)],
        cwd=dist.wheel.parent,
    ).stdout
    assert checked.count("PASSED") == 2, checked
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = set(wheel.namelist())
    data = f"devboxes-{VERSION}.data/data"
    assert f"{data}/{SERVER_CONFIG}" in names
    assert f"{data}/share/jupyter/labextensions/devboxes-jupyter/package.json" in names
    assert f"{data}/share/jupyter/labextensions/devboxes-jupyter/install.json" in names
    assert "devboxes_controller/web/static/dashboard.html" in names
    with tarfile.open(dist.sdist) as sdist:
        # Without it the wheel built from the sdist would have no version.
        assert f"devboxes-{VERSION}/jupyter_ext/package.json" in sdist.getnames()


def test_base_install_works_and_needs_no_jupyter(dist: Dist, venv: Venv) -> None:
    venv.install(str(dist.wheel))
    assert venv.stdout("devbox", "--version") == f"devbox {VERSION}"
    imported = venv.python(
        "import devboxes_sdk; print(devboxes_sdk.__version__, devboxes_sdk.__file__)"
    )
    version, location = imported.split(" ", 1)
    assert version == VERSION
    assert Path(location).is_relative_to(venv.root), "imported from outside the fresh venv"
    # The server config ships with every install (a wheel cannot leave files to an extra);
    # without Jupyter nothing reads it, and the package it names still imports cleanly.
    assert (venv.root / SERVER_CONFIG).is_file()
    assert not (venv.root / "bin" / "jupyter").exists()
    assert (
        venv.python("import importlib.util; print(importlib.util.find_spec('jupyter_server'))")
        == "None"
    )
    assert venv.python("import devboxes_jupyter; print(devboxes_jupyter.__version__)") == VERSION


def test_jupyter_server_of_other_origin_then_the_extras(dist: Dist, venv: Venv) -> None:

    # A Jupyter server that came from elsewhere, next to the base install: the shipped
    # config names the extension, which stays off without the [jupyter] extra and says so.
    venv.install(str(dist.wheel), "jupyter-server")
    servers = venv.server_extensions()
    assert "devboxes_jupyter enabled" in servers, servers
    assert f"devboxes_jupyter {VERSION} OK" in servers, servers
    off = venv.run("python", "-c", EXTENSION_POINTS)
    assert off.stdout.strip() == "[]"
    assert "devboxes_jupyter is off: the [jupyter] extra is not installed" in off.stderr

    venv.install(f"{dist.wheel}[controller,jupyter]")
    assert venv.stdout("devbox", "--version") == f"devbox {VERSION}"
    usage = venv.stdout("devboxes-controller", "--help")
    assert "serve" in usage
    assert "check-config" in usage
    assert (
        venv.python(
            "from importlib.resources import files;"
            "print((files('devboxes_controller.web') / 'static' / 'dashboard.html').is_file())"
        )
        == "True"
    )

    servers = venv.server_extensions()
    assert "devboxes_jupyter enabled" in servers, servers
    assert f"devboxes_jupyter {VERSION} OK" in servers, servers
    on = venv.run("python", "-c", EXTENSION_POINTS)
    assert "DevboxesJupyterApp" in on.stdout
    assert "devboxes_jupyter is off" not in on.stderr
    labextensions = venv.labextensions()
    # The prebuilt labextension must carry the same version as the Python package.
    assert f"devboxes-jupyter v{VERSION} enabled OK (python, devboxes)" in labextensions, (
        labextensions
    )


def test_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((REPO / "charts" / "devboxes" / "Chart.yaml").read_text())
    assert chart["appVersion"] == VERSION
