"""The Devboxes GPU controller: API, reconciler and dashboard."""
