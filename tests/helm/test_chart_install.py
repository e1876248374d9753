"""The chart installs into a real cluster, and its RBAC is enough for the whole lifecycle.

The controller runs locally with the chart ServiceAccount's own token (from the
TokenRequest API), so every call it makes is authorized by the chart's Role alone.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from controllers import ControllerProcess, example_settings
from devboxes_testbed import build
from devboxes_testbed.cluster import Testbed
from kubernetes import client
from support import service_account_kubeconfig, wait_for

CHART = Path(__file__).resolve().parents[2] / "charts" / "devboxes"


def helm() -> str:
    directory = build.installed()
    if directory is None:
        pytest.skip("the testbed binaries (helm) are not built: run `make testbed`")
    return str(directory / "helm")


def test_helm_install_and_the_role_is_enough_for_the_lifecycle(
    testbed: Testbed, kube: Any, namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "devboxes-token"}, "stringData": {"token": "x" * 40}}
    )
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "token": {"existingSecret": "devboxes-token"},
                "gpu": example_settings(namespace)["gpu"],
            }
        )
    )
    result = subprocess.run(
        [
            helm(),
            "install",
            "devboxes",
            str(CHART),
            "--namespace",
            namespace,
            "--values",
            str(values),
            "--kubeconfig",
            str(testbed.kubeconfig),
            "--wait=false",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    accounts = {a.metadata.name for a in core.list_namespaced_service_account(namespace).items}
    account = next(a for a in accounts if a.startswith("devboxes"))

    kubeconfig = service_account_kubeconfig(
        testbed, kube, namespace, account, tmp_path / "sa-kubeconfig"
    )
    controller = ControllerProcess(
        kubeconfig, example_settings(namespace), tmp_path, lease_seconds=3
    ).start()
    try:
        api = f"{controller.url}/api/v1/devboxes"
        headers = controller.headers()

        def call(method: str, url: str, **kwargs: Any) -> requests.Response:
            response = requests.request(method, url, headers=headers, timeout=30, **kwargs)
            assert response.status_code < 400, response.text
            return response

        call("POST", api, json={"name": "rbac", "gpu": {"profile": "amd-rocm"}})
        box = call("GET", f"{api}/rbac?wait=ready&timeout=60").json()
        assert box["state"] == "ready"
        assert call("POST", f"{api}/rbac/stop").json()["state"] == "stopped"
        call("POST", f"{api}/rbac/start")
        call("DELETE", f"{api}/rbac", params={"purge": "true"})
        leases = client.CoordinationV1Api(kube).list_namespaced_lease(namespace).items
        assert [lease.spec.holder_identity for lease in leases] == [controller.identity]

        def claim_gone() -> bool:
            """the purge deleted the home claim"""
            return not core.list_namespaced_persistent_volume_claim(namespace).items

        wait_for(claim_gone)
    finally:
        controller.stop()
    assert "Forbidden" not in controller.log.read_text()
