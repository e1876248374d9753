"""What the activity agent sees, from real processes on this machine: the GPU sampler run
with stub vendor tools on its PATH, a real sshd with real SSH sessions, and a real
Jupyter server with a kernel kept busy through jupyter_client."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests
from devboxes_testbed.stack import lab_environment
from sshd import loopback_sshd, make_key, need_sshd
from support import wait_for

REPO = Path(__file__).resolve().parents[2]
AGENT_PATH = REPO / "workspace" / "devbox-activity-agent"
SAMPLER = REPO / "workspace" / "devbox-gpu-sampler"
# What the sampler needs besides the vendor tools; the machine's own vendor tools, if it
# has any, stay out of the way.
BASE_TOOLS = ("sh", "date", "mv", "sleep", "timeout", "cat")


def load_agent() -> ModuleType:
    loader = SourceFileLoader("devbox_activity_agent", str(AGENT_PATH))
    spec = spec_from_loader(loader.name, loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


agent = load_agent()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --- GPU utilization: sampler -> files -> agent ------------------------------------------


class Box:
    """The main container's side: a PATH of basic tools plus stub vendor tools."""

    def __init__(self, tmp: Path) -> None:
        self.bin = tmp / "bin"
        self.bin.mkdir()
        for tool in BASE_TOOLS:
            (self.bin / tool).symlink_to(
                subprocess.check_output(["which", tool], text=True).strip()
            )
        self.samples = tmp / "samples"
        self.samples.mkdir()

    def tool(self, name: str, output: str, status: int = 0) -> None:
        """A vendor tool that prints ``output`` (read from a file at each run) and exits
        with ``status``."""
        (self.bin / f"{name}.out").write_text(output)
        stub = self.bin / name
        stub.write_text(f'#!/bin/sh\ncat "{self.bin / f"{name}.out"}"\nexit {status}\n')
        stub.chmod(0o755)

    @contextlib.contextmanager
    def sampler(self) -> Iterator[None]:
        """The sampler, one sample a second, while the block runs."""
        with (self.samples.parent / "sampler.log").open("ab") as log:
            process = subprocess.Popen(
                ["sh", str(SAMPLER), str(self.samples)],
                env={"PATH": str(self.bin), "DEVBOX_GPU_SAMPLE_SECONDS": "1"},
                stderr=log,
            )
            try:
                yield
            finally:
                process.terminate()
                process.wait(10)

    def first_sample(self) -> str:
        """Runs the sampler until its first sample is written; that sample."""
        with self.sampler():
            path = self.samples / "sample.0"
            wait_for(path.exists, timeout=60)
            return path.read_text()

    def utilization(self, within: float = 30) -> float | None:
        value: float | None = agent.gpu_utilization(self.samples, within, time.time())
        return value


@pytest.fixture
def gpu_box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def taken(sample: Path) -> int:
    return int(sample.read_text().split()[0])


def test_the_busiest_gpu_of_the_samples_within_the_report_window(gpu_box: Box) -> None:
    gpu_box.tool("nvidia-smi", "7\n63\n")
    before = int(time.time())

    def quiet_sample() -> Path | None:
        for sample in gpu_box.samples.glob("sample.*"):
            if sample.read_text().partition("\n")[2] == "2\n1\n":
                return sample
        return None

    with gpu_box.sampler():
        wait_for((gpu_box.samples / "sample.0").exists, timeout=60)
        gpu_box.tool("nvidia-smi", "2\n1\n")
        quiet = wait_for(quiet_sample, timeout=60)
    after = int(time.time())
    header, _, output = (gpu_box.samples / "sample.0").read_text().partition("\n")
    assert header.split()[1] == "nvidia-smi"
    assert before <= taken(gpu_box.samples / "sample.0") <= after
    assert output == "7\n63\n"

    # The sampler sleeps a second between samples, so no other sample is within half a
    # second of the quiet one.
    last = taken(quiet)
    assert agent.gpu_utilization(gpu_box.samples, 0.5, last) == 2.0
    # A report covers its whole interval: a busy moment in it counts.
    assert agent.gpu_utilization(gpu_box.samples, 30, last) == 63.0
    # Samples the sampler stopped writing long ago say nothing.
    assert agent.gpu_utilization(gpu_box.samples, 30, last + 3600) is None


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        pytest.param({}, None, id="no vendor tool"),
        pytest.param({"nvidia-smi": ("[N/A]\n", 0)}, None, id="MIG instance without a reading"),
        pytest.param({"nvidia-smi": ("NVIDIA-SMI has failed\n", 9)}, None, id="failing tool"),
        pytest.param({"nvidia-smi": ("350\n", 0)}, 100.0, id="clamped"),
        pytest.param({"nvidia-smi": ("nan\ninf\n4\n", 0)}, 4.0, id="no number is no reading"),
        pytest.param(
            {
                "nvidia-smi": ("NVIDIA-SMI has failed\n", 9),
                "rocm-smi": (json.dumps({"card0": {"GPU use (%)": "41"}}), 0),
            },
            41.0,
            id="rocm-smi after a failing nvidia-smi",
        ),
        pytest.param(
            {
                "amd-smi": (
                    json.dumps(
                        [
                            {"gpu": 0, "usage": {"gfx_activity": {"value": 12, "unit": "%"}}},
                            {"gpu": 1, "usage": {"gfx_activity": {"value": 88, "unit": "%"}}},
                        ]
                    ),
                    0,
                )
            },
            88.0,
            id="amd-smi",
        ),
    ],
)
def test_vendor_tools(gpu_box: Box, tools: dict[str, tuple[str, int]], expected: Any) -> None:
    for name, (output, status) in tools.items():
        gpu_box.tool(name, output, status)
    sample = gpu_box.first_sample()
    if not tools:
        assert sample.split()[1:] == ["none"]
    assert gpu_box.utilization() == expected


def test_unreadable_samples_are_unknown_never_zero(gpu_box: Box) -> None:
    now = int(time.time())
    (gpu_box.samples / "sample.0").write_text(f"{now} some-other-tool\n0\n")
    (gpu_box.samples / "sample.1").write_text("garbage\n0\n")
    (gpu_box.samples / "sample.2").write_text("soon nvidia-smi\n0\n")
    (gpu_box.samples / ".sample.tmp").write_text(f"{now} nvidia-smi\n0\n")
    assert gpu_box.utilization() is None
    assert agent.gpu_utilization(None, 30, now) is None
    assert agent.gpu_utilization(gpu_box.samples / "missing", 30, now) is None
    (gpu_box.samples / "sample.3").write_text(f"{now} nvidia-smi\n0\n")
    assert gpu_box.utilization() == 0.0


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {}, "usage: devbox-gpu-sampler DIR"),
        (["/nonexistent"], {}, "/nonexistent is not a writable directory"),
        (["SAMPLES"], {"DEVBOX_GPU_SAMPLE_SECONDS": "0"}, "is not a whole number of seconds"),
        (["SAMPLES"], {"DEVBOX_GPU_SAMPLE_SECONDS": "1.5"}, "is not a whole number of seconds"),
    ],
)
def test_the_sampler_refuses_bad_arguments(
    gpu_box: Box, args: list[str], env: dict[str, str], message: str
) -> None:
    args = [str(gpu_box.samples) if a == "SAMPLES" else a for a in args]
    done = subprocess.run(
        ["sh", str(SAMPLER), *args],
        env={"PATH": str(gpu_box.bin), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert not list(gpu_box.samples.iterdir())


# --- SSH sessions ------------------------------------------------------------------------

# /proc/net/tcp and tcp6 as the kernel writes them: local and remote address:port in hex,
# then the state (01 established, 0A listening, 06 time-wait).
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:08AE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:08AE 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 0100007F:D431 0100007F:08AE 01 00000000:00000000 00:00000000 00000000     0        0 3 1
   3: 0100007F:08AE 0100007F:D432 06 00000000:00000000 00:00000000 00000000     0        0 0 3
   4: 0100007F:1F90 0100007F:D433 01 00000000:00000000 00:00000000 00000000     0        0 4 1
"""
LOOPBACK6 = "00000000000000000000000001000000"
PROC_NET_TCP6 = (
    "  sl  local_address remote_address st tx_queue rx_queue tr tm->when retrnsmt uid timeout\n"
    f"   0: {LOOPBACK6}:08AE {LOOPBACK6}:E001 01 00000000:00000000 00:00000000 00000000 0 0 5\n"
)


def test_ssh_sessions_from_the_kernel_tables(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text(PROC_NET_TCP)
    assert agent.ssh_sessions(2222, tmp_path) == 1, "the server side of one IPv4 session"
    (tmp_path / "tcp6").write_text(PROC_NET_TCP6)
    assert agent.ssh_sessions(2222, tmp_path) == 2
    assert agent.ssh_sessions(8080, tmp_path) == 1
    assert agent.ssh_sessions(2222, tmp_path / "missing") == 0


def ssh_session(key: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "ssh",
            "-N",
            "-i",
            str(key),
            "-p",
            str(port),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "127.0.0.1",
        ],
        stdin=subprocess.DEVNULL,
    )


def test_real_ssh_sessions_are_counted_while_they_last(tmp_path: Path) -> None:
    need_sshd()
    key = make_key(tmp_path)
    port = free_port()
    with loopback_sshd(tmp_path / "sshd", port, key.with_suffix(".pub")):
        assert agent.ssh_sessions(port) == 0, "a listening sshd is no session"
        sessions = [ssh_session(key, port)]
        try:
            wait_for(lambda: agent.ssh_sessions(port) == 1, timeout=60)
            sessions.append(ssh_session(key, port))
            wait_for(lambda: agent.ssh_sessions(port) == 2, timeout=60)
            # Other ports' connections are not sessions of this box.
            assert agent.ssh_sessions(free_port()) == 0
        finally:
            for session in sessions:
                session.terminate()
                session.wait(10)
        wait_for(lambda: agent.ssh_sessions(port) == 0, timeout=60)


# --- busy Jupyter kernels ----------------------------------------------------------------


@contextlib.contextmanager
def jupyter_server(base: Path) -> Iterator[tuple[str, str]]:
    """A real Jupyter server on loopback; its URL and token."""
    token = secrets.token_urlsafe(16)
    port = free_port()
    (base / "root").mkdir()
    env = lab_environment(
        token,
        base / "token",
        {
            **os.environ,
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTER_CONFIG_DIR": str(base / "config"),
        },
    )
    log = (base / "server.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--ServerApp.port={port}",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port_retries=0",
            "--ServerApp.open_browser=False",
            f"--ServerApp.root_dir={base / 'root'}",
            # The tests may run as root, as in a container.
            "--allow-root",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            if process.poll() is not None:
                pytest.fail(f"jupyter server exited: {(base / 'server.log').read_text()[-2000:]}")
            with contextlib.suppress(requests.ConnectionError):
                return requests.get(f"{url}/api/status", timeout=2, headers=auth(token)).ok
            return False

        wait_for(up, timeout=120)
        yield url, token
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


def test_busy_kernels_from_a_real_jupyter_server(tmp_path: Path) -> None:
    from jupyter_client.blocking.client import BlockingKernelClient

    assert agent.busy_kernels(f"http://127.0.0.1:{free_port()}", None) == 0, "no Jupyter"
    with jupyter_server(tmp_path) as (url, token):
        kernel = requests.post(
            f"{url}/api/kernels", json={"name": "python3"}, headers=auth(token), timeout=60
        ).json()
        state_url = f"{url}/api/kernels/{kernel['id']}"

        def state() -> str:
            return str(
                requests.get(state_url, headers=auth(token), timeout=10).json()["execution_state"]
            )

        client = BlockingKernelClient(
            connection_file=str(tmp_path / "runtime" / f"kernel-{kernel['id']}.json")
        )
        client.load_connection_file()
        client.start_channels()
        try:

            def ready() -> bool:
                # Until the kernel process listens, its heartbeat looks dead.
                try:
                    client.wait_for_ready(timeout=10)
                except RuntimeError:
                    return False
                return True

            # The kernel says what it does on its iopub channel, which the server watches.
            wait_for(ready, timeout=120)

            def idle() -> bool:
                # The server subscribes to the kernel's iopub channel when it starts the
                # kernel, and on a busy machine that can happen after the kernel's first
                # status messages; a kernel_info request makes it publish its status again.
                client.kernel_info()
                return state() == "idle"

            wait_for(idle, timeout=60)
            assert agent.busy_kernels(url, token) == 0
            client.execute("import time; time.sleep(600)")
            wait_for(lambda: agent.busy_kernels(url, token) == 1, timeout=60)
            assert agent.busy_kernels(url, "wrong-token") == 0, "refused: nothing known"
            assert agent.busy_kernels(url, None) == 0
            requests.post(f"{state_url}/interrupt", headers=auth(token), timeout=10)
            wait_for(lambda: agent.busy_kernels(url, token) == 0, timeout=60)
            assert state() == "idle"
        finally:
            client.stop_channels()
            requests.delete(state_url, headers=auth(token), timeout=30)


# --- the whole agent process -------------------------------------------------------------


class Controller(http.server.BaseHTTPRequestHandler):
    """Stands in for the controller's ingest route: keeps what each report said."""

    reports: list[tuple[str, str, dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.reports.append((self.path, self.headers["Authorization"], body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def test_one_report_carries_sessions_and_gpu_samples(gpu_box: Box, tmp_path: Path) -> None:
    need_sshd()
    gpu_box.tool("nvidia-smi", "37\n")
    gpu_box.first_sample()
    credential = tmp_path / "credential"
    credential.write_text("first-credential\n")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Controller)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    key = make_key(tmp_path)
    port = free_port()

    def run_once() -> dict[str, Any]:
        done = subprocess.run(
            [
                sys.executable,
                str(AGENT_PATH),
                "--once",
                "--url",
                f"http://127.0.0.1:{server.server_port}/api/v1/devboxes/atlas/activity",
                "--credential-file",
                str(credential),
                "--ssh-port",
                str(port),
                "--jupyter-url",
                f"http://127.0.0.1:{free_port()}",
                "--gpu-samples",
                str(gpu_box.samples),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        path, authorization, body = Controller.reports[-1]
        assert path == "/api/v1/devboxes/atlas/activity"
        assert authorization == f"Bearer {credential.read_text().strip()}"
        return body

    try:
        with loopback_sshd(tmp_path / "sshd", port, key.with_suffix(".pub")):
            session = ssh_session(key, port)
            try:
                wait_for(lambda: agent.ssh_sessions(port) == 1, timeout=60)
                assert run_once() == {"ssh_sessions": 1, "busy_kernels": 0, "gpu_utilization": 37.0}
            finally:
                session.terminate()
                session.wait(10)
            wait_for(lambda: agent.ssh_sessions(port) == 0, timeout=60)
            # A rotated credential is read at the next report.
            credential.write_text("second-credential\n")
            for sample in gpu_box.samples.iterdir():
                sample.unlink()
            assert run_once() == {"ssh_sessions": 0, "busy_kernels": 0, "gpu_utilization": None}
    finally:
        server.shutdown()
        server.server_close()


def test_the_agent_exits_at_once_on_sigterm(tmp_path: Path) -> None:
    """It ends with status 0, not by the signal: as a container's first process it would
    otherwise ignore SIGTERM and hold a stopped box's pod for the whole grace period."""
    credential = tmp_path / "credential"
    credential.write_text("credential\n")
    agent_process = subprocess.Popen(
        [
            sys.executable,
            str(AGENT_PATH),
            "--url",
            f"http://127.0.0.1:{free_port()}/api/v1/devboxes/atlas/activity",
            "--credential-file",
            str(credential),
            "--interval",
            "3600",
            "--jupyter-url",
            f"http://127.0.0.1:{free_port()}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The first report fails (nothing listens) and says so; then the agent sleeps.
        assert agent_process.stderr is not None
        assert "cannot reach the controller" in agent_process.stderr.readline()
        agent_process.terminate()
        assert agent_process.wait(10) == 0
    finally:
        agent_process.kill()
