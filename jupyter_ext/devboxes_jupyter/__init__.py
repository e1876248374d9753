"""Devboxes for Jupyter: server extension, accelerator widgets and a launcher tile.

Importing this package needs no Jupyter: the base install ships the server config that
names it, so it must stay importable where jupyter-server is absent.
"""

from __future__ import annotations

import logging
from importlib.metadata import Distribution, PackageNotFoundError, distribution, version
from typing import Any

DISTRIBUTION = "devboxes"
EXTRA = "jupyter"

# Read from the metadata rather than from devboxes_sdk, whose import is too slow for the
# package that Jupyter imports at start-up.
__version__ = version(DISTRIBUTION)


def missing_requirements(package: Distribution, extra: str) -> list[str]:
    """The requirements that ``extra`` of ``package`` adds and that are not installed."""
    # Only jupyter-server calls this, and it depends on packaging.
    from packaging.requirements import Requirement

    missing = []
    for line in package.requires or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if (
            marker is None
            or marker.evaluate({"extra": ""})
            or not marker.evaluate({"extra": extra})
        ):
            continue
        try:
            distribution(requirement.name)
        except PackageNotFoundError:
            missing.append(requirement.name)
    return missing


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    # A wheel carries the server config that enables this extension whatever extras were
    # asked for; without the [jupyter] extra the extension stays off, so that installing
    # the SDK next to some other Jupyter adds no routes, kernelspecs or environment there.
    missing = missing_requirements(distribution(DISTRIBUTION), EXTRA)
    if missing:
        logging.getLogger("ServerApp").info(
            "devboxes_jupyter is off: the [%s] extra is not installed (missing %s); "
            "pip install '%s[%s]' turns it on",
            EXTRA,
            ", ".join(missing),
            DISTRIBUTION,
            EXTRA,
        )
        return []
    # Imported here so that using the widgets in a kernel never imports jupyter_server.
    from devboxes_jupyter.app import DevboxesJupyterApp

    return [{"module": "devboxes_jupyter", "app": DevboxesJupyterApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "devboxes-jupyter"}]
