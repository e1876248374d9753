"""A usage record written straight to the testbed's ConfigMaps, as the leader writes it,
for tests of what reads it back (reports, budgets, the faces): rows of known seconds,
without waiting for passes."""

from __future__ import annotations

from collections import defaultdict
from datetime import date
from typing import Any

from devboxes_controller.placement import usage_ledger as ledger
from devboxes_controller.placement.usage_ledger import Row
from kubernetes import client


def row(
    box: str,
    owner: str,
    profile: str,
    day: date,
    *,
    groups: tuple[str, ...] = (),
    count: int = 1,
    busy: int = 0,
    idle: int = 0,
    unknown: int = 0,
    waiting: int = 0,
) -> tuple[date, str, Row]:
    """One box's row of ``day``, its cursor at the end of the day (the box stopped)."""
    return (
        day,
        ledger.key_of(box, "00000000"),
        Row(
            box=box,
            owner=owner,
            groups=groups,
            profile=profile,
            count=count,
            held=None,
            until=ledger.day_start(day) + 86_399,
            allocated=busy + idle + unknown,
            busy=busy,
            idle=idle,
            unknown=unknown,
            waiting=waiting,
        ),
    )


def seed(kube: Any, namespace: str, rows: list[tuple[date, str, Row]]) -> list[str]:
    """Write ``rows`` into their days' ConfigMaps (created, or their rows added); the
    names written."""
    core = client.CoreV1Api(kube)
    by_name: dict[str, dict[str, str]] = defaultdict(dict)
    days: dict[str, date] = {}
    for day, key, value in rows:
        name = ledger.configmap_name(day, ledger.shard_of(key))
        by_name[name][key] = value.to_json()
        days[name] = day
    for name, data in by_name.items():
        labels = {**ledger.LABELS, ledger.LABEL_DAY: days[name].isoformat()}
        try:
            found = core.read_namespaced_config_map(name, namespace)
        except client.ApiException as err:
            if err.status != 404:
                raise
            body = client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=name, labels=labels), data=data
            )
            core.create_namespaced_config_map(namespace, body)
        else:
            found.data = {**(found.data or {}), **data}
            core.replace_namespaced_config_map(name, namespace, found)
    return sorted(by_name)
