"""The chart installs into a real cluster: its RBAC is enough for the whole lifecycle and
the cluster's id, and the token it generates works and survives upgrades.

The controller runs locally with the chart ServiceAccount's own token (from the
TokenRequest API), so every call it makes is authorized by the chart's roles alone.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import requests
import yaml
from devboxes_testbed import ROCM
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from support import helm_binary, helm_run, service_account_kubeconfig, wait_for

CHART = Path(__file__).resolve().parents[2] / "charts" / "devboxes"


def token_from_notes(testbed: Testbed, notes: str) -> str:
    """Run the command that NOTES gives for loading the token, exactly as printed."""
    (command,) = re.findall(r'^\s*(export DEVBOX_TOKEN=".*")$', notes, flags=re.MULTILINE)
    # The testbed builds kubectl next to helm.
    kubectl_dir = Path(helm_binary()).parent
    env = {
        **os.environ,
        "PATH": f"{kubectl_dir}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(testbed.kubeconfig),
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f'{command}\nprintf %s "$DEVBOX_TOKEN"'],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_helm_install_and_the_role_is_enough_for_the_lifecycle(
    testbed: Testbed, kube: Any, namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube)
    # A dotted key, which the kubectl command in NOTES must escape.
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "operator-token"}, "stringData": {"api.token": "x" * 40}},
    )
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "token": {"existingSecret": "operator-token", "key": "api.token"},
                "gpu": example_settings(namespace)["gpu"],
            }
        )
    )
    notes = helm_run(
        testbed,
        "install",
        "devboxes",
        str(CHART),
        "--namespace",
        namespace,
        "--values",
        str(values),
        "--wait=false",
    )
    assert token_from_notes(testbed, notes) == "x" * 40
    chart_secrets = core.list_namespaced_secret(
        namespace, label_selector="app.kubernetes.io/instance=devboxes"
    ).items
    assert not chart_secrets, "the chart made a token next to the operator's own"
    accounts = {a.metadata.name for a in core.list_namespaced_service_account(namespace).items}
    account = next(a for a in accounts if a.startswith("devboxes"))

    kubeconfig = service_account_kubeconfig(
        testbed, kube, namespace, account, tmp_path / "sa-kubeconfig"
    )
    controller = Controller(
        kubeconfig, example_settings(namespace), tmp_path, lease_seconds=3
    ).start()
    try:
        api = f"{controller.url}/api/v1/devboxes"
        headers = controller.headers()

        def call(method: str, url: str, **kwargs: Any) -> requests.Response:
            response = requests.request(method, url, headers=headers, timeout=150, **kwargs)
            assert response.status_code < 400, response.text
            return response

        call("POST", api, json={"name": "rbac", "gpu": {"profile": ROCM}})
        box = call("GET", f"{api}/rbac?wait=ready&timeout=120").json()
        assert box["state"] == "ready"
        assert call("POST", f"{api}/rbac/stop").json()["state"] == "stopped"
        call("POST", f"{api}/rbac/start")
        call("DELETE", f"{api}/rbac", params={"purge": "true"})
        # The chart's ClusterRole lets it read the cluster's id.
        cluster = call("GET", f"{controller.url}/api/v1/capabilities").json()["cluster"]
        assert cluster == {"name": None, "id": core.read_namespace("kube-system").metadata.uid}
        leases = client.CoordinationV1Api(kube).list_namespaced_lease(namespace).items
        assert [lease.spec.holder_identity for lease in leases] == [controller.identity]

        def claim_gone() -> bool:
            """the purge deleted the home claim"""
            return not core.list_namespaced_persistent_volume_claim(namespace).items

        wait_for(claim_gone)
    finally:
        controller.stop()
    assert "Forbidden" not in controller.log.read_text()


def test_generated_token_works_and_upgrades_keep_it(
    testbed: Testbed, kube: Any, namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube)
    values = tmp_path / "values.yaml"
    # Only the GPU values: no token Secret made by hand, no token value.
    values.write_text(yaml.safe_dump({"gpu": example_settings(namespace)["gpu"]}))
    release = ["devboxes", str(CHART), "--namespace", namespace, "--values", str(values)]
    installed = helm_run(testbed, "install", *release, "--wait=false")

    def stored_token() -> str:
        secret = core.read_namespaced_secret("devboxes-token", namespace)
        return base64.b64decode(secret.data["token"]).decode()

    token = stored_token()
    assert len(token) == 64
    assert token.isascii()
    assert token.isalnum()
    assert token not in installed, "NOTES printed the token"
    assert token_from_notes(testbed, installed) == token

    deployment = client.AppsV1Api(kube).read_namespaced_deployment("devboxes", namespace)
    (env,) = [
        e for e in deployment.spec.template.spec.containers[0].env if e.name == "DEVBOXES_TOKEN"
    ]
    assert (env.value_from.secret_key_ref.name, env.value_from.secret_key_ref.key) == (
        "devboxes-token",
        "token",
    )

    # Every upgrade renders the Secret again: only `lookup` stands between it and a new token.
    upgraded = helm_run(testbed, "upgrade", *release, "--wait=false")
    assert stored_token() == token
    assert token not in upgraded, "NOTES printed the token"
    history = helm_run(testbed, "history", "devboxes", "--namespace", namespace, "-o", "yaml")
    assert [entry["revision"] for entry in yaml.safe_load(history)] == [1, 2]

    # The controller accepts the generated token as its operator token.
    controller = Controller(
        testbed.kubeconfig, example_settings(namespace), tmp_path, token=token
    ).start()
    try:
        response = requests.get(
            f"{controller.url}/api/v1/whoami",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
    finally:
        controller.stop()
    assert response.status_code == 200, response.text

    # Rotation as the operator guide describes it: delete the Secret, upgrade again.
    core.delete_namespaced_secret("devboxes-token", namespace)
    helm_run(testbed, "upgrade", *release, "--wait=false")
    rotated = stored_token()
    assert len(rotated) == 64
    assert rotated != token
