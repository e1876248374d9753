"""The chart's Grafana dashboard of GPU usage: a ConfigMap for Grafana's dashboard sidecar,
rendered only when asked, holding a dashboard whose every query names only metrics the
controller defines.

Every render is a real `helm template` run of the testbed's pinned Helm binary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from devboxes_controller.state.metrics import METRICS
from support import helm_binary

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "devboxes"
DASHBOARD = CHART / "dashboards" / "devboxes-usage.json"
RELEASE = "rel"
RELEASE_NAMESPACE = "devboxes-system"
DATA_KEY = "devboxes-usage.json"
USAGE_METRICS = {
    "devboxes_usage_device_seconds_total",
    "devboxes_usage_group_device_seconds_total",
    "devboxes_usage_waiting_seconds_total",
    "devboxes_usage_people_waiting",
}

Render = Callable[..., list[dict[str, Any]]]

# PromQL words that are not metric names: operators, modifiers, and the aggregations,
# which may stand apart from their parenthesis (`sum without (pod) (...)`).
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"offset", "bool", "inf", "nan", "sum", "avg", "min", "max", "count", "group"}
    | {"stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "limitk"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_WORD = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression selects: every identifier that is not a
    function, a keyword, a label (in matchers, grouping or joins), a range or a variable."""
    text = _STRING.sub('""', expression)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _LABEL_LIST.sub(r"\1", text)
    text = _VARIABLE.sub("", text)
    names = set()
    for word, call in _WORD.findall(text):
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def defined_metrics() -> set[str]:
    """Every name the controller's registry serves, as a query names it."""
    names: set[str] = set()
    for family in METRICS.registry.collect():
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        elif family.type in ("histogram", "summary"):
            names |= {f"{family.name}{s}" for s in ("_bucket", "_sum", "_count", "_created")}
        else:
            names.add(family.name)
    return names


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # those of a collapsed row


def expressions(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for panel in panels(dashboard) for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


def promql_of_label_values(expression: str) -> str:
    """A template variable's ``label_values(metric, label)`` as the selector it reads."""
    match = re.fullmatch(r"label_values\((.+),\s*\w+\)", expression.strip())
    return match[1] if match else expression


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    binary = helm_binary()
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str) -> str:
        result = subprocess.run(
            [binary, *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    return run


@pytest.fixture
def render(helm: Callable[..., str], tmp_path: Path) -> Render:
    """The chart's objects, rendered by `helm template` with the given values."""
    counter = iter(range(1_000_000))

    def run(values: dict[str, Any]) -> list[dict[str, Any]]:
        path = tmp_path / f"values-{next(counter)}.json"
        # Written as JSON so that Helm's YAML 1.1 reads no string as a boolean.
        path.write_text(json.dumps({"token": {"existingSecret": "devboxes-token"}, **values}))
        text = helm(
            "template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "-f", str(path)
        )
        return [doc for doc in yaml.safe_load_all(text) if doc]

    return run


def dashboard_configmaps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "ConfigMap" and DATA_KEY in d.get("data", {})]


def rendered_dashboard(render: Render, values: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    (configmap,) = dashboard_configmaps(render(values))
    return configmap, json.loads(configmap["data"][DATA_KEY])


def test_no_dashboard_by_default(render: Render) -> None:
    docs = render({})
    assert dashboard_configmaps(docs) == []
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"] == [
        f"{RELEASE}-devboxes-settings"
    ]


def test_enabled_the_configmap_carries_the_sidecars_label_and_the_dashboard(
    render: Render,
) -> None:
    configmap, dashboard = rendered_dashboard(render, {"grafanaDashboard": {"enabled": True}})
    metadata = configmap["metadata"]
    assert metadata["name"] == f"{RELEASE}-devboxes-usage-dashboard"
    assert metadata["namespace"] == RELEASE_NAMESPACE
    assert metadata["labels"]["grafana_dashboard"] == "1"
    assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert "annotations" not in metadata
    # Byte for byte the chart's file.
    assert configmap["data"][DATA_KEY] == DASHBOARD.read_text().rstrip("\n")
    assert dashboard["uid"] == "devboxes-usage"


def test_the_label_namespace_and_annotations_are_the_operators(render: Render) -> None:
    configmap, _ = rendered_dashboard(
        render,
        {
            "grafanaDashboard": {
                "enabled": True,
                "namespace": "monitoring",
                # Helm merges a map with the chart's: null takes the default label out.
                "labels": {"dashboards.example.com/load": "yes", "grafana_dashboard": None},
                "annotations": {"grafana_folder": "Devboxes"},
            }
        },
    )
    metadata = configmap["metadata"]
    assert metadata["namespace"] == "monitoring"
    assert metadata["labels"]["dashboards.example.com/load"] == "yes"
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["annotations"] == {"grafana_folder": "Devboxes"}


def test_a_dashboard_without_labels_is_refused(helm: Callable[..., str], tmp_path: Path) -> None:
    path = tmp_path / "values.json"
    path.write_text(json.dumps({"grafanaDashboard": {"enabled": True, "labels": None}}))
    with pytest.raises(AssertionError, match="labels"):
        helm("template", RELEASE, str(CHART), "-f", str(path))


def test_the_dashboard_is_a_grafana_dashboard_with_a_datasource_variable(
    render: Render,
) -> None:
    _, dashboard = rendered_dashboard(render, {"grafanaDashboard": {"enabled": True}})
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    assert dashboard["id"] is None, "a provisioned dashboard carries no database id"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    found = list(panels(dashboard))
    ids = [panel["id"] for panel in found]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {ids}"
    for panel in found:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert grid["h"] > 0, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], f"{panel['title']!r} queries nothing"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert target["refId"], panel["title"]
            assert target["expr"].strip(), panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_every_query_names_only_metrics_the_controller_defines(render: Render) -> None:
    _, dashboard = rendered_dashboard(render, {"grafanaDashboard": {"enabled": True}})
    defined = defined_metrics()
    named: set[str] = set()
    for expression in expressions(dashboard):
        names = metric_names(promql_of_label_values(expression))
        assert names, f"no metric in {expression!r}"
        assert names <= defined, f"{sorted(names - defined)} in {expression!r} are not defined"
        named |= names
    # Every usage metric has a panel.
    assert named >= USAGE_METRICS


def test_counters_are_summed_across_replicas_only_after_increase_or_rate(
    render: Render,
) -> None:
    """Only the leader counts, and a new leader's counters start from zero: a counter is
    taken through increase() or rate() per series first, then summed without the replica's
    labels."""
    _, dashboard = rendered_dashboard(render, {"grafanaDashboard": {"enabled": True}})
    counters = sorted(name for name in USAGE_METRICS if name.endswith("_total"))
    for expression in expressions(dashboard):
        if expression.startswith("label_values("):
            continue
        for counter in counters:
            for found in re.finditer(re.escape(counter), expression):
                before = expression[: found.start()]
                assert re.search(r"(increase|rate)\($", before), expression
        if any(counter in expression for counter in counters):
            assert "sum without (pod, instance" in expression, expression


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ('sum without (pod, instance) (rate(a_total{x="b c"}[$__rate_interval]))', {"a_total"}),
        ("topk(10, sum by (owner) (increase(b[1h]))) / 3600", {"b"}),
        ('g{p=~"$p"}\n  and on (instance) (leader == 1)', {"g", "leader"}),
        ("label_values(c, profile)", {"c"}),
    ],
)
def test_metric_names_of_an_expression(expression: str, names: set[str]) -> None:
    assert metric_names(promql_of_label_values(expression)) == names
