"""A webhook receiver on loopback, for the tests of the controller's stop-warning webhook."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """A webhook receiver on loopback that answers 503 to the first ``refusals`` posts."""

    def __init__(self, refusals: int) -> None:
        self.posts: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.taken = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.posts.append((dict(self.headers), body))
                refused = len(receiver.posts) <= refusals
                if not refused:
                    receiver.taken += 1
                self.send_response(503 if refused else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
