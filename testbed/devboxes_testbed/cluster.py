"""Start and stop a real control plane on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, plus a simulated storage provisioner."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from . import build, nodes, pki
from .errors import TestbedError
from .host import can_run
from .process import (
    START_TIMEOUT,
    Component,
    Exit,
    exits,
    free_port,
    reassigner,
    start_component,
)
from .provisioner import STORAGE_CLASS
from .realnode import RealNode

SERVICE_CIDR = "10.96.0.0/16"
# The names under which a real node holds the workspace image: the controller's default,
# and the GPU profiles' images of testbed/settings.yaml, which it stands in for.
WORKSPACE_REFERENCES = (
    "devboxes/workspace:0.1.0",
    "devboxes/workspace-cuda:12.8",
    "devboxes/workspace-rocm:6.4",
)
# Put on every new node by the apiserver, lifted by the controller-manager once it is Ready.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def schedulable(node: Any) -> bool:
    """Whether the scheduler may place pods on ``node``: Ready, and the not-ready taint the
    apiserver puts on a new node lifted by the controller-manager, which on a loaded machine
    can happen seconds after the node turns Ready."""
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and not any(t.key == NOT_READY_TAINT for t in node.spec.taints or [])


@dataclass
class Testbed:
    """A running (or startable) local cluster in ``state_dir``."""

    __test__ = False  # not a pytest test class despite the name

    state_dir: Path
    pool_file: Path
    log: Callable[[str], None] = print
    bin_dir: Path | None = None
    ports: dict[str, int] = field(default_factory=dict)
    components: list[Component] = field(default_factory=list)
    real_node: RealNode | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig)}

    def _bin(self, name: str) -> str:
        assert self.bin_dir is not None
        return str(self.bin_dir / name)

    def _port(self, name: str) -> int:
        if name not in self.ports:
            self.ports[name] = free_port()
        return self.ports[name]

    def _components(self, certs: pki.Pki) -> list[Component]:
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        kubeconfig = str(self.kubeconfig)
        assert self.bin_dir is not None
        stages = build.stage_files(self.bin_dir)

        def etcd() -> list[str]:
            client_port, peer = self._port("etcd"), self._port("etcd-peer")
            return [
                self._bin("etcd"),
                "--name=testbed",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client_port}",
                f"--advertise-client-urls=http://127.0.0.1:{client_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=testbed=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ]

        def apiserver() -> list[str]:
            return [
                self._bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self._port('etcd')}",
                # Every address, so a real node's kubelet reaches it from its own network
                # namespace; every request still needs a certificate or token.
                "--bind-address=0.0.0.0",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self._port('apiserver')}",
                f"--kubelet-client-certificate={certs.admin_cert}",
                f"--kubelet-client-key={certs.admin_key}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--tls-cert-file={certs.serving_cert}",
                f"--tls-private-key-file={certs.serving_key}",
                f"--client-ca-file={certs.ca_cert}",
                f"--service-account-key-file={certs.sa_public}",
                f"--service-account-signing-key-file={certs.sa_private}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                f"--cert-dir={self.state_dir / 'apiserver-certs'}",
            ]

        def control_loop(binary: str, port: str, certs_dir: str, *flags: str) -> list[str]:
            """A control loop of the admin's kubeconfig, the only one of its kind (no leader
            election), serving HTTPS on loopback with a certificate of its own in
            ``certs_dir``."""
            return [
                self._bin(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self._port(port)}",
                "--leader-elect=false",
                *flags,
                f"--cert-dir={self.state_dir / certs_dir}",
            ]

        def controller_manager() -> list[str]:
            return control_loop(
                "kube-controller-manager",
                "controller-manager",
                "kcm-certs",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={certs.sa_private}",
                f"--root-ca-file={certs.ca_cert}",
                f"--cluster-signing-cert-file={certs.ca_cert}",
                f"--cluster-signing-key-file={certs.ca_key}",
            )

        def scheduler() -> list[str]:
            return control_loop("kube-scheduler", "scheduler", "scheduler-certs")

        def kwok() -> list[str]:
            return [
                self._bin("kwok"),
                f"--kubeconfig={kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={nodes.KWOK_ANNOTATION}=fake",
                f"--server-address=127.0.0.1:{self._port('kwok')}",
                "--node-ip=127.0.0.1",
                "--cidr=10.244.0.1/16",
                *(f"--config={stage}" for stage in stages),
            ]

        def provisioner() -> list[str]:
            return [
                sys.executable,
                "-m",
                "devboxes_testbed",
                "provisioner",
                f"--kubeconfig={kubeconfig}",
                f"--port={self._port('provisioner')}",
                f"--volumes-dir={self.state_dir / 'volumes'}",
            ]

        def served(
            name: str,
            argv: Callable[[], list[str]],
            scheme: str,
            health_path: str,
            *ports: str,
            env: dict[str, str] | None = None,
        ) -> Component:
            """Component ``name``, healthy when ``health_path`` on loopback at the first of
            its ``ports`` answers; a taken port is picked again with all of them."""
            return Component(
                name,
                argv,
                lambda: f"{scheme}://127.0.0.1:{self.ports[ports[0]]}{health_path}",
                logs / f"{name}.log",
                reassigner(self.ports, *ports),
                env=env,
            )

        return [
            served("etcd", etcd, "http", "/health", "etcd", "etcd-peer"),
            served("kube-apiserver", apiserver, "https", "/livez", "apiserver"),
            served(
                "kube-controller-manager",
                controller_manager,
                "https",
                "/healthz",
                "controller-manager",
            ),
            served("kube-scheduler", scheduler, "https", "/healthz", "scheduler"),
            served("kwok", kwok, "http", "/healthz", "kwok"),
            served(
                "provisioner",
                provisioner,
                "http",
                "/healthz",
                "provisioner",
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            ),
        ]

    def start(self) -> None:
        """Start every component in order; on any failure stop what started and raise."""
        self.bin_dir = self.bin_dir or build.ensure_built(self.log)
        pool_file = nodes.load(self.pool_file)
        if pool_file.realNode is not None:
            why = can_run()
            if why is not None:
                self.log(f"  no real node: {why}; a kwok node stands in for it")
                pool_file = pool_file.with_standin()
        started = time.monotonic()
        # Every start is a fresh cluster: no etcd data or certificates survive from a previous one.
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir.mkdir(parents=True)
        certs = pki.create(self.state_dir / "pki")
        self.components = self._components(certs)
        try:
            for component in self.components:
                if component.name == "kube-controller-manager":
                    self._write_kubeconfig(certs)
                start_component(component, self.log)
            self._wait_apiserver_ready()
            self._create_cluster_objects(pool_file)
            if pool_file.realNode is not None:
                self._start_real_node(certs, pool_file)
        except BaseException:
            self.stop()
            raise
        self.log(f"testbed ready in {time.monotonic() - started:.1f}s: {self.server}")

    def _start_real_node(self, certs: pki.Pki, pool_file: nodes.PoolFile) -> None:
        assert self.bin_dir is not None
        assert pool_file.realNode is not None
        self.real_node = RealNode(
            self.state_dir / "real-node",
            self.bin_dir,
            certs,
            self.ports["apiserver"],
            pool_file.realNode,
            WORKSPACE_REFERENCES,
            tuple(c.handler for c in pool_file.runtimeClasses),
            self.log,
        )
        self.real_node.start()
        registry = self._registry()
        self.components.append(registry)
        start_component(registry, self.log)
        self.real_node.trust_registry(self.registry)
        core = client.CoreV1Api(self.api_client())
        self._point_kubernetes_service(core, self.real_node.machine_address)
        self._wait_nodes_ready({self.real_node.name}, core)
        gpus = pool_file.realNode.gpus
        if gpus is not None:
            self._wait_allocatable(self.real_node.name, gpus.resource, gpus.count, core)

    @property
    def registry(self) -> str:
        """The OCI registry's address, ``host:port`` on the machine's end of the real node's
        link: the machine pushes there and the node's containerd pulls from it, over plain
        HTTP."""
        if self.real_node is None or "registry" not in self.ports:
            raise TestbedError("the registry runs with the real node only")
        return f"{self.real_node.machine_address}:{self.ports['registry']}"

    def _registry(self) -> Component:
        """The CNCF distribution registry, storing in the state directory. It listens on the
        machine's end of the real node's link rather than loopback, which the node cannot
        reach, nor every address, since it asks no one for credentials."""
        binary = build.ensure_registry(self.log)
        assert self.real_node is not None
        host = self.real_node.machine_address
        config_file = self.state_dir / "registry.json"

        def argv() -> list[str]:
            settings = {
                "version": "0.1",
                "log": {"level": "warn", "accesslog": {"disabled": True}},
                "storage": {"filesystem": {"rootdirectory": str(self.state_dir / "registry")}},
                "http": {"addr": f"{host}:{self._port('registry')}"},
            }
            # The registry reads YAML, of which JSON is a part.
            config_file.write_text(json.dumps(settings))
            return [str(binary), "serve", str(config_file)]

        return Component(
            "registry",
            argv,
            lambda: f"http://{self.registry}/v2/",
            self.state_dir / "logs" / "registry.log",
            reassigner(self.ports, "registry"),
            # Its traces would go to an OpenTelemetry collector on loopback that is not there.
            env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
        )

    def _point_kubernetes_service(self, core: Any, address: str) -> None:
        """Pods reach the apiserver at the `kubernetes` Service, as in any cluster: its
        endpoint is where the real node reaches this machine (the apiserver keeps no
        endpoints of its own here)."""
        port = self.ports["apiserver"]
        core.create_namespaced_endpoints(
            "default",
            {
                "metadata": {"name": "kubernetes"},
                "subsets": [
                    {
                        "addresses": [{"ip": address}],
                        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                    }
                ],
            },
        )

    def _wait_allocatable(self, name: str, resource: str, count: int, core: Any) -> None:
        """Wait until the kubelet reports the device plugin's devices on its node."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            allocatable = core.read_node(name).status.allocatable or {}
            if allocatable.get(resource) == str(count):
                return
            time.sleep(0.3)
        raise TestbedError(f"node {name} never reported {count} {resource}")

    def _write_kubeconfig(self, certs: pki.Pki) -> None:
        self.kubeconfig.write_text(pki.kubeconfig(certs, self.server))
        self.kubeconfig.chmod(0o600)

    def api_client(self) -> Any:
        configuration = client.Configuration()
        config.load_kube_config(str(self.kubeconfig), client_configuration=configuration)
        return client.ApiClient(configuration)

    def _wait_apiserver_ready(self) -> None:
        api = client.CoreV1Api(self.api_client())
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                api.read_namespaced_service_account("default", "default")
                return
            time.sleep(0.3)
        raise TestbedError(
            "the default ServiceAccount never appeared: is the controller-manager running?"
        )

    def _create_cluster_objects(self, pool_file: nodes.PoolFile) -> None:
        api_client = self.api_client()
        core = client.CoreV1Api(api_client)
        node_list = nodes.node_objects(pool_file)
        uids = {}
        for node in node_list:
            status = node.pop("status")
            uids[node["metadata"]["name"]] = core.create_node(node).metadata.uid
            core.patch_node_status(node["metadata"]["name"], {"status": status})
        resource = client.ResourceV1Api(api_client)
        for device_class in nodes.device_class_objects(pool_file):
            resource.create_device_class(device_class)
        for resource_slice in nodes.resource_slices(pool_file, uids):
            resource.create_resource_slice(resource_slice)
        node_api = client.NodeV1Api(api_client)
        for runtime_class in pool_file.runtimeClasses:
            node_api.create_runtime_class(
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": runtime_class.name},
                    "handler": runtime_class.handler,
                }
            )
        client.StorageV1Api(api_client).create_storage_class(STORAGE_CLASS)
        self._wait_nodes_ready({n["metadata"]["name"] for n in node_list}, core)
        summary = ", ".join(f"{p.count}× {p.name}" for p in pool_file.pools)
        self.log(f"  nodes ready: {summary}")

    def _wait_nodes_ready(self, names: set[str], core: Any) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            ready = {node.metadata.name for node in core.list_node().items if schedulable(node)}
            if names <= ready:
                return
            time.sleep(0.3)
        raise TestbedError(f"nodes never became Ready: {sorted(names - ready)}")

    def stop(self) -> None:
        """Stop everything in reverse order; safe to call more than once."""
        if self.real_node is not None:
            self.real_node.stop()
        for component in reversed(self.components):
            component.stop()

    def component(self, name: str) -> Component:
        for component in self.components:
            if component.name == name:
                return component
        raise TestbedError(f"no component named {name!r}")

    def restart(self, name: str) -> None:
        """Stop one component and start it again with the same flags, ports and data."""
        component = self.component(name)
        component.stop()
        start_component(component, self.log)

    def freeze(self, name: str) -> None:
        """Suspend a component (SIGSTOP): its connections stay open and nothing answers."""
        self._signal(name, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)

    def _signal(self, name: str, signum: signal.Signals) -> None:
        process = self.component(name).process
        if process is None or process.poll() is not None:
            raise TestbedError(f"{name} is not running")
        os.killpg(process.pid, signum)

    def alive(self) -> list[str]:
        return [c.name for c in self.components if c.process and c.process.poll() is None]

    def exited(self) -> list[Exit]:
        """Components, the real node's among them, that exited since they started."""
        node = self.real_node.components if self.real_node is not None else []
        return exits([*self.components, *node])
