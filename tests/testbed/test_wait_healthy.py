"""wait_healthy, which every started process of the testbed, the tests and the benchmarks
is waited for with: an answer, an exit and silence each give their own result."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from devboxes_testbed.process import free_port, wait_healthy

# Answers 200 only to requests that carry the header, 401 to any other.
SERVER = """
import http.server, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.headers.get("X-Key") == "k" else 401)
        self.end_headers()

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    process = subprocess.Popen([sys.executable, str(script), str(port)])
    yield process, f"http://127.0.0.1:{port}/health"
    process.kill()
    process.wait()


def test_a_200_with_the_headers_is_healthy(server: tuple[subprocess.Popen[bytes], str]) -> None:
    process, url = server
    assert wait_healthy(process, url, 30, {"X-Key": "k"}) is None


def test_any_other_answer_is_waited_out(server: tuple[subprocess.Popen[bytes], str]) -> None:
    process, url = server
    assert wait_healthy(process, url, 2) == "was not healthy within 2s"
    assert process.poll() is None


def test_an_exit_is_reported_with_its_code() -> None:
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert wait_healthy(process, f"http://127.0.0.1:{free_port()}/", 30) == "exited with code 3"
