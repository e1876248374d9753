"""Typed Python SDK for the Devboxes API."""
