"""The HTTP face: the ASGI app, the ``/api/v1`` routes, the dashboard, the agents' route,
who may call them, and the write pool that keeps a slow apiserver off the read path."""
