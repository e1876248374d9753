"""The testbed's processes: ports picked free, a process started and waited for until it
is healthy (picked again when a port it was given is taken), stopped with its session, and
SIGTERM turned into the interrupt that runs the clean-up of whatever started them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import NoReturn

from .errors import TestbedError

START_TIMEOUT = 180.0
STOP_TIMEOUT = 10.0
# What a process logs when a port it was given is taken: Go's and Node's "address already
# in use", Python's "Address already in use", Jupyter's "The port N is already in use".
_IN_USE = "already in use"
# A picked port is released before the process binds it, so another process may take it in
# between; each attempt picks new ports, and this many losses in a row mean something holds
# ports on purpose.
PORT_ATTEMPTS = 5
PORT_TAKEN = "found a port it was given taken"


def free_port() -> int:
    """A port free on every address now: some components bind all of them, and a port that
    only loopback leaves free may be held on another address (many clients on 127.0.0.x).
    Free now only: a process given it starts through ``start_process``, which picks again
    when it was taken meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def reassigner(ports: dict[str, int], *names: str) -> Callable[[], None]:
    """What a component calls when its port was taken: pick new free ports for ``names``."""

    def reassign() -> None:
        for name in names:
            ports[name] = free_port()

    return reassign


@dataclass
class Component:
    """One control-plane process, its log file and how to tell it is healthy."""

    name: str
    argv: Callable[[], list[str]]
    health_url: Callable[[], str]
    log: Path
    # None when its ports are fixed: a taken one is then an error.
    reassign_ports: Callable[[], None] | None
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None
    # Sent with each health check, for an answer only this process gives.
    health_headers: dict[str, str] = field(default_factory=dict)

    def start(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
            )
        return self.process

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.process = None


@dataclass(frozen=True)
class Exit:
    """A process of the testbed (or of what runs on it) that exited on its own."""

    name: str
    code: int
    log: Path

    def __str__(self) -> str:
        return f"{self.name} exited with code {self.code}; its log: {self.log}"


def exits(components: list[Component]) -> list[Exit]:
    """The started components whose process has exited."""
    found = []
    for component in components:
        process = component.process
        code = process.poll() if process is not None else None
        if code is not None:
            found.append(Exit(component.name, code, component.log))
    return found


def wait_for_exit(check: Callable[[], list[Exit]], interval: float = 1.0) -> list[Exit]:
    """Block until ``check`` reports an exited process; return what it reported."""
    while not (found := check()):
        time.sleep(interval)
    return found


def _healthy(url: str, headers: Mapping[str, str]) -> bool:
    context = ssl.create_default_context()
    # Loopback health endpoints of components with self-signed serving certificates.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url, headers=dict(headers))  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_healthy(
    process: subprocess.Popen[bytes],
    url: str,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    port_taken: Callable[[], bool] | None = None,
) -> str | None:
    """Poll ``url`` until it answers 200: None then, or why not if ``process`` exits,
    ``port_taken`` says so (some processes live on when a bind fails) or ``timeout``
    seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_taken is not None and port_taken():
            return PORT_TAKEN
        code = process.poll()
        if code is not None:
            return f"exited with code {code}"
        if _healthy(url, headers or {}):
            return None
        time.sleep(0.2)
    return f"was not healthy within {timeout:.0f}s"


class _LogSince:
    """What a process wrote to its log from where the log ended when it started."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.start = log.stat().st_size if log.exists() else 0
        self.read = self.start
        self.port_line = ""

    def text(self) -> str:
        try:
            with self.log.open("rb") as file:
                file.seek(self.start)
                return file.read().decode(errors="replace")
        except OSError:
            return ""

    def port_taken(self) -> bool:
        """Whether it logged that a port it was given is taken; reads only what is new."""
        try:
            with self.log.open("rb") as file:
                file.seek(self.read)
                new = file.read()
        except OSError:
            return False
        # Whole lines only: the rest of a line being written is read at the next call.
        complete = new[: new.rfind(b"\n") + 1]
        self.read += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            if _IN_USE in line.lower():
                self.port_line = line.strip()
        return bool(self.port_line)


def start_process(
    name: str,
    launch: Callable[[], subprocess.Popen[bytes]],
    stop: Callable[[], object],
    health_url: Callable[[], str],
    log: Path,
    reassign_ports: Callable[[], None] | None,
    timeout: float = START_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Launch a process on the ports picked for it and wait until ``health_url`` answers
    200. When it logs that one of its ports was taken (picked free, then taken by another
    process before it bound it), it is stopped, ``reassign_ports`` picks new ones and it
    is launched again, up to PORT_ATTEMPTS times; without ``reassign_ports`` a taken port
    is an error at once."""
    for _attempt in range(PORT_ATTEMPTS):
        written = _LogSince(log)
        process = launch()
        failure = wait_healthy(process, health_url(), timeout, headers, written.port_taken)
        if failure is None:
            return
        stop()
        taken = failure == PORT_TAKEN or written.port_taken()
        if not taken or reassign_ports is None:
            tail = "\n".join(written.text().strip().splitlines()[-12:])
            raise TestbedError(f"{name} {failure}; the end of its log {log}:\n{tail}")
        reassign_ports()
    raise TestbedError(
        f"{name} {PORT_TAKEN} {PORT_ATTEMPTS} times in a row, the last time: "
        f"{written.port_line}; its log: {log}"
    )


def start_component(component: Component, log: Callable[[str], None]) -> None:
    """Start one process and wait until it is healthy; a taken port is picked again."""
    start_process(
        component.name,
        component.start,
        component.stop,
        component.health_url,
        component.log,
        component.reassign_ports,
        headers=component.health_headers,
    )
    log(f"  {component.name} ready on {component.health_url()}")


def _interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    # Once: a second SIGTERM would cut short the clean-up the first one started.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt in the main thread, so the clean-up
    of the block and of those around it runs as after Ctrl-C: the testbed's processes run in
    sessions of their own and would outlive a process that SIGTERM ends. The handler before
    the block is back after it; a block within one already turning SIGTERM leaves it be."""
    previous = signal.getsignal(signal.SIGTERM)
    if previous is _interrupt:
        yield
        return
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class StoppedAtExit(ABC):
    """What a ``with`` block stops when it ends, however it ends."""

    @abstractmethod
    def stop(self) -> None: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
