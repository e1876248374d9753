"""Node pools: a declarative file of simulated nodes that advertise extended resources, and
optionally the one real node (realnode.py) with its labels, taints and simulated GPUs."""

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


class Gpus(_Strict):
    """Simulated GPUs the real node's device plugin advertises."""

    resource: str = Field(pattern=r"^[a-z0-9.-]+/[a-z0-9.-]+$")
    count: int = Field(ge=1, le=8)


class RealNode(_Strict):
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    gpus: Gpus | None = None


# What a kwok node standing in for the real node offers, on a machine that cannot run one.
STANDIN_CAPACITY = {"cpu": "16", "memory": "64Gi"}


class PoolFile(_Strict):
    pools: list[Pool]
    runtimeClasses: list[RuntimeClass] = Field(default_factory=list)
    realNode: RealNode | None = None

    def with_standin(self) -> PoolFile:
        """This file with a kwok node in place of the real node."""
        if self.realNode is None:
            return self
        gpus = self.realNode.gpus
        standin = Pool(
            name="real-standin",
            count=1,
            capacity={**STANDIN_CAPACITY, **({gpus.resource: str(gpus.count)} if gpus else {})},
            labels=self.realNode.labels,
            taints=self.realNode.taints,
        )
        return self.model_copy(update={"pools": [*self.pools, standin], "realNode": None})


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
