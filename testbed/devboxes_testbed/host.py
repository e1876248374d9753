"""Whether this machine can run the testbed's real node: root, the cgroup v1 memory
hierarchy, network namespaces and the commands the node is set up with."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
NEEDED_COMMANDS = {
    "ip": "iproute2",
    "nsenter": "util-linux",
    "iptables": "iptables",
    "mmdebstrap": "mmdebstrap",
}


def can_run() -> str | None:
    """Why this machine cannot run a real node, or None when it can."""
    if os.geteuid() != 0:
        return "a real node needs root (namespaces, mounts and cgroups)"
    if not (CGROUP_ROOT / "memory" / "cgroup.procs").exists():
        return "a real node needs the cgroup v1 memory hierarchy at /sys/fs/cgroup/memory"
    for tool, package in NEEDED_COMMANDS.items():
        if shutil.which(tool) is None:
            return f"a real node needs the '{tool}' command (Debian package {package})"
    try:
        subprocess.run(["unshare", "--net", "true"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return "this machine does not allow network namespaces"
    return None
