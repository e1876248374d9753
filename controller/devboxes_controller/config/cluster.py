"""The ``cluster`` block: which cluster this controller serves, in the name clients show.

Clients that know several clusters show a box as ``NAME@CLUSTER``, so the name is a DNS
label. Beside it the capabilities carry the cluster's id, which the controller reads from
the cluster itself (``k8s.cluster_id``) and no setting gives.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, StrictStr, TypeAdapter, WithJsonSchema

from .base import Model
from .formats import DnsLabel, is_dns_label
from .violations import fail


def _check_name(value: str) -> str:
    if not is_dns_label(value):
        raise fail(
            f"{value!r} is not a valid cluster name: 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (a DNS label), so that clients can "
            "show boxes as NAME@CLUSTER"
        )
    return value


ClusterName = Annotated[
    StrictStr,
    AfterValidator(_check_name),
    WithJsonSchema(TypeAdapter(DnsLabel).json_schema()),
]


class ClusterSettings(Model):
    """What clients call the cluster; see docs/operator-guide.md."""

    # Shown by clients that know several clusters, e.g. "gpu-eu" in train@gpu-eu. Unset,
    # the capabilities name none.
    name: ClusterName | None = None
