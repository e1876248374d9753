"""Node pools: a declarative file of simulated nodes that advertise extended resources or
publish devices for Dynamic Resource Allocation, the DeviceClasses that select those
devices, and optionally the one real node (realnode.py) with its labels, taints and
simulated GPUs."""

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


# A device attribute as resource.k8s.io/v1 writes it: exactly one typed value.
Attribute = dict[Literal["string", "int", "bool", "version"], str | int | bool]


class DeviceKind(_Strict):
    """``count`` devices per node alike: a driver's attributes and capacities as the
    driver publishes them (e.g. productName, memory)."""

    count: int = Field(ge=1, le=64)
    attributes: dict[str, Attribute]
    capacity: dict[str, str] = Field(default_factory=dict)


class Devices(_Strict):
    """What one DRA driver publishes on each node of a pool: one ResourceSlice per node."""

    driver: str = Field(pattern=r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")
    kinds: list[DeviceKind] = Field(min_length=1)


class Pool(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
    count: int = Field(ge=0, le=5000)
    capacity: dict[str, str]
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    devices: Devices | None = None


class DeviceClass(_Strict):
    """A DeviceClass as a driver's chart installs it: CEL selectors, and optionally the
    extended resource name it serves pods by."""

    name: str
    selectors: list[str] = Field(default_factory=list)
    extendedResourceName: str | None = None


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
    # Simulated GPUs the node's DRA kubelet plugin publishes and prepares, numbered after
    # those of the device plugin so that no GPU is both an extended resource and a device.
    devices: Devices | None = None


# What a kwok node standing in for the real node offers, on a machine that cannot run one.
STANDIN_CAPACITY = {"cpu": "16", "memory": "64Gi"}


class PoolFile(_Strict):
    pools: list[Pool]
    runtimeClasses: list[RuntimeClass] = Field(default_factory=list)
    deviceClasses: list[DeviceClass] = Field(default_factory=list)
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
            devices=self.realNode.devices,
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


def published_devices(devices: Devices, node: str, first: int = 0) -> list[dict[str, Any]]:
    """The devices a driver publishes on ``node``, named and numbered from ``first`` as a
    driver does: ``gpu-<n>`` with the UUID ``GPU-<node>-<n>``."""
    published: list[dict[str, Any]] = []
    for kind in devices.kinds:
        for _ in range(kind.count):
            number = first + len(published)
            published.append(
                {
                    "name": f"gpu-{number}",
                    "attributes": {**kind.attributes, "uuid": {"string": f"GPU-{node}-{number}"}},
                    "capacity": {k: {"value": v} for k, v in kind.capacity.items()},
                }
            )
    return published


def resource_slices(pool_file: PoolFile, node_uids: dict[str, str]) -> list[dict[str, Any]]:
    """One ResourceSlice per node of every pool that publishes devices, owned by its Node
    so that it goes with it, with the devices named and numbered as a driver does."""
    slices = []
    for pool in pool_file.pools:
        if pool.devices is None:
            continue
        driver = pool.devices.driver
        for index in range(pool.count):
            node = f"{pool.name}-{index}"
            devices = published_devices(pool.devices, node)
            slices.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {
                        "name": f"{node}-{driver}",
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": node,
                                "uid": node_uids[node],
                            }
                        ],
                    },
                    "spec": {
                        "driver": driver,
                        "nodeName": node,
                        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                        "devices": devices,
                    },
                }
            )
    return slices


def device_class_objects(pool_file: PoolFile) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class.name},
            "spec": {
                "selectors": [{"cel": {"expression": e}} for e in device_class.selectors],
                **(
                    {"extendedResourceName": device_class.extendedResourceName}
                    if device_class.extendedResourceName
                    else {}
                ),
            },
        }
        for device_class in pool_file.deviceClasses
    ]
