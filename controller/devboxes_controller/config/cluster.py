"""The ``cluster`` block: which cluster this controller serves, in the name clients show.

Clients that know several clusters show a box as ``NAME@CLUSTER``, so the name is a DNS
label. Beside it the capabilities carry the cluster's id, which the controller reads from
the cluster itself (``k8s.cluster_id``) and no setting gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictStr, TypeAdapter, WithJsonSchema

from .base import Model, entry_name, lookup
from .formats import DnsLabel, UrlWithoutCredentials, is_dns_label
from .violations import Violation, fail, repeats

# More clusters than this are not a list a person reads in a page's header.
MAX_PEERS = 16


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


class ClusterPeer(Model):
    """Another cluster's controller, which this one's dashboard links to."""

    name: ClusterName
    # The other controller's base URL; its dashboard is at URL/dashboard.
    url: UrlWithoutCredentials


class ClusterSettings(Model):
    """What clients call the cluster; see docs/operator-guide.md."""

    # Shown by clients that know several clusters, e.g. "gpu-eu" in train@gpu-eu. Unset,
    # the capabilities name none.
    name: ClusterName | None = None
    # The other clusters of the same people: the dashboard stays one per cluster and
    # links to these.
    peers: list[ClusterPeer] = Field(default_factory=list, max_length=MAX_PEERS)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        peers = lookup(raw, "peers")
        found: list[Violation] = [
            (
                ("peers", index, "name"),
                f"peer name {name!r} is used more than once (also peers[{first}])",
            )
            for index, first, name in repeats(peers, entry_name)
        ]
        own = lookup(raw, "name")
        if own is not None and isinstance(peers, list):
            found += [
                (("peers", index, "name"), f"{own!r} is this cluster's own name, not a peer")
                for index, peer in enumerate(peers)
                if entry_name(peer) == own
            ]
        return found
