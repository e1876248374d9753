"""Retained home volumes and extending a running box, against the real testbed."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from devboxes_controller.box import naming, render
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_testbed import MIG
from devboxes_testbed.controller import Controller, example_settings
from kubernetes import client
from live_objects import live_object
from support import StartController, event_messages, two_hour_spec, wait_for

from devboxes_sdk import Client, Conflict, NotFound
from devboxes_sdk.models import Devbox, VolumeList

DEVBOX = str(Path(__file__).resolve().parents[3] / ".venv" / "bin" / "devbox")


def call(process: Controller, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(
        method, f"{process.url}/api/v1{path}", headers=process.headers(), timeout=30, **kwargs
    )


def volumes(process: Controller) -> dict[str, dict[str, Any]]:
    response = call(process, "GET", "/volumes")
    assert response.status_code == 200, response.text
    VolumeList.model_validate_json(response.content)
    return {volume["name"]: volume for volume in response.json()["items"]}


def devbox(process: Controller, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVBOX_")}
    env |= {
        "DEVBOX_URL": process.url,
        "DEVBOX_TOKEN": process.token,
        "DEVBOX_CONFIG": "/nonexistent/devbox.toml",
    }
    return subprocess.run(
        [DEVBOX, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def claim_uid(kube: Any, namespace: str, name: str) -> str | None:
    claim = live_object(
        client.CoreV1Api(kube).read_namespaced_persistent_volume_claim,
        naming.object_names(name).pvc,
        namespace,
    )
    return None if claim is None else str(claim.metadata.uid)


def test_retained_volumes_are_listed_purged_by_name_and_reused(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    process = start_controller()
    sdk = Client(process.url, process.token)
    # A claim left alone by a crash before the Deployment was written.
    settings = settings_from_mapping(example_settings(namespace))
    client.CoreV1Api(kube).create_namespaced_persistent_volume_claim(
        namespace, render.render_pvc(two_hour_spec("leftover"), settings)
    )
    sdk.create("gone", preset="medium", gpu=MIG)
    sdk.create("alive")
    assert sdk.delete("gone").purged is False

    listed = wait_for(lambda: (found := volumes(process)).keys() >= {"gone", "leftover"} and found)
    assert set(listed) == {"gone", "leftover"}, "a box that exists keeps its volume off the list"
    assert listed["gone"]["claim"] == "devbox-gone-home"
    assert listed["gone"]["size"] == "30Gi"
    assert listed["gone"]["last_profile"] == MIG
    assert listed["leftover"]["last_profile"] is None
    assert listed["leftover"]["size"] == "20Gi"
    assert [v.name for v in sdk.volumes()] == sorted(
        listed, key=lambda n: (listed[n]["created_at"], n)
    )

    table = devbox(process, "volumes")
    assert table.returncode == 0, table.stderr
    assert "devbox-gone-home" in table.stdout
    assert MIG in table.stdout

    # Only a retained volume can be purged this way; typed names are normalised as for boxes.
    refused = call(process, "DELETE", "/volumes/alive")
    assert refused.status_code == 409, refused.text
    assert "delete the box with purge" in refused.json()["detail"]
    assert call(process, "DELETE", "/volumes/nothing").status_code == 404
    assert call(process, "DELETE", "/volumes/bad_name").status_code == 422
    unconfirmed = devbox(process, "volumes", "purge", "leftover")
    assert unconfirmed.returncode == 2, unconfirmed.stderr
    assert "pass --yes" in unconfirmed.stderr
    assert claim_uid(kube, namespace, "leftover") is not None

    purged = devbox(process, "volumes", "purge", "LEFTOVER", "--yes")
    assert purged.returncode == 0, purged.stderr
    assert "devbox-leftover-home" in purged.stdout
    assert "leftover" not in volumes(process), "the list read right after a purge shows it"
    wait_for(lambda: claim_uid(kube, namespace, "leftover") is None)
    with pytest.raises(NotFound, match="no retained home volume for 'leftover'"):
        sdk.purge_volume("leftover")

    # Creating the box again picks up its volume, and says so.
    kept = claim_uid(kube, namespace, "gone")
    reused = devbox(process, "create", "gone", "--no-wait")
    assert reused.returncode == 0, reused.stderr
    assert "reusing the retained home volume devbox-gone-home (30Gi)" in reused.stderr
    assert claim_uid(kube, namespace, "gone") == kept
    assert "gone" not in volumes(process)
    assert wait_for(lambda: event_messages(kube, namespace, "gone", "Created"))
    assert any(
        "reusing its retained home volume" in m
        for m in event_messages(kube, namespace, "gone", "Created")
    )
    # The CPU box that took over the volume is now its last user.
    claim = client.CoreV1Api(kube).read_namespaced_persistent_volume_claim(
        "devbox-gone-home", namespace
    )
    assert naming.LABEL_GPU_PROFILE not in (claim.metadata.labels or {})
    for name in ("gone", "alive"):
        sdk.delete(name, purge=True)


def test_extend_moves_the_deadline_within_the_maximum_ttl(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    settings = example_settings(namespace)
    settings["ttl"] = {"defaultHours": 2, "maxHours": 4}
    process = start_controller(settings)
    sdk = Client(process.url, process.token)
    # The time to live of a box begins once its pod has a node.
    box = sdk.create("longer", ttl_hours=2)
    apps = client.AppsV1Api(kube)

    def deadline_set() -> str | None:
        """the box's pod has a node and its deadline no longer waits for one"""
        deployment = apps.read_namespaced_deployment(
            naming.object_names("longer").deployment, namespace
        )
        annotations = deployment.metadata.annotations or {}
        if naming.ANNOTATION_WAITING_SINCE in annotations:
            return None
        return str(annotations[naming.ANNOTATION_EXPIRES_AT])

    deadline = datetime.fromisoformat(wait_for(deadline_set, timeout=60))
    box = wait_for(lambda: (current := box.refresh()).expires_at == deadline and current)
    assert box.expires_at is not None
    first = box.expires_at

    extended = call(process, "POST", "/devboxes/longer/extend", json={"hours": 1})
    assert extended.status_code == 200, extended.text
    moved = Devbox.model_validate_json(extended.content)
    assert moved.expires_at == first + timedelta(hours=1)
    assert moved.state != "stopped"
    assert wait_for(lambda: event_messages(kube, namespace, "longer", "Extended"))

    # Three hours from now is the most the four-hour maximum leaves room for.
    beyond = call(process, "POST", "/devboxes/longer/extend", json={"hours": 2})
    assert beyond.status_code == 409, beyond.text
    assert beyond.json()["detail"].startswith("hours must be at most 1: ")
    assert "4 hours" in beyond.json()["detail"]
    refused = devbox(process, "extend", "longer", "--hours", "3")
    assert refused.returncode == 2, refused.stderr
    assert "--hours must be at most 1: " in refused.stderr
    over = devbox(process, "extend", "longer", "--hours", "5")
    assert over.returncode == 2, over.stderr
    assert "--hours must be at most 4, the maximum time to live" in over.stderr
    assert box.refresh().expires_at == first + timedelta(hours=1)

    done = devbox(process, "extend", "longer", "--hours", "1")
    assert done.returncode == 0, done.stderr
    assert sdk.get("longer").expires_at == first + timedelta(hours=2)

    for body in ({"hours": 0}, {"hours": "many"}, {}, {"hours": 1, "minutes": 5}):
        response = call(process, "POST", "/devboxes/longer/extend", json=body)
        assert response.status_code == 422, (body, response.text)
        assert isinstance(response.json()["detail"], list)
    assert call(process, "POST", "/devboxes/ghost/extend", json={"hours": 1}).status_code == 404

    sdk.stop("longer")
    with pytest.raises(Conflict, match="is stopped; start it"):
        sdk.extend("longer", 1)
    sdk.delete("longer", purge=True)
