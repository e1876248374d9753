"""What the testbed's real node puts on the machine, found by lookups of its own.

The testbed's cleaner and its ``leftovers`` share their lookups, so a place the cleaner
never looks is one ``leftovers`` never reports. Here, what the node made is read from the
machine while it runs (its processes by their command lines, the namespaces they run in,
the machine's routes to its pods, the cgroup root its kubelet was given, its lock), each
lookup required to find it, and after a stop the same places are looked at again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devboxes_testbed.realnode import LOCK_DIR, RealNode

PROC = Path("/proc")
# Where the node's kubelet keeps its state, as the node's own processes see it; nothing
# may be mounted there on the machine.
KUBELET_STATE = "/var/lib/kubelet"


def _read(path: Path) -> str | None:
    """The file's text, or None when its process went away or it cannot be read."""
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:
        return None


def _link(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _pids() -> Iterator[int]:
    return (int(p.name) for p in PROC.iterdir() if p.name.isdigit())


def _command_line(pid: int) -> str:
    return (_read(PROC / str(pid) / "cmdline") or "").replace("\0", " ").strip()


def _ip(*argv: str) -> Any:
    result = subprocess.run(["ip", "-j", *argv], capture_output=True, text=True, check=True)
    return json.loads(result.stdout or "[]")


def _unescaped(field: str) -> str:
    """A path as /proc/mounts writes it: space, tab, newline and backslash in octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _mounts() -> list[tuple[str, str]]:
    """(mount point, file system type) of every mount the machine shows."""
    found = []
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        found.append((_unescaped(fields[1]), fields[2]))
    return found


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _lock_holders(lock: Path) -> set[int]:
    """The processes holding a lock on ``lock``, from the kernel's table of locks."""
    inode = lock.stat().st_ino
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        # "1: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF"; a waiter's
        # line has "->" before its fields.
        fields = [f for f in fields if f != "->"]
        if len(fields) > 5 and int(fields[5].rsplit(":", 1)[1]) == inode:
            holders.add(int(fields[4]))
    return holders


@dataclass(frozen=True)
class Footprint:
    """What one running real node made on the machine."""

    state_dir: str
    namespace_name: str
    namespaces: frozenset[str]
    interface: str
    pod_routes: frozenset[str]
    cgroup_root: str
    lock: Path

    @classmethod
    def of(cls, node: RealNode) -> Footprint:
        """Read from the machine while ``node`` runs; each lookup must find its part."""
        state_dir = str(node.state_dir.resolve())
        processes = [pid for pid in _pids() if state_dir in _command_line(pid)]
        commands = " ".join(_command_line(pid) for pid in processes)
        for program in ("containerd", "kubelet", "kube-proxy"):
            assert f"/{program} " in commands, f"no {program} process of the node: {commands}"
        own = {_link(PROC / "self" / "ns" / kind) for kind in ("net", "mnt")}
        namespaces = {
            link
            for pid in processes
            for kind in ("net", "mnt")
            if (link := _link(PROC / str(pid) / "ns" / kind)) is not None and link not in own
        }
        assert sorted(n.split(":")[0] for n in namespaces) == ["mnt", "net"], namespaces
        identified = subprocess.run(
            ["ip", "netns", "identify", str(processes[0])], capture_output=True, text=True
        ).stdout.strip()
        assert identified, f"the node's network namespace has no name: {processes[0]}"
        (way,) = _ip("route", "get", node.address)
        pod_routes = frozenset(
            r["dst"] for r in _ip("route", "show") if r.get("gateway") == node.address
        )
        assert pod_routes, f"the machine has no route through {node.address}"
        kubelet = json.loads((node.state_dir / "kubelet.yaml").read_text())
        footprint = cls(
            state_dir=state_dir,
            namespace_name=identified,
            namespaces=frozenset(namespaces),
            interface=way["dev"],
            pod_routes=pod_routes,
            cgroup_root=kubelet["cgroupRoot"],
            lock=LOCK_DIR / f"node-{node.index}.lock",
        )
        assert list(footprint._cgroups()), f"no cgroup {footprint.cgroup_root} in any hierarchy"
        assert os.getpid() in _lock_holders(footprint.lock), f"{footprint.lock} is not held"
        return footprint

    def _cgroups(self) -> Iterator[str]:
        for point, kind in _mounts():
            if kind in ("cgroup", "cgroup2") and Path(point, self.cgroup_root.lstrip("/")).exists():
                yield f"{point}{self.cgroup_root}"

    def _in_cgroup_root(self, pid: int) -> bool:
        for line in (_read(PROC / str(pid) / "cgroup") or "").splitlines():
            if _within(line.split(":", 2)[-1], self.cgroup_root):
                return True
        return False

    def _processes(self) -> Iterator[str]:
        for pid in _pids():
            links = {
                _link(PROC / str(pid) / "ns" / kind): f"runs in {kind} namespace"
                for kind in ("net", "mnt")
            }
            fds = PROC / str(pid) / "fd"
            with contextlib.suppress(OSError):
                links.update({_link(fd): "holds the namespace open" for fd in fds.iterdir()})
            whys = [why for link, why in links.items() if link in self.namespaces]
            if self.state_dir in _command_line(pid):
                whys.append("names the node's state directory")
            if self._in_cgroup_root(pid):
                whys.append(f"is in cgroup {self.cgroup_root}")
            if whys:
                yield f"process {pid} ({_command_line(pid)[:80]}): {', '.join(whys)}"

    def left(self) -> list[str]:
        """What of it is still on the machine after the node stopped."""
        found = []
        if os.getpid() in _lock_holders(self.lock):
            found.append(f"lock {self.lock} held by this process")
        found += list(self._processes())
        found += [
            f"mount {point}"
            for point, _ in _mounts()
            if _within(point, self.state_dir) or _within(point, KUBELET_STATE)
        ]
        with self.lock.open("w") as lock:
            try:
                # The number is free again: held here, no testbed starting meanwhile takes
                # it and makes a namespace, interface, route or cgroup of the same name.
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # Another testbed took the number since: the names are its own now.
                return found
            names = {n["name"] for n in _ip("netns", "list")}
            if self.namespace_name in names:
                found.append(f"network namespace {self.namespace_name}")
            if self.interface in {link["ifname"] for link in _ip("link", "show")}:
                found.append(f"interface {self.interface}")
            found += [
                f"route to {r['dst']}" for r in _ip("route", "show") if r["dst"] in self.pod_routes
            ]
            found += [f"cgroup {path}" for path in self._cgroups()]
        return found
