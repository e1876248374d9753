"""A simulated storage provisioner: kwok plays kubelets, this plays a CSI driver.

It binds every claim of the testbed StorageClass to a freshly created volume of the
requested size, and deletes released volumes, so pods with claims can be scheduled.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

PROVISIONER_NAME = "testbed.devboxes.io/simulated"
STORAGE_CLASS: dict[str, Any] = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {
        "name": "standard",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
    },
    "provisioner": PROVISIONER_NAME,
    "reclaimPolicy": "Delete",
    "allowVolumeExpansion": True,
    "volumeBindingMode": "Immediate",
}


def volume_for(claim: dict[str, Any], volumes_dir: Path) -> dict[str, Any]:
    """The PersistentVolume that satisfies one pending claim."""
    metadata = claim["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{metadata['uid']}",
            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER_NAME},
        },
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": claim["spec"].get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS["metadata"]["name"],
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": metadata["namespace"],
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
            "hostPath": {"path": str(volumes_dir / metadata["uid"]), "type": "DirectoryOrCreate"},
        },
    }


class Provisioner:
    """Two watch loops in daemon threads: claims to provision, volumes to delete."""

    def __init__(self, kubeconfig: str, volumes_dir: Path, log: Callable[[str], None]) -> None:
        self._kubeconfig = kubeconfig
        self._volumes_dir = volumes_dir
        self._log = log
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for target in (self._claims, self._volumes):
            thread = threading.Thread(target=self._loop, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _core(self) -> Any:
        configuration = client.Configuration()
        config.load_kube_config(self._kubeconfig, client_configuration=configuration)
        return client.CoreV1Api(client.ApiClient(configuration))

    def _loop(self, target: Callable[[Any], None]) -> None:
        core = self._core()
        while not self._stop.is_set():
            try:
                target(core)
            except Exception as err:  # noqa: BLE001 - a watch dies with the apiserver; retry
                if not self._stop.is_set():
                    self._log(f"  provisioner: {type(err).__name__}: {err}, retrying")
                self._stop.wait(1)

    def _claims(self, core: Any) -> None:
        stream = watch.Watch()
        for event in stream.stream(
            core.list_persistent_volume_claim_for_all_namespaces,
            timeout_seconds=5,
            deserialize=False,
        ):
            if self._stop.is_set():
                stream.stop()
                return
            claim = event["object"]
            spec = claim.get("spec") or {}
            if (
                spec.get("storageClassName") == STORAGE_CLASS["metadata"]["name"]
                and not spec.get("volumeName")
                and (claim.get("status") or {}).get("phase", "Pending") == "Pending"
                and event["type"] != "DELETED"
            ):
                with contextlib.suppress(Exception):
                    core.create_persistent_volume(volume_for(claim, self._volumes_dir))

    def _volumes(self, core: Any) -> None:
        stream = watch.Watch()
        for event in stream.stream(
            core.list_persistent_volume, timeout_seconds=5, deserialize=False
        ):
            if self._stop.is_set():
                stream.stop()
                return
            volume = event["object"]
            annotations = (volume.get("metadata") or {}).get("annotations") or {}
            if (
                annotations.get("pv.kubernetes.io/provisioned-by") == PROVISIONER_NAME
                and volume.get("status", {}).get("phase") == "Released"
                and event["type"] != "DELETED"
            ):
                with contextlib.suppress(Exception):
                    core.delete_persistent_volume(volume["metadata"]["name"])
                    path = Path((volume["spec"].get("hostPath") or {}).get("path", ""))
                    if path.parent == self._volumes_dir:
                        shutil.rmtree(path, ignore_errors=True)


def serve(kubeconfig: str, port: int, volumes_dir: Path) -> None:
    """Run as its own process, like every other component, with /healthz on loopback."""
    provisioner = Provisioner(kubeconfig, volumes_dir, lambda message: print(message, flush=True))

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Health)
    signal.signal(signal.SIGTERM, lambda signum, frame: server.shutdown())
    provisioner.start()
    print(f"provisioning claims of StorageClass {STORAGE_CLASS['metadata']['name']}", flush=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with contextlib.suppress(KeyboardInterrupt):
        thread.join()
    provisioner.stop()
    sys.exit(0)
