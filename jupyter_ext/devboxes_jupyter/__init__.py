"""Devboxes for Jupyter: server extension, accelerator widgets and a launcher tile."""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    # Imported here so that using the widgets in a kernel never imports jupyter_server.
    from devboxes_jupyter.app import DevboxesJupyterApp

    return [{"module": "devboxes_jupyter", "app": DevboxesJupyterApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "devboxes-jupyter"}]
