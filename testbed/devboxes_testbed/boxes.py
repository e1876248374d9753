"""Stopped boxes written straight to the apiserver as the controller renders them.

A stopped box is its home claim and its Deployment at zero replicas; it holds no SSH
Service (stop deletes it). No pod is scheduled and no node port is taken, so thousands of
them cost only their objects, and the controller finds nothing to repair or remove.
Lists, filters and paging then have real boxes to answer about without the minutes that
starting them would take.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from devboxes_controller.box import naming, render
from devboxes_controller.box.spec import BoxSpec
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.k8s.timestamps import format_timestamp
from kubernetes import client

from devboxes_sdk.models import GpuRequest


def write_stopped(
    api_client: Any,
    settings: dict[str, Any],
    names: Iterable[str],
    profile: str | None = None,
    workers: int = 8,
    owner: Callable[[str], str | None] | None = None,
) -> None:
    """Create a stopped box of each name, of this GPU profile (None: a CPU box), owned by
    ``owner(name)`` (the operator's when None)."""
    parsed = settings_from_mapping(settings)
    gpu = parsed.gpu.resolve(GpuRequest(profile=profile)) if profile is not None else None
    apps = client.AppsV1Api(api_client)
    core = client.CoreV1Api(api_client)
    namespace = parsed.namespace
    expires = datetime.now(UTC) + timedelta(hours=parsed.ttl.max_hours)

    def write(name: str) -> None:
        spec = BoxSpec(
            name=name,
            preset="small",
            ttl_hours=parsed.ttl.max_hours,
            repository=None,
            expires_at=expires,
            gpu=gpu,
            owner=owner(name) if owner is not None else None,
        )
        core.create_namespaced_persistent_volume_claim(namespace, render.render_pvc(spec, parsed))
        deployment = render.render_deployment(spec, parsed, replicas=0)
        apps.create_namespaced_deployment(namespace, deployment)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(write, names))


def write_replica_history(
    api_client: Any, namespace: str, names: Iterable[str], workers: int = 8
) -> int:
    """Write, for each stopped box, the older ReplicaSets Kubernetes keeps of a box started
    and stopped twice (each start is a rollout; the Deployment keeps REVISION_HISTORY), as
    its Deployment controller leaves them: owned by the Deployment, at zero replicas, with
    the start stamp of their time. The number written."""
    apps = client.AppsV1Api(api_client)
    wanted = set(names)
    deployments = []
    token = None
    while True:
        page = apps.list_namespaced_deployment(namespace, limit=1000, _continue=token)
        deployments += [
            d for d in page.items if (d.metadata.labels or {}).get(naming.LABEL_BOX) in wanted
        ]
        token = page.metadata._continue
        if not token:
            break

    def write(deployment: Any) -> None:
        for _ in range(render.REVISION_HISTORY):
            stamp = format_timestamp(datetime.now(UTC), microseconds=True)
            template = api_client.sanitize_for_serialization(deployment.spec.template)
            annotations = template["metadata"].setdefault("annotations", {})
            annotations[naming.ANNOTATION_STARTED_AT] = stamp
            hash_ = hashlib.sha256(stamp.encode()).hexdigest()[:10]
            labels = {**template["metadata"]["labels"], "pod-template-hash": hash_}
            template["metadata"]["labels"] = labels
            selector = {**deployment.spec.selector.match_labels, "pod-template-hash": hash_}
            owner = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": deployment.metadata.name,
                "uid": deployment.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
            body = {
                "metadata": {
                    "name": f"{deployment.metadata.name}-{hash_}",
                    "labels": labels,
                    "ownerReferences": [owner],
                },
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": selector},
                    "template": template,
                },
            }
            apps.create_namespaced_replica_set(namespace, body)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(write, deployments))
    return len(deployments) * render.REVISION_HISTORY
