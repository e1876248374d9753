"""Reading one object of a box from the testbed's apiserver, as the tests of this folder
check whether it is still there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client


def live_object(read: Callable[[str, str], Any], name: str, namespace: str) -> Any | None:
    """What ``read`` (a ``read_namespaced_*`` call) answers for ``name``; None when the
    object is missing or already being deleted, since a deleted object lingers until its
    finalizers are done."""
    try:
        found = read(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return None if found.metadata.deletion_timestamp else found
