"""Devboxes for Jupyter: server extension, accelerator widgets and a launcher tile.

Importing this package needs no Jupyter: the base install ships the server config that
names it, so it must stay importable where jupyter-server is absent.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

# Read from the metadata rather than from devboxes_sdk, whose import is too slow for the
# package that Jupyter imports at start-up.
__version__ = version("devboxes")


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    # Imported here so that using the widgets in a kernel never imports jupyter_server.
    from devboxes_jupyter.app import DevboxesJupyterApp

    return [{"module": "devboxes_jupyter", "app": DevboxesJupyterApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "devboxes-jupyter"}]
