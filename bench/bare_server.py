"""The floor under the controller's read routes: one Python process serving one fixed box
answer, with no authentication, store or FastAPI, over the same uvicorn protocol, event
loop and connection limits as the controller. The load bench loads it beside the
controller, so that a rate is read against what this machine's one process can serve.

    .venv/bin/python bench/bare_server.py PORT
"""

from __future__ import annotations

import hashlib
import json
import sys

import uvicorn
from devboxes_controller.config.connections import ConnectionSettings
from devboxes_controller.web.connections import server_options
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# About the size of a running box's get answer.
ANSWER = json.dumps(
    {"name": "load-00000", "state": "ready", "preset": "small", "padding": "x" * 700}
).encode()
ETAG = f'"{hashlib.blake2b(ANSWER, digest_size=12).hexdigest()}"'


async def get_box(_request: Request) -> Response:
    return Response(ANSWER, media_type="application/json", headers={"ETag": ETAG})


def main() -> int:
    app = Starlette(routes=[Route("/api/v1/devboxes/{name}", get_box)])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_config=None,
        access_log=False,
        lifespan="off",
        **server_options(ConnectionSettings()),
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
