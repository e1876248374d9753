"""Record the Kubernetes objects of boxes in several states, as the apiserver sends them.

The cache-slimming tests (tests/controller/state/test_controller_slim.py) run on these real
shapes. Re-record after a Kubernetes upgrade or a change to what a box is made of:

    PYTHONPATH=testbed:tests .venv/bin/python tests/data/record_box_objects.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings

REPO = Path(__file__).resolve().parents[2]
OUTPUT = Path(__file__).with_name("box_objects.json")
NAMESPACE = "devboxes-record"
# name -> create request: a ready CPU box, a ready GPU box, one that is stopped, one the
# scheduler cannot place, one Kubernetes refuses to create (no "amd" RuntimeClass) and a
# GPU box deleted without purge, whose home volume is retained.
BOXES: dict[str, dict[str, Any]] = {
    "cpu": {"name": "cpu", "repository": "https://github.com/example/project.git"},
    "l4": {"name": "l4", "gpu": {"profile": "nvidia-l4"}},
    "stopped": {"name": "stopped"},
    "unplaceable": {"name": "unplaceable", "gpu": {"profile": "nvidia-h100"}},
    "refused": {"name": "refused", "gpu": {"profile": "amd-rocm"}},
    "retained": {"name": "retained", "gpu": {"profile": "nvidia-l4"}},
}
KINDS = ("deployments", "replicasets", "pods", "services", "persistentvolumeclaims", "events")


def main() -> int:
    from kubernetes import client

    with tempfile.TemporaryDirectory(prefix="record-") as workdir:
        bed = Testbed(Path(workdir) / "testbed", REPO / "testbed" / "nodes.yaml")
        bed.start()
        try:
            api = bed.api_client()
            core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            settings = example_settings(NAMESPACE)
            # The refused box needs a profile naming a RuntimeClass the testbed lacks, the
            # unplaceable one a node pool it lacks.
            profiles = settings["gpu"]["profiles"]
            for profile in profiles:
                if profile["name"] == "amd-rocm":
                    profile["runtimeClassName"] = "amd"
            h100 = {**profiles[0], "name": "nvidia-h100", "displayName": "NVIDIA H100"}
            profiles.append({**h100, "nodeSelector": {"accelerator": "nvidia-h100"}})
            controller = Controller(bed.kubeconfig, settings, Path(workdir)).start()
            try:
                record(controller, core, apps)
            finally:
                controller.stop()
        finally:
            bed.stop()
    return 0


def record(controller: Controller, core: Any, apps: Any) -> None:
    url = f"{controller.url}/api/v1/devboxes"
    headers = controller.headers()
    for body in BOXES.values():
        requests.post(url, json=body, headers=headers, timeout=30).raise_for_status()
    for name in ("cpu", "l4", "stopped"):
        requests.get(
            f"{url}/{name}", params={"wait": "ready", "timeout": 60}, headers=headers, timeout=90
        ).raise_for_status()
    requests.post(f"{url}/stopped/stop", headers=headers, timeout=30).raise_for_status()
    requests.delete(f"{url}/retained", headers=headers, timeout=30).raise_for_status()
    time.sleep(5)  # the stopped pod's deletion and the refused box's events land
    lists = {
        "deployments": apps.list_namespaced_deployment,
        "replicasets": apps.list_namespaced_replica_set,
        "pods": core.list_namespaced_pod,
        "services": core.list_namespaced_service,
        "persistentvolumeclaims": core.list_namespaced_persistent_volume_claim,
        "events": core.list_namespaced_event,
    }
    objects = {
        kind: json.loads(lists[kind](NAMESPACE, _preload_content=False).data)["items"]
        for kind in KINDS
    }
    OUTPUT.write_text(json.dumps(objects, indent=1, sort_keys=True) + "\n")
    states = {
        box["name"]: box["state"]
        for box in requests.get(url, headers=headers, timeout=30).json()["items"]
    }
    print(f"wrote {OUTPUT}: {', '.join(f'{k} {v}' for k, v in sorted(states.items()))}")


if __name__ == "__main__":
    sys.exit(main())
