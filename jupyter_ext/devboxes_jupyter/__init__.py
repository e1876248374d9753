"""Devboxes for Jupyter: server extension, accelerator widgets and a launcher tile."""
