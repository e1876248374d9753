"""A kernel provisioner that runs the notebook's kernel inside a Devbox, over SSH.

Start: create or reuse the user's box for the kernelspec's profile, wait for it with
the controller's server-side wait, open one SSH connection to it with the operator's
key, start ``ipykernel`` there and forward the kernel's five ZMQ channels from local
TCP ports to the kernel's Unix sockets on the box. Interrupts travel as messages on
the control channel, so no signal has to cross SSH. Shutdown ends the kernel and the
connection and gives the box back after a grace (see ``release.py``). A box stopped
under a running kernel stays stopped: only a restart someone asks for starts it again.

The controller is reached with ``Client()``, which in a Jupyter server with the
Devboxes extension resolves to the extension's controller (see ``app.py``). With several
clusters configured (and no ``DEVBOX_URL``), the kernel pins the cluster ``Client()``
resolves to when it starts, records it with its other state, and asks that cluster for
everything else it does, its reconnects, restarts and the stop of its box included.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import IO, Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from jupyter_core.paths import jupyter_data_dir
from tornado import web
from traitlets import Enum, Float, Int, Unicode

from devboxes_jupyter import box_start, hostkeys, progress, release
from devboxes_jupyter.box_start import BoxRequest, controller, on_cluster
from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.config import ENV_CLUSTER
from devboxes_sdk.errors import BoxNotReady, Conflict, DevboxesError, NotFound
from devboxes_sdk.labels import CPU_ONLY
from devboxes_sdk.tunnel import HOST_SUFFIX, proxy_command

PROVISIONER_NAME = "devboxes"
CPU = "cpu"
_READY = "DEVBOXES-READY"
_ERROR = "DEVBOXES-ERROR"
# Channel -> the "port" that names its Unix socket on the box (``<ip>-<port>``).
_CHANNELS = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
_NAME_LIMIT = 40
_SSH_BANNER_SECONDS = 60
# The kernels' own key in <Jupyter data dir>/devboxes, made when ssh_key_file is empty.
OWN_KEY = "kernel_ed25519"
NO_KEY = (
    "no SSH key configured for devbox kernels: set c.DevboxKernelProvisioner.ssh_key_file "
    "in jupyter_server_config.py (the operator token has no keys of its own)"
)
RESTART_HINT = "To start the box again, restart the kernel (JupyterLab: Kernel › Change Kernel…)."
# The program that starts the kernel on the box (see kernel_bootstrap.py), sent as text.
_BOOTSTRAP = (files("devboxes_jupyter") / "kernel_bootstrap.py").read_text()
# ssh runs a ProxyCommand with ``exec``, so a variable is set through env(1).
_ENV = shutil.which("env") or "/usr/bin/env"


class DevboxKernelError(web.HTTPError):
    """A kernel start that cannot succeed, with the one sentence the user sees.

    An ``HTTPError`` because Jupyter's kernel and session routes answer its message to
    the browser (any other exception becomes "Unhandled error").
    """

    def __init__(self, message: str) -> None:
        super().__init__(503, message.replace("%", "%%"), reason="Devbox kernel unavailable")
        self.text = message

    def __str__(self) -> str:
        return self.text


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def box_name(owner: str, profile: str | None) -> str:
    """The box a kernel of ``profile`` (None: CPU only) runs in: ``nb-<owner>-<profile>``.

    Lowercased, with anything but letters, digits and ``-`` turned into ``-``; a name
    over 40 characters keeps its first 33 and ends with 6 hex digits of a hash of the
    full name, so long names stay distinct.
    """
    full = _slug(f"nb-{owner}-{profile or CPU}")
    if len(full) <= _NAME_LIMIT:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:6]
    return f"{full[: _NAME_LIMIT - 7].rstrip('-')}-{digest}"


def running_message(box: Devbox, cluster: str | None = None) -> str:
    """What a started kernel reports: the box (and its cluster, when the kernel pinned
    one), and its environment when it was created with an image profile. One kernel per
    accelerator serves every environment, so this is where a person learns which one
    their code runs in."""
    message = f"kernel running in box {on_cluster(box.name, cluster)}"
    return f"{message} (environment: {box.image.display_name})" if box.image else message


def stopped_message(box: Devbox) -> str:
    """What a kernel whose box was stopped under it ends with: the controller's word on
    the stop (on request, its time to live, idleness) and how to carry on."""
    why = box.message or "Stopped."
    return f"box {box.name} was stopped, so its kernel ended: {why} {RESTART_HINT}"


def key_problem(ssh_key_file: str) -> str | None:
    """Why ``ssh_key_file`` cannot log in to boxes, or None when it names a file or is
    empty (the kernels' own key, see ``own_key``)."""
    if not ssh_key_file:
        return None
    key = Path(ssh_key_file).expanduser()
    if not key.is_file():
        return f"the SSH key {key} (DevboxKernelProvisioner.ssh_key_file) is missing"
    return None


def fingerprint(public_key: Path) -> str:
    """``SHA256:...`` of a public key file, as ``ssh-keygen -l`` and the controller give it."""
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(public_key)],
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    return listed.stdout.split()[1]


def own_key(client: Client, directory: Path) -> Path:
    """The private key this server's kernels log in with when none is configured.

    Made here once (ed25519, mode 0600) and added to the caller's SSH keys at the
    controller when it is not among them, so every box of this person accepts it and no
    operator key is needed. The operator token has no keys of its own.
    """
    whoami = client.whoami()
    if whoami.mode == "operator":
        raise DevboxesError(NO_KEY)
    private = directory / OWN_KEY
    if not private.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        comment = f"devbox-kernels-{whoami.user}"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(private), "-C", comment],
            capture_output=True,
            timeout=30,
            check=True,
        )
    public = private.with_name(OWN_KEY + ".pub")
    if fingerprint(public) not in {key.fingerprint for key in client.keys.list()}:
        # Conflict: another kernel of this server added it meanwhile.
        with contextlib.suppress(Conflict):
            client.keys.add(public.read_text(encoding="utf-8").strip())
    return private


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


class DevboxKernelProvisioner(LocalProvisioner):
    """Runs a kernel in the user's Devbox of one GPU profile (``profile``; empty: CPU)."""

    profile = Unicode("", help="GPU profile of the box; empty for a CPU box.").tag(config=True)

    ssh_key_file = Unicode(
        "",
        help="Private key that logs in to boxes (its public half must be among the keys "
        "boxes are created with). Empty: a key of the kernels' own, made in the Jupyter data "
        "dir and added to the caller's keys at the controller (needs a person's token, "
        "not the operator token).",
    ).tag(config=True)

    ssh_user = Unicode(
        "",
        help="User to log in to boxes as. Empty: the user the controller names for the box.",
    ).tag(config=True)

    known_hosts_file = Unicode(
        "",
        help="known_hosts file for box host keys, recorded on first use under an alias "
        "of the controller and the box's identity, devbox-<name>-<16 hex digits>. Empty: "
        "<Jupyter data dir>/devboxes/known_hosts.",
    ).tag(config=True)

    ssh_route = Enum(
        ["auto", "tunnel", "address"],
        "auto",
        help="How kernels reach a box's sshd: 'tunnel' through the controller's HTTPS (the "
        "Lab needs only the controller's URL), 'address' at the box's own SSH address "
        "(ssh_host and ssh_port), 'auto' through the tunnel whenever the controller "
        "offers one.",
    ).tag(config=True)

    owner = Unicode(
        "",
        help="The <owner> part of box names (nb-<owner>-<profile>). Empty: the user "
        "running the Jupyter server.",
    ).tag(config=True)

    preset = Enum(
        list(models.PRESETS), "small", help="Preset of boxes the provisioner creates."
    ).tag(config=True)

    ttl_hours = Int(8, help="Auto-stop of boxes the provisioner creates or starts, in hours.").tag(
        config=True
    )

    start_timeout = Float(
        300.0,
        help="Seconds a kernel start waits for its box to be ready (e.g. for a free GPU).",
    ).tag(config=True)

    ssh_connect_timeout = Float(
        30.0,
        help="Seconds to keep retrying a refused or unanswered SSH connection to a box "
        "that just became ready (its address may take a moment to route).",
    ).tag(config=True)

    stop_grace_seconds = Float(
        60.0,
        min=0.0,
        help="Seconds after a kernel shuts down (not for a restart) before its box is "
        "stopped, unless another kernel of this server or an SSH session uses it by then; "
        "0 stops it at once.",
    ).tag(config=True)

    _box: Devbox | None = None
    # The configured cluster the box is on, pinned at the kernel's first start when
    # several clusters are configured (None: Client() as it resolves); every later call
    # of this kernel goes there.
    _cluster: str | None = None
    _pinned = False
    # The coming restart was asked for (Lab's Restart Kernel, the REST restart), not the
    # automatic restart of a kernel that died.
    _restart_asked = False
    # This start created the box or started it from stopped: a failure before the kernel
    # connects stops it again, so a failed start holds no device.
    _took = False
    # Local directory of the SSH control socket while a connection to the box is open.
    _control_dir: Path | None = None
    # The kernel's socket directory on the box, which the forwards point into.
    _remote_home: str | None = None
    # The private key logins use, found before the box is asked for.
    _key_path: Path | None = None
    # What the box's host key is recorded under (see hostkeys.py), set with the connection.
    _host_key_alias: str | None = None
    # Whether ssh reaches the box through the controller's tunnel (when the controller
    # offers one) rather than at the box's own address; set with the connection.
    _through_tunnel: bool = False

    @property
    def box_name(self) -> str:
        # In a JupyterHub every person's server may run as one system user: the hub's
        # name for the person keeps their boxes apart.
        owner = self.owner or os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
        return box_name(owner, self.profile or None)

    @property
    def cluster(self) -> str | None:
        """The cluster this kernel's box is on, once pinned; None with one cluster or
        ``DEVBOX_URL``."""
        return self._cluster

    def _pin_cluster(self) -> None:
        """Pin the cluster of the kernel's box, once: the one the configuration resolves
        to now. Later changes of the configuration leave this kernel where it is."""
        if self._pinned:
            return
        try:
            self._cluster = box_start.kernel_cluster()
        except DevboxesError as error:
            raise self._fail(f"the Devboxes configuration cannot be used: {error}") from None
        self._pinned = True

    def _controller(self) -> Client:
        """A client of the kernel's cluster."""
        return controller(self._cluster)

    def _report(self, phase: str, message: str) -> None:
        where = on_cluster(self.box_name, self._cluster)
        self.log.info("devbox kernel %s (%s): %s", self.kernel_id, where, message)
        progress.REGISTRY.update(
            self.kernel_id, self.box_name, self.profile, phase, message, self._cluster
        )

    def _fail(self, message: str) -> DevboxKernelError:
        progress.REGISTRY.update(
            self.kernel_id, self.box_name, self.profile, progress.FAILED, message, self._cluster
        )
        self.log.warning("devbox kernel %s: %s", self.kernel_id, message)
        return DevboxKernelError(message)

    # -- the box ------------------------------------------------------------------

    def _ready_box(self) -> Devbox:
        """The user's box for this profile, ready.

        Kernels of this server that ask for the box at once share one create, start and
        wait (see ``box_start``)."""
        name = self.box_name
        wanted = self.profile or None
        request = BoxRequest(
            name, wanted, self.preset, self.ttl_hours, self.start_timeout, self._cluster
        )
        try:
            ready = box_start.STARTS.ready(
                self.kernel_id, request, self._wrong_accelerator, self._report
            )
        except box_start.StartCancelled as error:
            raise self._fail(str(error)) from None
        except box_start.StartFailed as failure:
            if isinstance(failure.cause, BoxNotReady):
                raise self._fail(
                    f"box {on_cluster(name, self._cluster)} is not ready: {failure}"
                ) from None
            if isinstance(failure.cause, box_start.WrongBox):
                raise self._fail(str(failure)) from None
            raise failure.cause from None
        self._took = ready.took
        return ready.box

    def _wrong_accelerator(self, client: Client, box: Devbox) -> str | None:
        """Why ``box`` cannot serve this kernel: another accelerator than its profile."""
        wanted = self.profile or None
        have = box.gpu.profile if box.gpu else None
        if have == wanted:
            return None
        # In the profiles' display names, as the kernelspecs and the sidebar name them.
        catalog = {
            profile.name: profile.display_name for profile in client.capabilities().gpu.profiles
        }
        return (
            f"box {box.name} exists with accelerator "
            f"{box.gpu.display_name if box.gpu else CPU_ONLY}, not "
            f"{catalog.get(wanted, wanted) if wanted else CPU_ONLY}; "
            "delete it or set DevboxKernelProvisioner.owner"
        )

    def _give_back(self) -> str:
        """Stop the box if this start created or started it; what to add to the failure."""
        if not self._took:
            return ""
        self._took = False
        return box_start.give_back_box(self.box_name, self._cluster)

    # -- SSH ----------------------------------------------------------------------

    def _known_hosts(self) -> Path:
        if self.known_hosts_file:
            return Path(self.known_hosts_file).expanduser()
        return Path(jupyter_data_dir()) / "devboxes" / "known_hosts"

    def _login(self) -> str:
        assert self._box is not None
        user = self.ssh_user or self._box.ssh_user
        if not user:
            raise self._fail(
                f"the controller names no SSH user for box {self._box.name}: "
                "set DevboxKernelProvisioner.ssh_user"
            )
        return user

    def _ssh(self, *extra: str, command: str | None = None) -> list[str]:
        assert self._box is not None
        assert self._control_dir is not None
        assert self._host_key_alias is not None
        if self._through_tunnel:
            # The tunnel's end resolves the controller as Client() does: told the
            # kernel's cluster, it reaches the box there whatever the default is by then.
            pinned = "" if self._cluster is None else f"{_ENV} {ENV_CLUSTER}={self._cluster} "
            reach = ["-o", f"ProxyCommand={pinned}{proxy_command()}"]
            host = f"{self._box.name}{HOST_SUFFIX}"
        else:
            reach, host = ["-p", str(self._box.ssh_port)], str(self._box.ssh_host)
        return [
            "ssh",
            "-i",
            str(self._key_path),
            *reach,
            "-S",
            str(self._control_dir / "ctl"),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            *self._host_key_options(),
            # Boxes behind one NodePort host share host:port over time, and one name
            # can belong to boxes of two clusters or to a box made again: the alias of
            # the controller and the box's identity keeps each box's host key apart.
            "-o",
            f"HostKeyAlias={self._host_key_alias}",
            "-o",
            "ConnectTimeout=15",
            "-o",
            "ServerAliveInterval=30",
            "-o",
            "LogLevel=ERROR",
            *extra,
            f"{self._login()}@{host}",
            *([] if command is None else [command]),
        ]

    def _published_hosts(self) -> Path | None:
        """The box's published host keys as a known_hosts file of this connection, when
        the controller publishes them; then no key is trusted on first use."""
        if self._control_dir is None or self._box is None or not self._box.ssh_host_keys:
            return None
        return self._control_dir / "published_known_hosts"

    def _host_key_options(self) -> list[str]:
        published = self._published_hosts()
        if published is not None:
            return ["-o", f"UserKnownHostsFile={published}", "-o", "StrictHostKeyChecking=yes"]
        return [
            "-o",
            f"UserKnownHostsFile={self._known_hosts()}",
            "-o",
            "StrictHostKeyChecking=accept-new",
        ]

    def _master_alive(self) -> bool:
        if self._control_dir is None or self._box is None:
            return False
        check = subprocess.run(
            [*self._ssh("-O", "check")], capture_output=True, timeout=15, check=False
        )
        return check.returncode == 0

    def _key(self) -> Path:
        """The private key kernels log in with; a missing one fails the start before a box
        is created or started for nothing."""
        problem = key_problem(self.ssh_key_file)
        if problem is not None:
            raise self._fail(problem)
        if self.ssh_key_file:
            return Path(self.ssh_key_file).expanduser()
        try:
            return own_key(self._controller(), Path(jupyter_data_dir()) / "devboxes")
        except DevboxesError as error:
            raise self._fail(str(error)) from None
        except (OSError, subprocess.SubprocessError) as error:
            raise self._fail(f"the kernels' own SSH key could not be made: {error}") from None

    def _open_master(self) -> None:
        """One authenticated connection that the kernel session and forwards share."""
        assert self._box is not None
        if self._key_path is None:
            self._key_path = self._key()
        known = self._known_hosts()
        known.parent.mkdir(parents=True, exist_ok=True)
        try:
            controller = self._controller()
        except DevboxesError as error:
            raise self._fail(f"the Devboxes controller cannot be asked: {error}") from None
        self._host_key_alias = hostkeys.alias(controller.url, self._box)
        self._through_tunnel = self.ssh_route == "tunnel"
        if self.ssh_route == "auto":
            try:
                self._through_tunnel = "tunnel" in controller.capabilities().ssh_access
            except DevboxesError as error:
                raise self._fail(f"the Devboxes controller cannot be asked: {error}") from None
        self._control_dir = Path(tempfile.mkdtemp(prefix="devbox-ssh-"))
        published = self._published_hosts()
        if published is not None:
            published.write_text(
                hostkeys.known_hosts_lines(self._host_key_alias, self._box.ssh_host_keys)
            )
        errors = self._control_dir / "master.err"
        where = f"{self._login()}@{self._box.ssh_host}:{self._box.ssh_port}"
        if self._through_tunnel:
            where = f"{self._login()}@{self._box.name}, through the controller"
        self._report("connecting", f"connecting to box {self._box.name} over SSH ({where})")
        deadline = time.monotonic() + self.ssh_connect_timeout
        while True:
            # -f: ssh returns once authenticated and keeps the connection in the
            # background; its errors go to a file because the background half keeps
            # stderr open.
            with errors.open("wb") as sink:
                result = subprocess.run(
                    self._ssh("-M", "-f", "-N", "-o", "ControlPersist=no"),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=sink,
                    timeout=60,
                    check=False,
                )
            if result.returncode == 0:
                return
            said = errors.read_text(errors="replace")
            if published is not None and hostkeys.REFUSED_MARK in said:
                raise self._fail(hostkeys.not_published_message(self._box.name))
            if hostkeys.CHANGED_MARK in said:
                raise self._fail(
                    hostkeys.changed_message(self._box.name, self._host_key_alias, known)
                )
            reason = _last_line(said)
            transient = "Connection refused" in reason or "timed out" in reason
            if not transient or time.monotonic() > deadline:
                raise self._fail(f"SSH to box {self._box.name} ({where}) failed: {reason}")
            time.sleep(1.0)

    def _close_master(self) -> None:
        if self._control_dir is None:
            return
        if self._box is not None:
            subprocess.run(self._ssh("-O", "exit"), capture_output=True, timeout=15, check=False)
        shutil.rmtree(self._control_dir, ignore_errors=True)
        self._control_dir = None

    def _forward_specs(self, remote_home: str) -> list[str]:
        """``-L`` options from each local channel port to the kernel's socket on the box."""
        specs: list[str] = []
        for channel, number in _CHANNELS.items():
            local = self.connection_info[channel]  # type: ignore[literal-required]
            specs += ["-L", f"127.0.0.1:{local}:{remote_home}/k-{number}"]
        return specs

    def _forward(self, remote_home: str) -> None:
        result = subprocess.run(
            self._ssh("-O", "forward", *self._forward_specs(remote_home)),
            capture_output=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0:
            raise self._fail(
                f"cannot forward the kernel channels from box {self.box_name}: "
                f"{_last_line(result.stderr.decode(errors='replace'))}"
            )

    def _start_remote_kernel(self) -> str:
        """Start the bootstrap on the box; the path of the kernel's socket directory."""
        assert self.kernel_spec is not None
        argv = list(self.kernel_spec.argv)
        command = shlex.join([argv[0], "-c", _BOOTSTRAP])
        process = subprocess.Popen(
            self._ssh("-T", command=command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        connection = {
            key: value.decode() if isinstance(value, bytes) else value
            for key, value in self.connection_info.items()
            if key in ("key", "signature_scheme", "kernel_name")
        }
        connection.update(_CHANNELS)
        try:
            process.stdin.write(
                (json.dumps({"connection": connection, "argv": argv}) + "\n").encode()
            )
            process.stdin.flush()
        except BrokenPipeError:
            pass
        self.process = process
        self.pid = process.pid
        self.pgid = process.pid
        stderr_lines: list[str] = []
        stderr_reader = _drain(process.stderr, stderr_lines.append, self.log.warning)
        line = _read_line(process.stdout, _SSH_BANNER_SECONDS)
        if line is not None and line.startswith(_READY):
            _drain(process.stdout, None, self.log.info)
            return line.removeprefix(_READY).strip()
        process.kill()
        process.wait(10)
        stderr_reader.join(5)
        self.process = None
        if line is not None and line.startswith(_ERROR):
            detail = line.removeprefix(_ERROR).strip()
            raise self._fail(
                f"cannot start the kernel in box {self.box_name}: {detail}; the box image "
                "needs python3 and ipykernel (see workspace/README.md)"
            )
        if process.returncode == 127:
            raise self._fail(
                f"cannot start the kernel in box {self.box_name}: {argv[0]} is not installed "
                "there; the box image needs python3 and ipykernel (see workspace/README.md)"
            )
        said = _last_line("\n".join(stderr_lines)) if stderr_lines else "no answer"
        raise self._fail(f"the kernel in box {self.box_name} did not start: {said}")

    # -- the provisioner interface ------------------------------------------------

    async def shutdown_requested(self, restart: bool = False) -> None:
        # A restart someone asks for first asks the kernel to shut down; the automatic
        # restarter of a dead kernel kills it without asking, so it never gets here.
        self._restart_asked = restart
        await super().shutdown_requested(restart=restart)

    def _refuse_stopped_box(self) -> None:
        """Fail an automatic restart whose box was stopped or deleted under the kernel:
        a stop by a person, an admin, the TTL or idleness is meant to free the device."""
        name = self.box_name
        try:
            box = self._controller().get(name)
        except NotFound:
            raise self._fail(
                f"box {name} was deleted, so its kernel ended. {RESTART_HINT}"
            ) from None
        except DevboxesError as error:
            raise self._fail(f"the Devboxes controller refused box {name}: {error}") from None
        if box.state is models.DevboxState.STOPPED:
            raise self._fail(stopped_message(box))

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        automatic = self._box is not None and not self._restart_asked
        self._restart_asked = False
        await asyncio.to_thread(self._pin_cluster)
        if automatic:
            await asyncio.to_thread(self._refuse_stopped_box)
        self._report("starting", f"preparing box {on_cluster(self.box_name, self._cluster)}")
        self._key_path = await asyncio.to_thread(self._key)
        try:
            box = await asyncio.to_thread(self._ready_box)
        except DevboxKernelError:
            raise
        except DevboxesError as error:
            raise self._fail(
                f"the Devboxes controller refused box {self.box_name}: {error}"
            ) from None
        if self._box is not None and (box.ssh_host, box.ssh_port) != (
            self._box.ssh_host,
            self._box.ssh_port,
        ):
            # The box moved between restarts: the old connection leads nowhere.
            await asyncio.to_thread(self._close_master)
        self._box = box
        return dict(await super().pre_launch(**kwargs))

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        # The kernel runs kernel_spec.argv on the box; cmd is its local rendering.
        try:
            if await asyncio.to_thread(self._master_alive):
                # A restart: the connection lives on, the new kernel gets new sockets.
                await asyncio.to_thread(self._cancel_forwards)
            else:
                await asyncio.to_thread(self._close_master)
                await asyncio.to_thread(self._open_master)
            self._remote_home = await asyncio.to_thread(self._start_remote_kernel)
            await asyncio.to_thread(self._forward, self._remote_home)
        except DevboxKernelError as error:
            await self._abandon()
            given_back = await asyncio.to_thread(self._give_back)
            if given_back:
                raise self._fail(f"{error.text}{given_back}") from None
            raise
        except BaseException:
            await self._abandon()
            raise
        self._took = False
        assert self._box is not None
        self._report("running", running_message(self._box, self._cluster))
        return self.connection_info

    async def _abandon(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None
        await asyncio.to_thread(self._close_master)

    def _cancel_forwards(self) -> None:
        if self._remote_home is not None:
            subprocess.run(
                self._ssh("-O", "cancel", *self._forward_specs(self._remote_home)),
                capture_output=True,
                timeout=15,
                check=False,
            )

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart=restart)
        if not restart:
            await asyncio.to_thread(self._close_master)
            progress.REGISTRY.forget(self.kernel_id)
            if self._box is not None:
                release.kernel_closed(self._box, self.stop_grace_seconds, self.log, self._cluster)

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        info["box"] = self.box_name
        if self._cluster is not None:
            info["cluster"] = self._cluster
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        await super().load_provisioner_info(provisioner_info)
        if "box" in provisioner_info:
            # A kernel that started already: its cluster (or none) stays as it was.
            self._cluster = provisioner_info.get("cluster")
            self._pinned = True


def _read_line(stream: IO[bytes], timeout: float) -> str | None:
    """The first line of ``stream``, or None at EOF or after ``timeout`` seconds."""
    found: list[bytes] = []
    reader = threading.Thread(target=lambda: found.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not found or not found[0]:
        return None
    return found[0].decode(errors="replace").strip()


def _drain(
    stream: IO[bytes], keep: Callable[[str], object] | None, log: Callable[..., object]
) -> threading.Thread:
    """Copy a kernel's output to the server log until it ends, so its pipe never fills."""

    def run() -> None:
        try:
            for raw in iter(stream.readline, b""):
                line = raw.decode(errors="replace").rstrip()
                if keep is not None:
                    keep(line)
                log("devbox kernel: %s", line)
        except (OSError, ValueError):
            # The provisioner closed the pipe after the process ended.
            return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
