"""Stopped boxes written straight to the apiserver as the controller renders them.

A stopped box is its home claim and its Deployment at zero replicas; it holds no SSH
Service (stop deletes it). No pod is scheduled and no node port is taken, so thousands of
them cost only their objects, and the controller finds nothing to repair or remove.
Lists, filters and paging then have real boxes to answer about without the minutes that
starting them would take.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from devboxes_controller.box import render
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
        spec = render.BoxSpec(
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


def restart_stopped(
    api_client: Any, namespace: str, names: Iterable[str], workers: int = 8
) -> None:
    """Leave behind what a start and a stop of each stopped box would: a start writes a new
    start stamp on the pod template, which Kubernetes rolls out as a ReplicaSet of its
    own (here at zero replicas, the box staying stopped)."""
    apps = client.AppsV1Api(api_client)

    def restart(name: str) -> None:
        stamp = format_timestamp(datetime.now(UTC), microseconds=True)
        template = {"metadata": {"annotations": {render.ANNOTATION_STARTED_AT: stamp}}}
        apps.patch_namespaced_deployment(
            render.object_names(name).deployment, namespace, {"spec": {"template": template}}
        )

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(restart, names))
