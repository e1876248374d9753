"""The testbed's real node: a kubelet with containerd, runc and CNI that runs pods for real.

The node lives in a network namespace of its own, joined to the machine by a veth pair,
and a mount namespace of its own: its kubelet, kube-proxy, device and DRA plugins and pods
see only those, so two testbeds on one machine (a test run beside `make up`) never share a
bridge, a port, an iptables chain or the kubelet's device-plugin directory, and whatever the
node mounts disappears with its mount namespace. Its cgroups live under a root of their own, so
`stop` can find and remove all of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from . import images, nodes, pki
from .errors import TestbedError
from .host import CGROUP_ROOT, can_run
from .process import Component, start_component

NAME_PREFIX = "devbox-node"
LABEL_KIND = "devboxes.io/testbed-node"
# At most this many real nodes run on one machine at a time, each with its own addresses.
MAX_NODES = 16
# The cgroup v2 hierarchy a machine of cgroup v1 mounts beside the v1 ones.
UNIFIED = "unified"
LOCK_DIR = Path("/run/devboxes-testbed")
STOP_SIGNAL_WAIT = 10.0
NVIDIA_SMI = Path(__file__).resolve().parent / "nvidia-smi"
# The kubelet's root directory as the node's own processes see it: each node's mount
# namespace puts the kubelet directory of its own state here. The plugins' sockets live
# under it, and a socket's path may not exceed 107 bytes, which a state directory deep
# in a temporary tree would. The kubelet also looks for device plugins here
# (device-plugins/) whatever its root directory.
KUBELET_ROOT = Path("/var/lib/kubelet")


@dataclass(frozen=True)
class Addresses:
    """Where one real node lives: a /30 on the veth (the machine's end ``host``, the node's
    ``node``), a /24 for its pods, and the names the machine knows it by."""

    host: str
    node: str
    pod_cidr: str
    # The node's own, which its network namespace and cgroup root carry too.
    name: str
    host_veth: str

    @classmethod
    def of(cls, index: int) -> Addresses:
        """Those of node number ``index``."""
        return cls(
            host=f"10.210.{index}.1",
            node=f"10.210.{index}.2",
            pod_cidr=f"10.211.{index}.0/24",
            name=f"{NAME_PREFIX}-{index}",
            host_veth=f"dbxnode{index}",
        )


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise TestbedError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def _claim_index() -> tuple[int, IO[str]]:
    """The lowest node number no other running testbed holds; the lock holds it until exit."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    for index in range(MAX_NODES):
        lock = (LOCK_DIR / f"node-{index}.lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return index, lock
    raise TestbedError(f"{MAX_NODES} real nodes already run on this machine")


def _hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies, in each of which the kubelet wants its cgroup root."""
    return sorted(
        p for p in CGROUP_ROOT.iterdir() if (p / "cgroup.procs").exists() and p.name != UNIFIED
    )


def _cgroup_dirs(name: str) -> Iterator[Path]:
    """Every cgroup under ``name`` in every hierarchy, deepest first. The unified one
    too: runc makes each container's cgroup there as well, with the root above it."""
    for hierarchy in [*_hierarchies(), CGROUP_ROOT / UNIFIED]:
        top = hierarchy / name
        if top.is_dir():
            yield from sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            )
            yield top


def _cgroup_pids(name: str) -> set[int]:
    pids: set[int] = set()
    for directory in _cgroup_dirs(name):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
    return pids


def _netns_pids(netns: str) -> set[int]:
    result = _run("ip", "netns", "pids", netns, check=False)
    return {int(p) for p in result.stdout.split()} if result.returncode == 0 else set()


def _kill_all(find: Callable[[], set[int]]) -> None:
    """SIGKILL what ``find`` returns until nothing is left (processes may fork meanwhile)."""
    deadline = time.monotonic() + STOP_SIGNAL_WAIT
    while pids := find() - {os.getpid()}:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise TestbedError(f"processes {sorted(pids)} survived SIGKILL")
        time.sleep(0.1)


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory``, deepest first."""
    prefix = str(directory.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: -p.count("/"))


def leftovers(index: int, state_dir: Path) -> list[str]:
    """What node ``index`` with ``state_dir`` would leave behind: mounts (its mount
    namespace among them), the network namespace, the host's veth, cgroups, processes.
    Empty after a clean stop."""
    where = Addresses.of(index)
    found = [f"mount {point}" for point in mounts_under(state_dir)]
    if (Path("/run/netns") / where.name).exists():
        found.append(f"network namespace {where.name}")
    if Path(f"/sys/class/net/{where.host_veth}").exists():
        found.append(f"interface {where.host_veth}")
    found += [f"cgroup {d}" for d in _cgroup_dirs(where.name)]
    found += [f"process {pid}" for pid in sorted(_cgroup_pids(where.name))]
    return found


def clean(index: int, state_dir: Path) -> None:
    """Remove everything node ``index`` may have left: processes, mounts, cgroups, network."""
    where = Addresses.of(index)
    netns_exists = (Path("/run/netns") / where.name).exists()
    _kill_all(lambda: _cgroup_pids(where.name))
    if netns_exists:
        _kill_all(lambda: _netns_pids(where.name))
    for point in mounts_under(state_dir):
        _run("umount", "--lazy", point, check=False)
    for directory in _cgroup_dirs(where.name):
        with contextlib.suppress(OSError):
            directory.rmdir()
    if netns_exists:
        _run("ip", "netns", "delete", where.name, check=False)
    _run("ip", "link", "delete", where.host_veth, check=False)
    _run("ip", "route", "delete", where.pod_cidr, check=False)


@dataclass
class RealNode:
    """One real node registered with the testbed's apiserver as ``name``."""

    state_dir: Path
    bin_dir: Path
    certs: pki.Pki
    apiserver_port: int
    spec: nodes.RealNode
    workspace_references: tuple[str, ...]
    # RuntimeClass handlers the node offers besides runc; each runs runc (a node's
    # vendor runtime only adds its devices, which the device plugin gives here).
    runtime_handlers: tuple[str, ...] = ()
    log: Callable[[str], None] = print
    index: int = -1
    components: list[Component] = field(default_factory=list)
    _lock: IO[str] | None = None

    @property
    def name(self) -> str:
        return Addresses.of(self.index).name

    @property
    def address(self) -> str:
        """The node's InternalIP, where the machine reaches its NodePorts."""
        return Addresses.of(self.index).node

    @property
    def machine_address(self) -> str:
        """The machine's address as the node and its pods reach it."""
        return Addresses.of(self.index).host

    @property
    def gpu_share(self) -> Path:
        """The simulated GPUs' directory: ``devices/<id>/utilization`` sets what the
        simulated nvidia-smi in a box reports for device ``<id>``."""
        return self.state_dir / "fake-gpu"

    @property
    def gpu_ids(self) -> list[str]:
        gpus = self.spec.gpus
        return [f"GPU-{self.name}-{i}" for i in range(gpus.count)] if gpus else []

    @property
    def dra_devices(self) -> list[dict[str, Any]]:
        """The devices the node's DRA kubelet plugin publishes, as resource.k8s.io/v1
        writes them; each has an ``index`` after the device plugin's GPUs, whose
        ``/dev/nvidia<index>`` a container of a claim gets."""
        if self.spec.devices is None:
            return []
        first = self.spec.gpus.count if self.spec.gpus else 0
        devices = nodes.published_devices(self.spec.devices, self.name, first)
        for number, device in enumerate(devices, first):
            device["attributes"]["index"] = {"int": number}
        return devices

    @property
    def cdi_dir(self) -> Path:
        """Where the DRA plugin writes a prepared claim's CDI spec and containerd reads it."""
        return self.state_dir / "cdi"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry host configuration: ``<host:port>/hosts.toml`` per registry
        that needs more than the defaults (HTTPS on port 443), read at every pull."""
        return self.state_dir / "registry-hosts"

    def trust_registry(self, address: str) -> None:
        """Pull from the registry at ``address`` (``host:port``) over plain HTTP."""
        directory = self.registry_hosts / address
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.toml").write_text(
            f'server = "http://{address}"\n'
            f'[host."http://{address}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )

    @property
    def _mount_namespace(self) -> Path:
        return self.state_dir / "ns" / "mnt"

    def start(self) -> None:
        why = can_run()
        if why:
            raise TestbedError(why)
        self.index, self._lock = _claim_index()
        where = Addresses.of(self.index)
        started = time.monotonic()
        clean(self.index, self.state_dir)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir.mkdir(parents=True)
        try:
            self._network(where)
            self._mounts()
            self._cgroups(where)
            pause = images.pause_image(self.bin_dir)
            workspace = images.workspace_image(self.workspace_references, self.log)
            self._write_config(where, pause.references[0])
            self.components = self._components(where)
            for component in self.components:
                start_component(component, self.log)
                if component.name == "containerd":
                    for image in (pause, workspace):
                        self.load(image)
        except BaseException:
            self.stop()
            raise
        self.log(f"  real node {self.name} at {where.node} in {time.monotonic() - started:.1f}s")

    def stop(self) -> None:
        """Stop the node and remove all it made; safe to call more than once."""
        for component in reversed(self.components):
            component.stop()
        self.components = []
        if self.index >= 0:
            clean(self.index, self.state_dir)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _network(self, where: Addresses) -> None:
        _run("ip", "netns", "add", where.name)
        _run(
            "ip", "link", "add", where.host_veth, "type", "veth",
            "peer", "name", "eth0", "netns", where.name,
        )  # fmt: skip
        _run("ip", "addr", "add", f"{where.host}/30", "dev", where.host_veth)
        _run("ip", "link", "set", where.host_veth, "up")
        inside = ("ip", "netns", "exec", where.name)
        _run(*inside, "ip", "addr", "add", f"{where.node}/30", "dev", "eth0")
        _run(*inside, "ip", "link", "set", "eth0", "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "route", "add", "default", "via", where.host)
        # The machine reaches pods directly, as a cluster network would.
        _run("ip", "route", "replace", where.pod_cidr, "via", where.node)

    def _mounts(self) -> None:
        """A mount namespace for the node, kept by a bind mount of it under the state
        directory; mounts on the machine still reach it, its own never leave it."""
        holder = self._mount_namespace.parent
        holder.mkdir()
        _run("mount", "--bind", str(holder), str(holder))
        _run("mount", "--make-private", str(holder))
        self._mount_namespace.touch()
        _run("unshare", f"--mount={self._mount_namespace}", "--propagation=slave", "true")
        kubelet = self.state_dir / "kubelet"
        (kubelet / "device-plugins").mkdir(parents=True)
        KUBELET_ROOT.mkdir(parents=True, exist_ok=True)
        _run(
            "nsenter", f"--mount={self._mount_namespace}", "--",
            "mount", "--bind", str(kubelet), str(KUBELET_ROOT),
        )  # fmt: skip

    def _cgroups(self, where: Addresses) -> None:
        # The kubelet checks that its cgroup root exists in every hierarchy.
        for hierarchy in _hierarchies():
            (hierarchy / where.name).mkdir(exist_ok=True)

    def _write_config(self, where: Addresses, sandbox_image: str) -> None:
        root = self.state_dir
        cni_conf = root / "cni"
        cni_conf.mkdir()
        # containerd watches its CDI directories from the start: this one must exist then.
        self.cdi_dir.mkdir()
        self.registry_hosts.mkdir()
        (cni_conf / "10-devboxes.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": where.name,
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": where.pod_cidr}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(root / "cni-ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                }
            )
        )
        runtime = 'plugins."io.containerd.cri.v1.runtime"'
        (root / "containerd.toml").write_text(
            "version = 3\n"
            f'root = "{root / "containerd-root"}"\n'
            f'state = "{root / "containerd-state"}"\n'
            f'[grpc]\n  address = "{self._socket}"\n'
            f'[metrics]\n  address = "{where.node}:1338"\n'
            '[plugins."io.containerd.cri.v1.images"]\n  snapshotter = "overlayfs"\n'
            '[plugins."io.containerd.cri.v1.images".registry]\n'
            f'  config_path = "{self.registry_hosts}"\n'
            '[plugins."io.containerd.cri.v1.images".pinned_images]\n'
            f'  sandbox = "{sandbox_image}"\n'
            f"[{runtime}]\n"
            # This machine may not lower a process's OOM score: containers get no lower
            # score than containerd's own.
            "  restrict_oom_score_adj = true\n"
            "  netns_mounts_under_state_dir = true\n"
            "  enable_cdi = true\n"
            f'  cdi_spec_dirs = ["{self.cdi_dir}"]\n'
            f"[{runtime}.containerd]\n"
            '  default_runtime_name = "runc"\n'
            + "".join(
                f"[{runtime}.containerd.runtimes.{handler}]\n"
                '  runtime_type = "io.containerd.runc.v2"\n'
                f"[{runtime}.containerd.runtimes.{handler}.options]\n"
                f'  BinaryName = "{self.bin_dir / "runc"}"\n'
                "  SystemdCgroup = false\n"
                for handler in dict.fromkeys(("runc", *self.runtime_handlers))
            )
            + f"[{runtime}.cni]\n"
            f'  bin_dirs = ["{self.bin_dir / "cni"}"]\n'
            f'  conf_dir = "{cni_conf}"\n'
        )
        server = f"https://{where.host}:{self.apiserver_port}"
        for stem, common_name, organization in (
            ("kubelet", f"system:node:{self.name}", "system:nodes"),
            ("kube-proxy", "system:kube-proxy", None),
        ):
            identity = pki.client(self.certs, f"{self.name}-{stem}", common_name, organization)
            path = root / f"{stem}.kubeconfig"
            path.write_text(pki.kubeconfig(self.certs, server, identity, server_name="localhost"))
            path.chmod(0o600)
        if self.spec.devices is not None:
            # The DRA plugin writes the node's ResourceSlice; a testbed gives it the admin's
            # identity rather than a service account bound to a driver's role.
            path = root / "dra-plugin.kubeconfig"
            path.write_text(pki.kubeconfig(self.certs, server, server_name="localhost"))
            path.chmod(0o600)
        kubelet = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine offers cgroup v1 hierarchies only.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{where.name}",
            "containerRuntimeEndpoint": f"unix://{self._socket}",
            "address": where.node,
            "healthzBindAddress": where.node,
            "readOnlyPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.certs.ca_cert)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "failSwapOn": False,
            # The machine's disk is shared with everything else: never evict for it.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "maxPods": 20,
            "podCIDR": where.pod_cidr,
            "registerWithTaints": [t.model_dump(exclude_none=True) for t in self.spec.taints],
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": False,
            # Mounted Secrets follow their object within about this long (a minute by
            # default), as a rotated activity credential must.
            "syncFrequency": "10s",
        }
        (root / "kubelet.yaml").write_text(json.dumps(kubelet, indent=1))

    @property
    def _socket(self) -> Path:
        return self.state_dir / "containerd.sock"

    def _components(self, where: Addresses) -> list[Component]:
        root = self.state_dir
        logs = root / "logs"
        logs.mkdir()
        enter = [
            "nsenter", f"--mount={self._mount_namespace}", f"--net=/run/netns/{where.name}", "--",
        ]  # fmt: skip
        config = root / "containerd.toml"
        labels = ",".join(f"{k}={v}" for k, v in {LABEL_KIND: "real", **self.spec.labels}.items())

        def fixed(argv: list[str]) -> Callable[[], list[str]]:
            return lambda: argv

        def url(address: str) -> Callable[[], str]:
            return lambda: address

        # The node's ports are its own: nothing else binds in its namespace, so none is
        # ever picked again.
        no_ports = None
        path = f"{self.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        env = {**os.environ, "PATH": path}
        gpus = []
        if self.spec.gpus is not None or self.spec.devices is not None:
            self.gpu_share.mkdir()
            shutil.copy(NVIDIA_SMI, self.gpu_share / "nvidia-smi")
        if self.spec.gpus is not None:
            gpus.append(
                Component(
                    "device-plugin",
                    fixed(
                        [
                            *enter,
                            str(self.bin_dir / "fakegpu"),
                            f"--resource={self.spec.gpus.resource}",
                            f"--count={self.spec.gpus.count}",
                            f"--id-prefix=GPU-{self.name}",
                            f"--share={self.gpu_share}",
                            f"--health={where.node}:10260",
                        ]
                    ),
                    url(f"http://{where.node}:10260/healthz"),
                    logs / "device-plugin.log",
                    no_ports,
                )
            )
        if self.spec.devices is not None:
            devices = root / "dra-devices.json"
            devices.write_text(json.dumps(self.dra_devices))
            gpus.append(
                Component(
                    "dra-plugin",
                    fixed(
                        [
                            *enter,
                            str(self.bin_dir / "fakedra"),
                            f"--driver={self.spec.devices.driver}",
                            f"--node={self.name}",
                            f"--kubeconfig={root / 'dra-plugin.kubeconfig'}",
                            f"--kubelet-root={KUBELET_ROOT}",
                            f"--devices={devices}",
                            f"--share={self.gpu_share}",
                            f"--cdi-dir={self.cdi_dir}",
                            f"--health={where.node}:10261",
                        ]
                    ),
                    url(f"http://{where.node}:10261/healthz"),
                    logs / "dra-plugin.log",
                    no_ports,
                )
            )
        return [
            Component(
                "containerd",
                fixed([*enter, str(self.bin_dir / "containerd"), f"--config={config}"]),
                url(f"http://{where.node}:1338/v1/metrics"),
                logs / "containerd.log",
                no_ports,
                env=env,
            ),
            Component(
                "kubelet",
                fixed(
                    [
                        *enter,
                        str(self.bin_dir / "kubelet"),
                        f"--config={root / 'kubelet.yaml'}",
                        f"--kubeconfig={root / 'kubelet.kubeconfig'}",
                        f"--root-dir={KUBELET_ROOT}",
                        f"--hostname-override={self.name}",
                        f"--node-ip={where.node}",
                        f"--node-labels={labels}",
                    ]
                ),
                url(f"http://{where.node}:10248/healthz"),
                logs / "kubelet.log",
                no_ports,
                env=env,
            ),
            Component(
                "kube-proxy",
                fixed(
                    [
                        *enter,
                        str(self.bin_dir / "kube-proxy"),
                        f"--kubeconfig={root / 'kube-proxy.kubeconfig'}",
                        f"--hostname-override={self.name}",
                        "--proxy-mode=iptables",
                        # A box's port forwards as soon as its pod is ready, not up to a
                        # second later.
                        "--iptables-min-sync-period=0s",
                        f"--cluster-cidr={where.pod_cidr}",
                        f"--nodeport-addresses={where.node}/32",
                        f"--healthz-bind-address={where.node}:10256",
                        f"--metrics-bind-address={where.node}:10249",
                        # The machine's conntrack table is not this namespace's to size.
                        "--conntrack-max-per-core=0",
                        "--conntrack-tcp-timeout-established=0",
                        "--conntrack-tcp-timeout-close-wait=0",
                    ]
                ),
                url(f"http://{where.node}:10256/healthz"),
                logs / "kube-proxy.log",
                no_ports,
                env=env,
            ),
            *gpus,
        ]

    def load(self, image: images.Image) -> None:
        """Put ``image`` into the node's containerd under its name and references, as a
        pull would."""
        ctr = [str(self.bin_dir / "ctr"), f"--address={self._socket}", "--namespace=k8s.io"]
        _run(*ctr, "images", "import", str(image.archive))
        for reference in image.references:
            if reference != image.name:
                _run(*ctr, "images", "tag", "--force", image.name, _normalized(reference))


def _normalized(reference: str) -> str:
    """The full name containerd keeps for ``reference``, as the kubelet asks for it."""
    first = reference.split("/", 1)[0]
    if "/" not in reference:
        reference = f"library/{reference}"
        first = ""
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"
