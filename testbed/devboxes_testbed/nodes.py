"""Node pools: a declarative file of simulated nodes that advertise extended resources."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import TestbedError

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
POOL_LABEL = "testbed.devboxes.io/pool"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Taint(_Strict):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Pool(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
    count: int = Field(ge=0, le=5000)
    capacity: dict[str, str]
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)


class RuntimeClass(_Strict):
    name: str
    handler: str


class PoolFile(_Strict):
    pools: list[Pool]
    runtimeClasses: list[RuntimeClass] = Field(default_factory=list)


def load(path: Path) -> PoolFile:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise TestbedError(f"{path}: cannot read node pool file: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise TestbedError(f"{path}: not valid YAML: {err}") from None
    try:
        return PoolFile.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in err.errors()
        )
        raise TestbedError(f"{path}: {problems}") from None


def node_objects(pool_file: PoolFile) -> list[dict[str, Any]]:
    """The Node objects for every pool, ready to create."""
    nodes = []
    for pool in pool_file.pools:
        capacity = {"pods": "110", **pool.capacity}
        for index in range(pool.count):
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": f"{pool.name}-{index}",
                        "annotations": {KWOK_ANNOTATION: "fake"},
                        "labels": {
                            **pool.labels,
                            POOL_LABEL: pool.name,
                            "kubernetes.io/hostname": f"{pool.name}-{index}",
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "type": "kwok",
                        },
                    },
                    "spec": {"taints": [t.model_dump(exclude_none=True) for t in pool.taints]},
                    "status": {"capacity": capacity, "allocatable": capacity},
                }
            )
    return nodes
