"""Starts a notebook kernel on the box; run there with the kernelspec's interpreter.

The provisioner sends this file's text as ``python -c`` over SSH, so it is never imported
on the Jupyter side and may use only the standard library of whatever Python the box has.
It reads the kernel's connection details from stdin (never the command line, which other
users of the box can see), starts the kernel in its own process group and ends it when
stdin closes, i.e. when the Jupyter side goes away, so a lost connection never leaves a
kernel behind. It answers on stdout with one ``DEVBOXES-READY <dir>`` or
``DEVBOXES-ERROR <reason>`` line.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading


def main() -> None:
    try:
        import ipykernel  # noqa: F401
    except ImportError:
        reason = sys.executable + " on the box cannot import ipykernel"
        print("DEVBOXES-ERROR " + reason, flush=True)
        sys.exit(3)
    spec = json.loads(sys.stdin.readline())
    home = tempfile.mkdtemp(prefix="devbox-kernel-")
    connection = dict(spec["connection"], transport="ipc", ip=os.path.join(home, "k"))
    path = os.path.join(home, "connection.json")
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(connection, f)
    argv = [part.replace("{connection_file}", path) for part in spec["argv"]]
    kernel = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    print("DEVBOXES-READY " + home, flush=True)

    def end() -> None:
        sys.stdin.buffer.read()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(kernel.pid, sig)
                kernel.wait(5)
                return
            except (OSError, subprocess.TimeoutExpired):
                pass

    threading.Thread(target=end, daemon=True).start()
    code = kernel.wait()
    shutil.rmtree(home, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
