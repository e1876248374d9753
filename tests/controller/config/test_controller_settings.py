"""The controller's settings: every catalog rule, fail-closed loading and discovery."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_errors import violations
from devboxes_controller.config.base import MAX_GROUP_ID
from devboxes_controller.config.catalog import SNAPSHOT_MAX_BYTES, SnapshotError
from devboxes_controller.config.formats import quantity_value
from devboxes_controller.config.gpu import (
    INT64_MAX,
    INT64_MIN,
    GpuProfileConfig,
    GpuSettings,
    ProfileRejected,
    Toleration,
)
from devboxes_controller.config.loading import CheckTarget, load_check_target, load_settings
from devboxes_controller.config.settings import Settings, settings_from_mapping, validate
from devboxes_controller.config.violations import ConfigError
from gpu_catalog import DEDICATED_L4, gpu_profile
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from devboxes_sdk.models import GpuRequest

ROOT = Path(__file__).resolve().parents[3]
CASES = yaml.safe_load((ROOT / "tests" / "data" / "gpu_catalog_cases.yaml").read_text())

L4 = DEDICATED_L4
MIG = gpu_profile("a100-1g-10gb", "A100 MIG 1g.10gb", resourceName="nvidia.com/mig-1g.10gb")


def catalog(enabled: bool = True, default: str | None = "nvidia-l4") -> GpuSettings:
    return settings_from_mapping(
        {"gpu": {"enabled": enabled, "defaultProfile": default, "profiles": [L4, MIG]}}
    ).gpu


# --- the shared rules table --------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_catalog_rules_table(case: dict[str, Any]) -> None:
    if case["valid"]:
        settings_from_mapping({"gpu": case["gpu"]})
        return
    found = violations(lambda: settings_from_mapping({"gpu": case["gpu"]}))
    for expected in case["errors"]:
        parts = [expected] if isinstance(expected, str) else expected
        assert any(all(part in line for part in parts) for line in found), (expected, found)
    # Nothing else is reported: each entry stands for one violation.
    assert len(found) == len(case["errors"]), found


def test_rules_table_covers_valid_and_invalid_catalogs() -> None:
    assert len({case["id"] for case in CASES}) == len(CASES)
    assert any(case["valid"] for case in CASES)
    invalid = [case for case in CASES if not case["valid"]]
    assert all(case["errors"] for case in invalid)
    assert max(len(case["errors"]) for case in invalid) >= 8


# --- defaults and whole-settings rules ---------------------------------------------------


def test_defaults_follow_the_design() -> None:
    settings = settings_from_mapping({})
    sizes = {
        name: (p.cpu, p.memory_request, p.memory_limit, p.storage)
        for name, p in settings.presets.items()
    }
    assert sizes == {
        "small": ("250m", "512Mi", "4Gi", "20Gi"),
        "medium": ("750m", "2Gi", "8Gi", "30Gi"),
        "large": ("2", "4Gi", "16Gi", "50Gi"),
    }
    assert settings.namespace == "devboxes"
    assert settings.workspace_image == "devboxes/workspace:0.1.0"
    assert (settings.ttl.default_hours, settings.ttl.max_hours) == (24, 168)
    assert (settings.ssh.service_type, settings.ssh.host) == ("NodePort", None)
    assert settings.gpu.enabled is False
    assert settings.gpu.capabilities().profiles == []


def test_snake_case_names_are_accepted_too() -> None:
    settings = settings_from_mapping(
        {"workspace_image": "example/ws:1", "ttl": {"default_hours": 2, "max_hours": 3}}
    )
    assert settings.workspace_image == "example/ws:1"
    assert settings.ttl.max_hours == 3


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"bogus": 1}, "bogus"),
        ({"ttl": {"bogus": 1}}, "ttl.bogus"),
        ({"ssh": {"bogus": 1}}, "ssh.bogus"),
        (
            {
                "presets": {
                    name: {
                        "cpu": "1",
                        "memoryRequest": "1Gi",
                        "memoryLimit": "1Gi",
                        "storage": "1Gi",
                        **({"bogus": 1} if name == "medium" else {}),
                    }
                    for name in ("small", "medium", "large")
                }
            },
            "presets.medium.bogus",
        ),
        ({"sidecars": [{"name": "logs", "bogus": 1}]}, "sidecars[0].bogus"),
        ({"gpu": {"enabled": False, "bogus": 1}}, "gpu.bogus"),
        ({"gpu": {"profiles": [{**L4, "bogus": 1}]}}, "gpu.profiles[0].bogus"),
        (
            {"gpu": {"profiles": [{**L4, "tolerations": [{"operator": "Exists", "bogus": 1}]}]}},
            "gpu.profiles[0].tolerations[0].bogus",
        ),
    ],
)
def test_unknown_keys_are_errors_at_every_level(data: dict[str, Any], path: str) -> None:
    found = violations(lambda: settings_from_mapping(data))
    assert len(found) == 1
    assert found[0].startswith(f"{path}: unknown key 'bogus' (allowed: ")


def test_unknown_key_suggests_the_closest_key() -> None:
    found = violations(lambda: settings_from_mapping({"gpu": {"defaultprofile": "x"}}))
    assert found == [
        "gpu.defaultprofile: unknown key 'defaultprofile' (allowed: enabled, defaultProfile, "
        "profiles); did you mean 'defaultProfile'?"
    ]


def test_every_violation_of_every_section_is_listed() -> None:
    data = {
        "namespace": "Devboxes",
        "workspaceImage": "https://example.com/ws",
        "storageClassName": "Fast SSD",
        "ttl": {"defaultHours": 0, "maxHours": 4},
        "ssh": {"serviceType": "ClusterIP"},
        "presets": {"small": {"cpu": "lots", "memoryRequest": "8Gi", "memoryLimit": "4Gi"}},
        "sidecars": [{"name": "devbox"}, {"name": "logs"}, {"name": "logs", "image": ""}],
        "gpu": {"enabled": True, "defaultProfile": "nope", "profiles": [{**L4, "count": 0}]},
    }
    found = violations(lambda: settings_from_mapping(data))
    expected = [
        "namespace: 'Devboxes' is not a valid DNS label",
        "workspaceImage: 'https://example.com/ws' is not an image reference",
        "storageClassName: 'Fast SSD' is not a valid DNS subdomain",
        "ttl.defaultHours: must be at least 1, got 0",
        "ssh.serviceType: must be 'NodePort', 'LoadBalancer' or 'None', got \"ClusterIP\"",
        "presets.small.cpu: 'lots' is not a Kubernetes quantity",
        "presets.small.storage: is required",
        "presets.small.memoryRequest: 8Gi must not exceed memoryLimit (4Gi)",
        "presets: missing medium, large",
        "sidecars[0].name: 'devbox' is the main container's name",
        "sidecars[2].image: an image reference must not be empty",
        "sidecars[2].name: sidecar name 'logs' is used more than once (also sidecars[1])",
        "gpu.profiles[0].count: must be between 1 and 64, got 0",
        "gpu.defaultProfile: 'nope' is not a configured profile (configured: nvidia-l4)",
    ]
    for text in expected:
        assert any(line.startswith(text) for line in found), f"{text!r} not in {found}"
    assert len(found) == len(expected), found


def test_config_error_lists_one_violation_per_line() -> None:
    data = {"namespace": "A", "ttl": {"defaultHours": 9, "maxHours": 8}}
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping(data)
    assert str(caught.value).splitlines() == caught.value.violations
    assert len(caught.value.violations) == 2
    assert not any("Value error" in line for line in caught.value.violations)


def test_ttl_default_may_not_exceed_the_maximum() -> None:
    found = violations(lambda: settings_from_mapping({"ttl": {"defaultHours": 200}}))
    assert found == ["ttl.defaultHours: 200 must not exceed maxHours (168)"]
    assert settings_from_mapping({"ttl": {"defaultHours": 8, "maxHours": 8}}).ttl.max_hours == 8


@pytest.mark.parametrize("quantity", ["250m", "2", "0.5", ".5", "512Mi", "20Gi", "1Ti", "3k"])
def test_valid_quantities(quantity: str) -> None:
    preset = {"cpu": quantity, "memoryRequest": "1Ki", "memoryLimit": "1Ei", "storage": quantity}
    presets = dict.fromkeys(("small", "medium", "large"), preset)
    assert settings_from_mapping({"presets": presets}).presets["large"].cpu == quantity


@pytest.mark.parametrize("quantity", ["", "0", "0Gi", "-1", "1.5.2", "1GB", "1 Gi", "1e3", "Gi"])
def test_invalid_quantities(quantity: str) -> None:
    preset = {"cpu": quantity, "memoryRequest": "1Gi", "memoryLimit": "1Gi", "storage": "1Gi"}
    found = violations(
        lambda: settings_from_mapping(
            {"presets": dict.fromkeys(("small", "medium", "large"), preset)}
        )
    )
    assert len(found) == 3
    assert all(line.startswith("presets.") and ".cpu: " in line for line in found)


@pytest.mark.parametrize(
    ("quantity", "value"),
    [
        ("250m", Decimal("0.25")),
        ("2", 2),
        (".5", Decimal("0.5")),
        ("1.5Gi", 3 * 2**29),
        ("3k", 3000),
    ],
)
def test_quantity_values(quantity: str, value: Decimal) -> None:
    assert quantity_value(quantity) == value


@pytest.mark.parametrize("quantity", ["1e3", "-1", "+2", "1GB"])
def test_quantity_values_only_of_quantities_the_settings_accept(quantity: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity_value(quantity)


def test_memory_request_may_not_exceed_the_limit() -> None:
    preset = {"cpu": "1", "memoryRequest": "1025Mi", "memoryLimit": "1Gi", "storage": "1Gi"}
    presets = dict.fromkeys(("small", "medium", "large"), preset)
    assert violations(lambda: settings_from_mapping({"presets": presets})) == [
        f"presets.{name}.memoryRequest: 1025Mi must not exceed memoryLimit (1Gi)"
        for name in ("small", "medium", "large")
    ]


def test_unquoted_number_quantity_asks_for_quotes() -> None:
    preset = {"cpu": 2, "memoryRequest": "1Gi", "memoryLimit": "1Gi", "storage": "1Gi"}
    presets = {"small": preset, "medium": {**preset, "cpu": "2"}, "large": {**preset, "cpu": "2"}}
    found = violations(lambda: settings_from_mapping({"presets": presets}))
    assert found == ["presets.small.cpu: must be a string, got 2; quote it in YAML"]


def test_sidecar_env_accepts_the_kubernetes_list_shape() -> None:
    listed = settings_from_mapping(
        {"sidecars": [{"name": "lab", "env": [{"name": "A", "value": "1"}]}]}
    )
    mapped = settings_from_mapping({"sidecars": [{"name": "lab", "env": {"A": "1"}}]})
    assert listed.sidecars == mapped.sidecars
    assert mapped.sidecars[0].env == {"A": "1"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "'A' is set more than once"),
        ([{"name": "A"}], "exactly the keys 'name' and 'value'"),
        ({"1A": "x"}, "'1A' is not a valid environment variable name"),
        ({"A": 1}, "sidecars[0].env.A: must be a string, got 1"),
    ],
)
def test_sidecar_env_errors(env: object, message: str) -> None:
    found = violations(lambda: settings_from_mapping({"sidecars": [{"name": "lab", "env": env}]}))
    assert len(found) == 1
    assert message in found[0]


def test_empty_ssh_host_means_the_address_kubernetes_reports() -> None:
    assert settings_from_mapping({"ssh": {"host": ""}}).ssh.host is None
    assert settings_from_mapping({"ssh": {"host": None}}).ssh.host is None
    found = violations(lambda: settings_from_mapping({"ssh": {"host": "a b"}}))
    assert found == ["ssh.host: 'a b' is not a host name or address"]


def test_models_built_in_code_enforce_the_same_rules() -> None:
    with pytest.raises(ValidationError, match="operator Exists cannot have a value"):
        Toleration(operator="Exists", value="x")
    with pytest.raises(ValidationError, match="is not a configured profile"):
        GpuSettings(default_profile="missing")
    with pytest.raises(ValidationError, match="is used more than once"):
        Settings.model_validate({"sidecars": [{"name": "a"}, {"name": "a"}]})


# --- files and the environment -----------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "settings.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_settings_without_a_file_uses_defaults() -> None:
    assert load_settings(None, {}) == settings_from_mapping({})


def test_load_settings_reads_yaml_and_json(tmp_path: Path) -> None:
    gpu = {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4]}
    from_yaml = load_settings(write(tmp_path, yaml.safe_dump({"gpu": gpu})), {})
    from_json = load_settings(write(tmp_path, json.dumps({"gpu": gpu}), "s.json"), {})
    assert from_yaml == from_json
    assert from_yaml.gpu.profiles[0].supplemental_groups == [44, 109]


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "# nothing yet\n"), {}) == settings_from_mapping({})


def test_environment_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "namespace: boxes\nssh: {serviceType: NodePort, host: 10.0.0.1}\n")
    environ = {
        "DEVBOXES_NAMESPACE": "team-a",
        "DEVBOXES_WORKSPACE_IMAGE": "registry.example.com/ws:2",
        "DEVBOXES_SSH_HOST": "ssh.example.com",
    }
    settings = load_settings(path, environ)
    assert settings.namespace == "team-a"
    assert settings.workspace_image == "registry.example.com/ws:2"
    assert settings.ssh.host == "ssh.example.com"
    assert settings.ssh.service_type == "NodePort"
    assert load_settings(None, {"DEVBOXES_SSH_HOST": "h"}).ssh.host == "h"


def test_empty_environment_variables_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, "namespace: boxes\n")
    settings = load_settings(path, {"DEVBOXES_NAMESPACE": "", "DEVBOXES_SSH_HOST": ""})
    assert settings.namespace == "boxes"
    assert settings.ssh.host is None


def test_bad_environment_override_names_the_variable() -> None:
    found = violations(lambda: load_settings(None, {"DEVBOXES_NAMESPACE": "Team_A"}))
    assert len(found) == 1
    assert found[0].startswith("namespace (from DEVBOXES_NAMESPACE): 'Team_A' is not a valid")


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    assert violations(lambda: load_settings(missing, {})) == [f"{missing}: no such settings file"]


def test_unreadable_file(tmp_path: Path) -> None:
    assert violations(lambda: load_settings(tmp_path, {}))[0].startswith(
        f"{tmp_path}: cannot read the settings file"
    )


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "namespace: boxes\nttl: [1, 2\n")
    found = violations(lambda: load_settings(path, {}))
    assert len(found) == 1
    assert found[0].startswith(f"{path}: not valid YAML or JSON: ")
    assert "(line 3," in found[0]


def test_a_key_written_twice_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "gpu:\n  enabled: false\n  enabled: true\n")
    found = violations(lambda: load_settings(path, {}))
    assert len(found) == 1
    assert "the key 'enabled' is written more than once (line 3, column 3)" in found[0]


def test_yaml_merge_keys_still_work(tmp_path: Path) -> None:
    text = (
        "presets:\n"
        "  small: &base {cpu: 250m, memoryRequest: 512Mi, memoryLimit: 4Gi, storage: 20Gi}\n"
        "  medium: {<<: *base, cpu: 750m}\n"
        "  large: {<<: *base, cpu: '2', x-typo: 1}\n"
    )
    found = violations(lambda: load_settings(write(tmp_path, text), {}))
    assert len(found) == 1
    assert found[0].startswith("presets.large.x-typo: unknown key 'x-typo'")
    fixed = load_settings(write(tmp_path, text.replace(", x-typo: 1", "")), {})
    assert (fixed.presets["medium"].cpu, fixed.presets["medium"].memory_limit) == ("750m", "4Gi")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- namespace: boxes\n")
    assert violations(lambda: load_settings(path, {})) == [
        f"{path}: the top level must be a mapping, got a list"
    ]


# --- check-config targets ----------------------------------------------------------------


def test_check_target_recognises_a_helm_values_file(tmp_path: Path) -> None:
    values = {
        "image": {"repository": "devboxes/controller", "tag": ""},
        "token": {"existingSecret": "devboxes-token"},
        "controller": {"namespace": "", "ssh": {"serviceType": "LoadBalancer", "host": ""}},
        "gpu": {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": [L4]},
    }
    target = load_check_target(write(tmp_path, yaml.safe_dump(values)))
    assert target.source == "chart values"
    assert target.settings.ssh.service_type == "LoadBalancer"
    assert target.settings.ssh.host is None
    assert target.settings.gpu.default_profile == "nvidia-l4"


def test_check_target_names_values_keys(tmp_path: Path) -> None:
    values = {
        "replicaCount": "whatever the chart schema says",
        "controller": {"ttl": {"defaultHours": 0, "maxHours": 1}},
        "gpu": {"enabled": True, "profiles": []},
    }
    found = violations(lambda: load_check_target(write(tmp_path, yaml.safe_dump(values))))
    assert found == [
        "controller.ttl.defaultHours: must be at least 1, got 0",
        "gpu.profiles: enabled: true needs at least one profile",
        "gpu.defaultProfile: enabled: true needs a defaultProfile",
    ]


def test_check_target_refuses_gpu_inside_controller(tmp_path: Path) -> None:
    values = {"controller": {"gpu": {"enabled": False}}, "gpu": {"enabled": False}}
    found = violations(lambda: load_check_target(write(tmp_path, yaml.safe_dump(values))))
    assert found == [
        "controller.gpu: GPU profiles belong in the top-level gpu: block of the values"
    ]


def test_check_target_accepts_a_settings_file(tmp_path: Path) -> None:
    path = write(tmp_path, yaml.safe_dump({"namespace": "boxes", "gpu": {"enabled": False}}))
    target = load_check_target(path)
    assert (target.source, target.settings.namespace) == ("settings", "boxes")
    assert target.namespace_from_release is False
    bad = write(tmp_path, yaml.safe_dump({"namespace": "Boxes"}), "bad.yaml")
    assert violations(lambda: load_check_target(bad))[0].startswith("namespace: 'Boxes'")


def test_the_charts_default_values_pass_the_check() -> None:
    values = ROOT / "charts" / "devboxes" / "values.yaml"
    target = load_check_target(values)
    assert target.settings.gpu.enabled is False
    assert (target.source, target.namespace_from_release) == ("chart values", True)
    assert target.settings.namespace == "devboxes"
    assert target.settings.ssh.host is None


def values_target(tmp_path: Path, values: dict[str, Any], **kwargs: Any) -> CheckTarget:
    return load_check_target(write(tmp_path, yaml.safe_dump(values), "values.yaml"), **kwargs)


def test_a_values_file_reads_as_merged_over_the_charts_values(tmp_path: Path) -> None:
    # helm fills what a values file leaves out from the chart's values.yaml, whose defaults
    # are the controller's: a file without a controller block stands for exactly them.
    chart = load_check_target(ROOT / "charts" / "devboxes" / "values.yaml")
    assert load_check_target(None).settings == chart.settings
    bare: list[dict[str, Any]] = [{"controller": None}, {"controller": {"ssh": {}}}]
    for values in bare:
        assert values_target(tmp_path, values) == chart


@pytest.mark.parametrize(
    ("ssh", "host"),
    [
        ({}, None),
        ({"serviceType": "NodePort"}, None),
        ({"host": ""}, None),
        ({"host": "ssh.example.com"}, "ssh.example.com"),
    ],
)
def test_a_values_file_without_an_ssh_host_has_none(
    tmp_path: Path, ssh: dict[str, str], host: str | None
) -> None:
    assert values_target(tmp_path, {"controller": {"ssh": ssh}}).settings.ssh.host == host


def test_the_release_namespace_stands_in_for_an_empty_one(tmp_path: Path) -> None:
    for controller in ({}, {"namespace": ""}):
        target = values_target(tmp_path, {"controller": controller}, release_namespace="team-a")
        assert (target.settings.namespace, target.namespace_from_release) == ("team-a", True)
    named = values_target(
        tmp_path, {"controller": {"namespace": "gpu-boxes"}}, release_namespace="team-a"
    )
    assert (named.settings.namespace, named.namespace_from_release) == ("gpu-boxes", False)
    found = violations(
        lambda: values_target(tmp_path, {"controller": {}}, release_namespace="Team_A")
    )
    assert len(found) == 1
    assert found[0].startswith(
        "controller.namespace (the release namespace): 'Team_A' is not a valid DNS label"
    )


def test_environment_overrides_a_settings_file_but_never_chart_values(tmp_path: Path) -> None:
    environ = {"DEVBOXES_NAMESPACE": "team-a", "DEVBOXES_SSH_HOST": "ssh.example.com"}
    settings = load_check_target(write(tmp_path, "namespace: boxes\n"), environ).settings
    assert (settings.namespace, settings.ssh.host) == ("team-a", "ssh.example.com")
    values = write(tmp_path, "controller: {namespace: boxes}\n", "values.yaml")
    settings = load_check_target(values, environ).settings
    assert (settings.namespace, settings.ssh.host) == ("boxes", None)
    assert load_check_target(None, environ).settings.namespace == "team-a"


# --- resolving requests and discovery ----------------------------------------------------


def test_resolve_cpu_request() -> None:
    assert catalog().resolve(None) is None
    assert catalog(enabled=False).resolve(None) is None


def test_resolve_default_and_named_profiles() -> None:
    gpu = catalog()
    default = gpu.resolve(GpuRequest())
    assert default is not None
    assert default.name == "nvidia-l4"
    named = gpu.resolve(GpuRequest(profile="a100-1g-10gb"))
    assert named is not None
    assert named.resource_name == "nvidia.com/mig-1g.10gb"


def test_profiles_share_devices_unless_a_node_label_keeps_them_apart() -> None:
    pair = {**L4, "name": "nvidia-l4-pair", "count": 2}
    h100 = {**L4, "name": "nvidia-h100", "nodeSelector": {"accelerator": "nvidia-h100"}}
    anywhere = {**L4, "name": "nvidia-any", "nodeSelector": {}}
    gpu = settings_from_mapping(
        {
            "gpu": {
                "enabled": True,
                "defaultProfile": "nvidia-l4",
                "profiles": [L4, MIG, pair, h100, anywhere],
            }
        }
    ).gpu
    sharing = {p.name: gpu.sharing_devices(p) for p in gpu.profiles}
    assert sharing == {
        "nvidia-l4": ["nvidia-l4-pair", "nvidia-any"],
        "a100-1g-10gb": [],
        "nvidia-l4-pair": ["nvidia-l4", "nvidia-any"],
        "nvidia-h100": ["nvidia-any"],
        "nvidia-any": ["nvidia-l4", "nvidia-l4-pair", "nvidia-h100"],
    }


def test_resolve_refuses_when_disabled() -> None:
    with pytest.raises(ProfileRejected) as caught:
        catalog(enabled=False).resolve(GpuRequest(profile="nvidia-l4"))
    assert caught.value.message == "GPU acceleration is disabled by the operator"


def test_resolve_refuses_unknown_profiles() -> None:
    with pytest.raises(ProfileRejected) as caught:
        catalog().resolve(GpuRequest(profile="h100"))
    assert str(caught.value) == (
        "unknown GPU profile 'h100'; available profiles: nvidia-l4, a100-1g-10gb"
    )


def test_capabilities_never_reveal_scheduling_details() -> None:
    body = {"gpu": catalog().capabilities().model_dump(mode="json")}
    assert body["gpu"]["enabled"] is True
    assert body["gpu"]["default_profile"] == "nvidia-l4"
    assert [(p["name"], p["default"]) for p in body["gpu"]["profiles"]] == [
        ("nvidia-l4", True),
        ("a100-1g-10gb", False),
    ]
    assert set(body["gpu"]["profiles"][0]) == {
        "name",
        "display_name",
        "description",
        "kind",
        "resource_name",
        "devices",
        "count",
        "default",
    }
    text = json.dumps(body)
    for secret in ("ghcr.io", "runtime", "109", "accelerator", "toleration", "NoSchedule"):
        assert secret not in text


def test_capabilities_when_disabled() -> None:
    body = catalog(enabled=False).capabilities().model_dump(mode="json")
    assert body == {"enabled": False, "default_profile": None, "profiles": []}


def test_wire_forms_of_a_profile() -> None:
    profile = GpuProfileConfig.model_validate(L4)
    assert profile.to_wire(False).model_dump() == {
        "name": "nvidia-l4",
        "display_name": "NVIDIA L4",
        "description": "One dedicated L4",
        "kind": "extended-resource",
        "resource_name": "nvidia.com/gpu",
        "devices": None,
        "count": 1,
        "default": False,
    }
    assert profile.allocation().model_dump() == {
        "profile": "nvidia-l4",
        "display_name": "NVIDIA L4",
        "kind": "extended-resource",
        "resource_name": "nvidia.com/gpu",
        "devices": None,
        "count": 1,
        "allocated": None,
    }


# --- the pinned snapshot -----------------------------------------------------------------


def test_snapshot_is_canonical_json() -> None:
    text = GpuProfileConfig.model_validate(L4).snapshot_json()
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert data == L4
    minimal = GpuProfileConfig.model_validate(MIG).snapshot_json()
    assert minimal == (
        '{"count":1,"displayName":"A100 MIG 1g.10gb","name":"a100-1g-10gb",'
        '"resourceName":"nvidia.com/mig-1g.10gb"}'
    )


def test_snapshot_of_toleration_keeps_the_default_operator() -> None:
    profile = GpuProfileConfig.model_validate({**MIG, "tolerations": [{"key": "gpu"}]})
    assert json.loads(profile.snapshot_json())["tolerations"] == [
        {"key": "gpu", "operator": "Equal"}
    ]


def largest_profile() -> GpuProfileConfig:
    """Every bounded field at its bound, with text that escapes to the most bytes."""
    prefix = ".".join(["a" * 60] * 3 + ["a" * 61])
    label_key_prefix = ".".join(["b" * 63] * 3 + ["b" * 61])
    return GpuProfileConfig.model_validate(
        {
            "name": "a" * 40,
            "displayName": "\U0001f680" * 80,
            "description": "\U0001f680" * 160,
            "resourceName": f"{prefix}/{'g' * 63}",
            "count": 64,
            "workspaceImage": "\U0001f680" * 512,
            "runtimeClassName": label_key_prefix,
            "supplementalGroups": [MAX_GROUP_ID - i for i in range(8)],
            "nodeSelector": {f"{label_key_prefix}/{i:02d}{'n' * 61}": "v" * 63 for i in range(16)},
            "tolerations": [
                {
                    "key": f"{label_key_prefix}/{i:02d}{'t' * 61}",
                    "operator": "Equal",
                    "value": "v" * 63,
                    "effect": "NoExecute",
                    "tolerationSeconds": INT64_MIN,
                }
                for i in range(16)
            ],
        }
    )


def test_largest_legal_profile_fits_the_snapshot_bound() -> None:
    profile = largest_profile()
    text = profile.snapshot_json()
    # The largest DRA profile is larger and shows the bound is tight
    # (test_controller_dra_profiles.py).
    assert len(text) > SNAPSHOT_MAX_BYTES * 0.3
    assert len(text.encode()) <= SNAPSHOT_MAX_BYTES
    assert GpuProfileConfig.from_snapshot(text) == profile


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ("[]", "must be a mapping"),
        ('{"name":"x"}', "displayName: is required"),
        (
            json.dumps({**MIG, "tolerations": [{"operator": "Exists", "value": "v"}]}),
            "operator Exists cannot have a value",
        ),
        ("{" + " " * SNAPSHOT_MAX_BYTES + "}", "larger than"),
    ],
)
def test_bad_snapshots_are_refused(text: str, message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        GpuProfileConfig.from_snapshot(text)


LABEL = r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?"
NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?"


def label_keys() -> st.SearchStrategy[str]:
    return st.from_regex(rf"\A(({LABEL}\.)?{LABEL}/)?{NAME}\Z")


def label_values() -> st.SearchStrategy[str]:
    return st.from_regex(rf"\A({NAME})?\Z")


@st.composite
def tolerations(draw: st.DrawFn) -> dict[str, Any]:
    operator = draw(st.sampled_from(["Equal", "Exists"]))
    effect = draw(st.none() | st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))
    toleration: dict[str, Any] = {
        "operator": operator,
        "key": draw(label_keys()) if operator == "Equal" else draw(st.none() | label_keys()),
        "value": draw(st.none() | label_values()) if operator == "Equal" else None,
        "effect": effect,
    }
    if effect == "NoExecute":
        toleration["tolerationSeconds"] = draw(
            st.none() | st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
        )
    return {k: v for k, v in toleration.items() if v is not None}


@st.composite
def profiles(draw: st.DrawFn) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "name": draw(st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?\Z")),
        "displayName": draw(st.text(min_size=1, max_size=80).filter(str.strip)),
        "description": draw(st.none() | st.text(max_size=160)),
        "resourceName": draw(st.from_regex(rf"\A{LABEL}(\.{LABEL}){{0,3}}/{NAME}\Z")),
        "count": draw(st.integers(min_value=1, max_value=64)),
        "workspaceImage": draw(st.none() | st.from_regex(r"\A[a-z0-9][a-z0-9./:@_-]{0,80}\Z")),
        "runtimeClassName": draw(st.none() | st.from_regex(rf"\A{LABEL}(\.{LABEL})?\Z")),
        "supplementalGroups": draw(
            st.lists(st.integers(min_value=1, max_value=MAX_GROUP_ID), max_size=8, unique=True)
        ),
        "nodeSelector": draw(st.dictionaries(label_keys(), label_values(), max_size=16)),
        "tolerations": draw(st.lists(tolerations(), max_size=16)),
    }
    return profile


@settings(max_examples=150, deadline=None)
@given(profiles())
def test_snapshot_round_trips(data: Mapping[str, Any]) -> None:
    if "://" in str(data.get("workspaceImage")):
        data = {**data, "workspaceImage": None}
    profile = GpuProfileConfig.model_validate(data)
    text = profile.snapshot_json()
    assert GpuProfileConfig.from_snapshot(text) == profile
    assert GpuProfileConfig.from_snapshot(text).snapshot_json() == text
    assert text.isascii()
    assert len(text) <= SNAPSHOT_MAX_BYTES


# --- idle stop -----------------------------------------------------------------------------


def test_idle_windows_per_profile_with_cpu_off_by_default() -> None:
    settings = settings_from_mapping(
        {
            "idle": {
                "stopAfterMinutes": 60,
                "profiles": {"nvidia-l4": 0.5},
                "controllerUrl": "http://devboxes.devboxes.svc:80/",
            },
            "gpu": {
                "enabled": True,
                "defaultProfile": "nvidia-l4",
                "profiles": [
                    {"name": n, "displayName": n, "resourceName": "nvidia.com/gpu", "count": 1}
                    for n in ("nvidia-l4", "other")
                ],
            },
        }
    )
    assert settings.idle.window("nvidia-l4") == 0.5
    assert settings.idle.window("other") == 60
    assert settings.idle.window(None) is None
    assert settings.idle.controller_url == "http://devboxes.devboxes.svc:80"
    assert settings.idle.gpu_utilization_percent == 5
    assert settings_from_mapping({"idle": {"controllerUrl": ""}}).idle.controller_url is None


@pytest.mark.parametrize(
    ("idle", "violation"),
    [
        ({"stopAfterMinutes": 0, "controllerUrl": "http://c"}, "idle.stopAfterMinutes: "),
        ({"cpuStopAfterMinutes": 10}, "idle.controllerUrl: is required when boxes may be"),
        ({"profiles": {"h100": 5}, "controllerUrl": "http://c"}, "idle.profiles.h100: 'h100' is"),
        ({"gpuUtilizationPercent": 101}, "idle.gpuUtilizationPercent: "),
        ({"controllerUrl": "ftp://c"}, "idle.controllerUrl: 'ftp://c' is not an http"),
        ({"stopAfterMinutes": 1, "controllerUrl": "http://c", "typo": 1}, "idle.typo: unknown"),
    ],
)
def test_idle_settings_refusals(idle: dict[str, Any], violation: str) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_mapping({"idle": idle})
    assert any(v.startswith(violation) for v in refused.value.violations), refused.value


# --- connections ---------------------------------------------------------------------------


def test_connection_limits_default_to_safe_values() -> None:
    connections = settings_from_mapping({}).connections
    timeouts = (
        connections.header_timeout_seconds,
        connections.body_timeout_seconds,
        connections.keep_alive_timeout_seconds,
    )
    assert timeouts == (10, 30, 5)
    assert (connections.max_total, connections.max_per_client) == (4096, 256)
    # Helm and JSON Schema take 2.0 for the integer 2.
    given = settings_from_mapping({"connections": {"headerTimeoutSeconds": 2.0, "maxTotal": 256}})
    assert (given.connections.header_timeout_seconds, given.connections.max_total) == (2, 256)


@pytest.mark.parametrize(
    ("connections", "violations"),
    [
        (
            {"headerTimeoutSeconds": 0},
            ["connections.headerTimeoutSeconds: must be between 1 and 300, got 0"],
        ),
        (
            {"bodyTimeoutSeconds": 301},
            ["connections.bodyTimeoutSeconds: must be between 1 and 300, got 301"],
        ),
        (
            {"keepAliveTimeoutSeconds": 1.5},
            ["connections.keepAliveTimeoutSeconds: must be an integer, got 1.5"],
        ),
        ({"maxTotal": True}, ["connections.maxTotal: must be an integer, got true"]),
        ({"maxPerClient": "10"}, ["connections.maxPerClient: must be an integer, got '10'"]),
        (
            {"maxTotal": 2_000_000},
            ["connections.maxTotal: must be between 1 and 1000000, got 2000000"],
        ),
        (
            {"maxTotal": 10, "maxPerClient": 20},
            ["connections.maxPerClient: 20 must not exceed maxTotal (10)"],
        ),
        (
            {"maxTotal": 100},
            ["connections.maxPerClient: 256 (the default) must not exceed maxTotal (100)"],
        ),
    ],
)
def test_connection_settings_refusals(connections: dict[str, Any], violations: list[str]) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_mapping({"connections": connections})
    assert refused.value.violations == violations


def test_the_activity_sidecar_name_is_reserved() -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_mapping({"sidecars": [{"name": "activity"}]})
    assert refused.value.violations == [
        "sidecars[0].name: 'activity' is the activity agent's name; pick another one"
    ]


@pytest.mark.parametrize(
    "data",
    [
        {"namespace": "boxes\n"},
        {"presets": {"small": {"cpu": "1\n"}}},
        {"gpu": {"enabled": True, "defaultProfile": "l4\n", "profiles": []}},
    ],
)
def test_a_trailing_newline_is_no_part_of_a_valid_value(data: dict[str, Any]) -> None:
    settings, found = validate(data)
    assert settings is None
    assert found, data
