"""The ``cluster`` block: the name clients show for the cluster, and what the capabilities
say of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_errors import violations
from devboxes_controller.config.chart_schema import text as chart_schema_text
from devboxes_controller.config.loading import load_check_target
from devboxes_controller.config.settings import settings_from_mapping

NAME_RULE = (
    "is not a valid cluster name: 1-63 lowercase letters, digits and '-', starting and "
    "ending with a letter or digit (a DNS label), so that clients can show boxes as "
    "NAME@CLUSTER"
)


def test_a_cluster_has_no_name_unless_the_operator_gives_one() -> None:
    assert settings_from_mapping({}).cluster.name is None
    assert settings_from_mapping({"cluster": {}}).cluster.name is None
    assert settings_from_mapping({"cluster": {"name": None}}).cluster.name is None
    assert settings_from_mapping({"cluster": {"name": "gpu-eu"}}).cluster.name == "gpu-eu"


@pytest.mark.parametrize("name", ["a", "0", "gpu-eu-1", "x" * 63, "1a-b2"])
def test_a_dns_label_names_a_cluster(name: str) -> None:
    assert settings_from_mapping({"cluster": {"name": name}}).cluster.name == name


@pytest.mark.parametrize(
    "name", ["", "Gpu-EU", "gpu eu", "-gpu", "gpu-", "gpu.eu", "gpu@eu", "gpu_eu", "x" * 64]
)
def test_a_name_that_is_no_dns_label_is_refused_with_the_rule(name: str) -> None:
    assert violations(lambda: settings_from_mapping({"cluster": {"name": name}})) == [
        f"cluster.name: {name!r} {NAME_RULE}"
    ]


@pytest.mark.parametrize(
    ("cluster", "found"),
    [
        ({"name": 7}, "cluster.name: must be a string, got 7; quote it in YAML"),
        ({"id": "abc"}, "cluster.id: unknown key 'id' (allowed: name, peers)"),
        (None, "cluster: must be a mapping, got null"),
        ("gpu-eu", 'cluster: must be a mapping, got "gpu-eu"'),
    ],
)
def test_the_block_takes_a_name_and_peers_and_nothing_else(cluster: Any, found: str) -> None:
    assert violations(lambda: settings_from_mapping({"cluster": cluster})) == [found]


def test_a_bad_name_is_listed_with_every_other_violation() -> None:
    found = violations(
        lambda: settings_from_mapping(
            {"namespace": "Boxes", "cluster": {"name": "GPU EU"}, "bookings": {"maxHours": 0}}
        )
    )
    assert len(found) == 3
    assert f"cluster.name: 'GPU EU' {NAME_RULE}" in found
    assert any(line.startswith("namespace: 'Boxes' is not a valid DNS label") for line in found)
    assert "bookings.maxHours: must be between 1 and 168, got 0" in found


def test_chart_values_name_the_cluster_under_controller(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"controller": {"cluster": {"name": "gpu-eu"}}}))
    assert load_check_target(values).settings.cluster.name == "gpu-eu"
    values.write_text(yaml.safe_dump({"controller": {"cluster": {"name": "GPU"}}}))
    assert violations(lambda: load_check_target(values)) == [
        f"controller.cluster.name: 'GPU' {NAME_RULE}"
    ]


def test_the_chart_schema_refuses_what_the_controller_refuses() -> None:
    schema = json.loads(chart_schema_text())
    cluster = schema["properties"]["controller"]["properties"]["cluster"]
    assert cluster["additionalProperties"] is False
    assert {"type": "null"} in cluster["properties"]["name"]["anyOf"]
    (label,) = [s for s in cluster["properties"]["name"]["anyOf"] if s.get("type") == "string"]
    assert label["maxLength"] == 63


def test_the_capabilities_carry_the_name_and_the_id_read() -> None:
    named = settings_from_mapping({"cluster": {"name": "gpu-eu"}})
    assert named.capabilities("0b5c").model_dump(mode="json")["cluster"] == {
        "name": "gpu-eu",
        "id": "0b5c",
    }
    unnamed = settings_from_mapping({}).capabilities().model_dump(mode="json")
    assert unnamed["cluster"] == {"name": None, "id": None}


def test_peers_are_other_clusters_controllers_the_dashboard_links_to() -> None:
    cluster = settings_from_mapping(
        {
            "cluster": {
                "name": "lab-a",
                "peers": [{"name": "lab-b", "url": "https://devboxes.lab-b.example.com/"}],
            }
        }
    ).cluster
    assert [(p.name, p.url) for p in cluster.peers] == [
        ("lab-b", "https://devboxes.lab-b.example.com")
    ]


@pytest.mark.parametrize(
    ("peers", "found"),
    [
        (
            [{"name": "lab-a", "url": "https://a.example.com"}],
            "cluster.peers[0].name: 'lab-a' is this cluster's own name, not a peer",
        ),
        (
            [
                {"name": "lab-b", "url": "https://b.example.com"},
                {"name": "lab-b", "url": "https://c.example.com"},
            ],
            "cluster.peers[1].name: peer name 'lab-b' is used more than once (also peers[0])",
        ),
        (
            [{"name": "lab-b", "url": "ftp://b.example.com"}],
            "cluster.peers[0].url: 'ftp://b.example.com' is not an http:// or https:// URL "
            "without query or fragment",
        ),
        (
            [{"name": "lab-b", "url": "https://ops:secret@b.example.com"}],
            "cluster.peers[0].url: must not carry a user name or password: messages show this URL",
        ),
        (
            [{"name": "Lab B", "url": "https://b.example.com"}],
            f"cluster.peers[0].name: 'Lab B' {NAME_RULE}",
        ),
    ],
)
def test_a_broken_peer_is_refused_saying_where_and_why(
    peers: list[dict[str, str]], found: str
) -> None:
    settings = {"cluster": {"name": "lab-a", "peers": peers}}
    assert violations(lambda: settings_from_mapping(settings)) == [found]
