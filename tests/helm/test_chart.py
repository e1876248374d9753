"""The Helm chart: its values schema and template checks against the shared rules table,
`helm lint --strict`, the rendered objects, and the settings hand-over to the controller.

Every render is a real `helm template` run of the pinned Helm binary from the testbed cache.
Values files are written as JSON (a subset of YAML) so that no string is re-read by Helm's
YAML 1.1 parser as a boolean or a number.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from devboxes_controller.config.loading import load_check_target
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.config.violations import ConfigError
from devboxes_testbed import build

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "devboxes"
CASES_FILE = REPO / "tests" / "data" / "gpu_catalog_cases.yaml"
RELEASE = "rel"
RELEASE_NAMESPACE = "devboxes-system"
TOKEN_SECRET = "devboxes-token"

Render = Callable[[dict[str, Any]], subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def helm(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., subprocess.CompletedProcess[str]]:
    directory = build.installed()
    if directory is None:
        pytest.skip("the testbed binaries (helm among them) are not built yet: run `make testbed`")
    binary = directory / "helm"
    home = tmp_path_factory.mktemp("helm-home")
    # Helm's own config, cache and data stay out of the user's home.
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), *args], capture_output=True, text=True, env=env, timeout=120
        )

    return run


@pytest.fixture
def render(helm: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> Render:
    """`helm template` of the chart with exactly the given values (no defaults added)."""
    counter = iter(range(1_000_000))

    def run(values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"values-{next(counter)}.json"
        path.write_text(json.dumps(values))
        return helm(
            "template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "-f", str(path)
        )

    return run


def with_token(values: dict[str, Any]) -> dict[str, Any]:
    return {"token": {"existingSecret": TOKEN_SECRET}, **values}


def objects(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    matches = [doc for doc in docs if doc["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, found {len(matches)}"
    return matches[0]


def rendered_settings(docs: list[dict[str, Any]]) -> dict[str, Any]:
    settings = yaml.safe_load(find(docs, "ConfigMap")["data"]["settings.yaml"])
    assert isinstance(settings, dict)
    return settings


def controller_verdict(values: dict[str, Any], tmp_path: Path) -> list[str] | None:
    """The controller's own check of a values file: None when accepted, else its violations."""
    path = tmp_path / "check-config.json"
    path.write_text(json.dumps(values))
    try:
        load_check_target(path)
    except ConfigError as exc:
        return exc.violations
    return None


# --- the shared rules table ----------------------------------------------------------------


def load_cases() -> list[dict[str, Any]]:
    cases = yaml.safe_load(CASES_FILE.read_text())
    assert isinstance(cases, list)
    assert cases, f"{CASES_FILE} holds no cases"
    return cases


CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_catalog_case_has_the_same_verdict_in_the_chart(
    case: dict[str, Any], render: Render
) -> None:
    result = render(with_token({"gpu": case["gpu"]}))
    if case["valid"]:
        assert result.returncode == 0, f"the chart refused a valid catalog:\n{result.stderr}"
        settings = settings_from_mapping(rendered_settings(objects(result)))
        assert len(settings.gpu.profiles) == len(case["gpu"].get("profiles") or [])
    else:
        assert result.returncode != 0, "the chart rendered an invalid catalog"
        assert result.stderr.startswith("Error:"), result.stderr
        if case.get("schema_can_express", True):
            assert "don't meet the specifications of the schema" in result.stderr


def test_cases_cover_both_layers() -> None:
    template_only = [c for c in CASES if not c["valid"] and not c.get("schema_can_express", True)]
    schema = [c for c in CASES if not c["valid"] and c.get("schema_can_express", True)]
    assert template_only, "no case exercises the chart's template checks"
    assert schema, "no case exercises the chart's values schema"
    assert any(c["valid"] for c in CASES)


# --- chart-level rules, checked by the schema or the templates and, where they concern the
# controller's settings, by the controller as well ---------------------------------------

PROFILE = {"name": "l4", "displayName": "NVIDIA L4", "resourceName": "nvidia.com/gpu", "count": 1}
GPU_ON = {"enabled": True, "defaultProfile": "l4", "profiles": [PROFILE]}

SIDECAR_IMAGE = {
    "name": "docs",
    "displayName": "Docs preview",
    "image": "example/web:1.27",
    "resources": {
        "cpuRequest": "25m",
        "memoryRequest": "32Mi",
        "cpuLimit": "1",
        "memoryLimit": "1Gi",
    },
}
WORKSPACE_IMAGE = {
    "name": "pytorch",
    "displayName": "PyTorch",
    "image": "example/ws-pytorch@sha256:" + "0" * 64,
    "mode": "workspace",
    "accelerators": ["cpu", "l4"],
}


def images(*profiles: dict[str, Any]) -> dict[str, Any]:
    return {"controller": {"images": {"enabled": True, "profiles": list(profiles)}}}


# (id, values without the token, substring of Helm's error, does the controller check it?)
REFUSED: list[tuple[str, dict[str, Any], str, bool]] = [
    (
        "oidc-plain-http-issuer",
        {"controller": {"auth": {"oidc": {"issuer": "http://id.example.com", "audience": "a"}}}},
        "/controller/auth/oidc/issuer",
        True,
    ),
    (
        "image-profile-latest",
        images({**SIDECAR_IMAGE, "image": "example/web:latest"}),
        "/controller/images/profiles/0/image",
        True,
    ),
    (
        "image-profile-untagged",
        images({**SIDECAR_IMAGE, "image": "localhost:5000/web"}),
        "/controller/images/profiles/0/image",
        True,
    ),
    (
        "image-profile-sidecar-without-resources",
        images({k: v for k, v in SIDECAR_IMAGE.items() if k != "resources"}),
        "/controller/images/profiles/0",
        True,
    ),
    (
        "image-profile-workspace-without-accelerators",
        images({**WORKSPACE_IMAGE, "accelerators": []}),
        "/controller/images/profiles/0/accelerators",
        True,
    ),
    (
        "image-profile-privileged-port",
        images({**SIDECAR_IMAGE, "ports": [{"name": "http", "containerPort": 80}]}),
        "/controller/images/profiles/0/ports/0/containerPort",
        True,
    ),
    (
        "image-profile-names-repeat",
        images(SIDECAR_IMAGE, SIDECAR_IMAGE),
        'controller.images.profiles[1].name: image profile name "docs" is used more than once',
        True,
    ),
    (
        "image-profile-unknown-accelerator",
        {"gpu": GPU_ON, **images({**WORKSPACE_IMAGE, "accelerators": ["h100"]})},
        'controller.images.profiles[0].accelerators[0]: "h100" is neither "cpu" nor a '
        "configured GPU profile",
        True,
    ),
    ("unknown-top-level-key", {"replicas": 2}, "additional properties 'replicas'", False),
    (
        "unknown-image-key",
        {"image": {"repository": "r", "tag": "", "pullPolicy": "Always", "digest": "x"}},
        "additional properties 'digest'",
        False,
    ),
    ("replica-count-zero", {"replicaCount": 0}, "/replicaCount", False),
    ("replica-count-string", {"replicaCount": "2"}, "/replicaCount", False),
    (
        "pull-policy-unknown",
        {"image": {"repository": "r", "tag": "", "pullPolicy": "Sometimes"}},
        "/image/pullPolicy",
        False,
    ),
    (
        "service-type-unknown",
        {"service": {"type": "ExternalName", "port": 80}},
        "/service/type",
        False,
    ),
    (
        "service-port-out-of-range",
        {"service": {"type": "ClusterIP", "port": 70000}},
        "/service/port",
        False,
    ),
    (
        "ingress-without-host",
        {"ingress": {"enabled": True, "className": "", "host": "", "tls": []}},
        "/ingress/host",
        False,
    ),
    (
        "pdb-bad-percentage",
        {"replicaCount": 2, "podDisruptionBudget": {"minAvailable": "150%"}},
        "/podDisruptionBudget/minAvailable",
        False,
    ),
    (
        "controller-unknown-key",
        {"controller": {"workspaceImage": "w:1", "imagePullSecret": "x"}},
        "additional properties 'imagePullSecret'",
        True,
    ),
    ("gpu-inside-controller", {"controller": {"gpu": GPU_ON}}, "additional properties 'gpu'", True),
    (
        "namespace-not-a-label",
        {"controller": {"namespace": "Boxes_1"}},
        "/controller/namespace",
        True,
    ),
    (
        "storage-class-invalid",
        {"controller": {"storageClassName": "Fast_SSD"}},
        "/controller/storageClassName",
        True,
    ),
    (
        "workspace-image-with-scheme",
        {"controller": {"workspaceImage": "https://r.example/w:1"}},
        "/controller/workspaceImage",
        True,
    ),
    (
        "ssh-service-cluster-ip",
        {"controller": {"ssh": {"serviceType": "ClusterIP"}}},
        "/controller/ssh/serviceType",
        True,
    ),
    (
        "preset-zero-cpu",
        {"controller": {"presets": {"small": {"cpu": "0"}}}},
        "/controller/presets/small/cpu",
        True,
    ),
    (
        "preset-unknown",
        {
            "controller": {
                "presets": {
                    "huge": {
                        "cpu": "4",
                        "memoryRequest": "1Gi",
                        "memoryLimit": "1Gi",
                        "storage": "1Gi",
                    }
                }
            }
        },
        "additional properties 'huge'",
        True,
    ),
    (
        "preset-request-over-limit",
        {"controller": {"presets": {"small": {"memoryRequest": "5Gi", "memoryLimit": "4Gi"}}}},
        "controller.presets.small.memoryRequest: 5Gi must not exceed memoryLimit (4Gi)",
        True,
    ),
    (
        "ttl-default-over-max",
        {"controller": {"ttl": {"defaultHours": 200, "maxHours": 168}}},
        "controller.ttl.defaultHours (200) must not exceed controller.ttl.maxHours (168)",
        True,
    ),
    (
        "ttl-zero",
        {"controller": {"ttl": {"defaultHours": 0}}},
        "/controller/ttl/defaultHours",
        True,
    ),
    (
        "sidecar-named-like-main",
        {"controller": {"sidecars": [{"name": "devbox"}]}},
        "/controller/sidecars/0/name",
        True,
    ),
    (
        "sidecar-names-repeat",
        {"controller": {"sidecars": [{"name": "a"}, {"name": "a"}]}},
        'controller.sidecars[1].name: sidecar name "a" is used more than once',
        True,
    ),
    (
        "sidecar-env-repeats",
        {
            "controller": {
                "sidecars": [
                    {"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "X", "value": "2"}]}
                ]
            }
        },
        'controller.sidecars[0].env: "X" is set more than once',
        True,
    ),
    (
        "sidecar-env-value-not-string",
        {"controller": {"sidecars": [{"name": "a", "env": {"X": 1}}]}},
        "/controller/sidecars/0/env",
        True,
    ),
    (
        "cluster-name-not-a-label",
        {"controller": {"cluster": {"name": "GPU EU"}}},
        "/controller/cluster/name",
        True,
    ),
    (
        "cluster-id-given",
        {"controller": {"cluster": {"id": "0b5c"}}},
        "additional properties 'id'",
        True,
    ),
    (
        "token-given-inline",
        {"token": {"existingSecret": "", "key": "token", "value": "x" * 40}},
        "additional properties 'value'",
        False,
    ),
    (
        "token-secret-not-a-name",
        {"token": {"existingSecret": "Devboxes_Token", "key": "token"}},
        "/token/existingSecret",
        False,
    ),
    (
        "token-key-with-slash",
        {"token": {"existingSecret": "", "key": "a/b"}},
        "/token/key",
        False,
    ),
]


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Override nested mappings key by key, as Helm merges a values file into the defaults."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@pytest.fixture(scope="session")
def chart_defaults() -> dict[str, Any]:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(defaults, dict)
    return defaults


@pytest.mark.parametrize(
    ("values", "message", "controller_checks"),
    [pytest.param(v, m, c, id=i) for i, v, m, c in REFUSED],
)
def test_chart_refuses(
    values: dict[str, Any],
    message: str,
    controller_checks: bool,
    render: Render,
    chart_defaults: dict[str, Any],
    tmp_path: Path,
) -> None:
    result = render(with_token(values))
    assert result.returncode != 0, "the chart rendered invalid values"
    assert message in result.stderr, result.stderr
    if controller_checks:
        # The same values, as Helm merges them, are refused by the controller too.
        violations = controller_verdict(merge(chart_defaults, values), tmp_path)
        assert violations, "the controller accepted values that the chart refuses"


def test_image_profiles_reach_the_controller_unchanged(render: Render) -> None:
    values = {"gpu": GPU_ON, **images(SIDECAR_IMAGE, WORKSPACE_IMAGE)}
    result = render(with_token(values))
    assert result.returncode == 0, result.stderr
    settings = settings_from_mapping(rendered_settings(objects(result)))
    assert [
        p.model_dump(by_alias=True, exclude_defaults=True) for p in settings.images.profiles
    ] == [
        SIDECAR_IMAGE,
        WORKSPACE_IMAGE,
    ]


def test_oidc_settings_reach_the_controller_unchanged(render: Render) -> None:
    oidc = {
        "issuer": "https://id.example.com/realms/ml",
        "audience": "devboxes",
        "usernameClaim": "email",
        "groupsClaim": "roles",
        "cliClientId": "devbox-cli",
    }
    values = {"controller": {"auth": {"adminGroups": ["gpu-admins"], "oidc": oidc}}}
    result = render(with_token(values))
    assert result.returncode == 0, result.stderr
    auth = settings_from_mapping(rendered_settings(objects(result))).auth
    assert auth.admin_groups == ["gpu-admins"]
    assert auth.oidc is not None
    assert auth.oidc.model_dump(by_alias=True) == oidc


def test_the_cluster_name_reaches_the_controller_and_defaults_to_none(render: Render) -> None:
    peer = {"name": "gpu-us", "url": "https://devboxes.gpu-us.example.com"}
    cluster = {"name": "gpu-eu", "peers": [peer]}
    named = rendered_settings(objects(render(with_token({"controller": {"cluster": cluster}}))))
    assert settings_from_mapping(named).cluster.name == "gpu-eu"
    assert [p.model_dump() for p in settings_from_mapping(named).cluster.peers] == [peer]
    unnamed = rendered_settings(objects(render(with_token({}))))
    assert unnamed["cluster"] == {"name": None, "peers": []}
    assert settings_from_mapping(unnamed).cluster.name is None


def controller_token_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    (token,) = [e for e in container["env"] if e["name"] == "DEVBOXES_TOKEN"]
    return dict(token["valueFrom"]["secretKeyRef"])


def generated_token(docs: list[dict[str, Any]], key: str) -> str:
    secret = find(docs, "Secret")
    assert set(secret["data"]) == {key}
    return base64.b64decode(secret["data"][key], validate=True).decode()


# "1" would be read back as a number, and "api.token" must survive as one key.
@pytest.mark.parametrize("key", ["token", "api.token", "1"])
def test_without_an_existing_secret_the_chart_generates_a_strong_token(
    render: Render, key: str
) -> None:
    docs = objects(render({"token": {"existingSecret": "", "key": key}}))
    secret = find(docs, "Secret")
    assert secret["metadata"]["name"] == f"{RELEASE}-devboxes-token"
    assert secret["metadata"]["namespace"] == RELEASE_NAMESPACE
    assert secret["type"] == "Opaque"
    token = generated_token(docs, key)
    assert len(token) == 64
    assert token.isascii()
    assert token.isalnum()
    assert controller_token_env(docs) == {"name": secret["metadata"]["name"], "key": key}


def test_each_offline_render_draws_a_new_token(render: Render) -> None:
    # Without a cluster `lookup` finds nothing to keep, so the token must come from the
    # random source and not from anything fixed in the chart.
    assert generated_token(objects(render({})), "token") != generated_token(
        objects(render({})), "token"
    )


@pytest.mark.parametrize(("name", "key"), [("op-token", "bearer"), ("123", "1")])
def test_an_existing_secret_is_used_and_no_secret_is_rendered(
    render: Render, name: str, key: str
) -> None:
    docs = objects(render({"token": {"existingSecret": name, "key": key}}))
    assert all(doc["kind"] != "Secret" for doc in docs), "the operator's Secret is shadowed"
    assert controller_token_env(docs) == {"name": name, "key": key}


@pytest.mark.parametrize(
    "values_args",
    [[], ["-f", str(CHART / "ci" / "default-values.yaml")]],
    ids=["chart-defaults", "ci-values"],
)
def test_lint_strict_passes(
    helm: Callable[..., subprocess.CompletedProcess[str]], values_args: list[str]
) -> None:
    result = helm("lint", "--strict", str(CHART), *values_args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout, result.stdout
    assert "[ERROR]" not in result.stdout, result.stdout


# --- what the chart renders ----------------------------------------------------------------


def test_defaults_render_and_the_controller_accepts_the_settings(
    render: Render, chart_defaults: dict[str, Any], tmp_path: Path
) -> None:
    docs = objects(render({}))
    assert {doc["kind"] for doc in docs} == {
        "Secret",
        "ServiceAccount",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "Deployment",
        "Pod",
    }
    raw = rendered_settings(docs)
    expected = {
        **chart_defaults["controller"],
        "namespace": RELEASE_NAMESPACE,
        "gpu": chart_defaults["gpu"],
    }
    # Activity agents report to this release's Service unless told otherwise.
    service = find(docs, "Service")["metadata"]["name"]
    expected["idle"] = {
        **expected["idle"],
        "controllerUrl": f"http://{service}.{RELEASE_NAMESPACE}.svc:80",
    }
    assert raw == expected
    settings = settings_from_mapping(raw)
    assert settings.namespace == RELEASE_NAMESPACE
    assert settings.gpu.enabled is False
    # The unedited values file passes the controller's own check-config as well.
    assert controller_verdict(chart_defaults, tmp_path) is None


def commented_profiles() -> list[dict[str, Any]]:
    """The example profiles that values.yaml shows in comments under gpu.profiles."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    start = lines.index("  profiles: []") + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("  #"):
            break
        text = line[len("  # ") :]
        if text.startswith(("- ", "  ")):
            block.append(text)
    profiles = yaml.safe_load("\n".join(block))
    assert isinstance(profiles, list)
    return profiles


def test_documented_example_profiles_are_valid_and_reach_the_controller_unchanged(
    render: Render,
) -> None:
    profiles = commented_profiles()
    names = [p["name"] for p in profiles]
    assert names == ["nvidia-l4", "a100-1g-10gb", "amd-mi210", "h100-or-a100", "nvidia-l4-shared"]
    shared = profiles[names.index("nvidia-l4-shared")]
    assert "shared" in shared["displayName"].lower()
    assert "shared" in shared["description"].lower()
    gpu = {"enabled": True, "defaultProfile": "nvidia-l4", "profiles": profiles}
    raw = rendered_settings(objects(render(with_token({"gpu": gpu}))))
    assert raw["gpu"] == gpu
    settings = settings_from_mapping(raw)
    amd = settings.gpu.profile("amd-mi210")
    assert amd is not None
    assert amd.supplemental_groups == [44, 109]
    dra = settings.gpu.profile("h100-or-a100")
    assert dra is not None
    assert [c.device_class_name for c in dra.choices()] == ["gpu.nvidia.com"] * 2
    assert settings.gpu.capabilities().default_profile == "nvidia-l4"


def test_large_numbers_and_null_fields_survive_the_hand_over(render: Render) -> None:
    profile = {
        **PROFILE,
        "count": 64,
        "description": None,
        "supplementalGroups": [1, 2147483647],
        "tolerations": [
            {
                "key": "example.com/t",
                "operator": "Equal",
                "value": "v",
                "effect": "NoExecute",
                "tolerationSeconds": 86400,
            },
            {"operator": "Exists", "value": None},
        ],
    }
    gpu = {"enabled": True, "defaultProfile": "l4", "profiles": [profile]}
    raw = rendered_settings(objects(render(with_token({"gpu": gpu}))))
    assert raw["gpu"] == gpu
    loaded = settings_from_mapping(raw).gpu.profiles[0]
    assert loaded.supplemental_groups == [1, 2147483647]
    assert loaded.count == 64
    assert loaded.tolerations[0].to_kubernetes()["tolerationSeconds"] == 86400


def test_deployment_runs_the_controller_as_specified(render: Render) -> None:
    docs = objects(render(with_token({"token": {"existingSecret": "op-token", "key": "bearer"}})))
    deployment = find(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "devboxes/controller:0.1.0"
    assert [*container["command"], *container["args"]] == [
        "devboxes-controller",
        "serve",
        "--settings",
        "/etc/devboxes/settings.yaml",
        "--listen",
        "0.0.0.0:8080",
        "--probe-listen",
        "0.0.0.0:8081",
    ]
    assert controller_token_env(docs) == {"name": "op-token", "key": "bearer"}
    assert container["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "probes", "containerPort": 8081, "protocol": "TCP"},
    ]
    # The probes go to the port the controller serves them on apart from the API's, and
    # only the API's port is behind the Service.
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "probes"}
    assert [port["targetPort"] for port in find(docs, "Service")["spec"]["ports"]] == ["http"]
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == find(docs, "ServiceAccount")["metadata"]["name"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/devboxes"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == find(docs, "ConfigMap")["metadata"]["name"]


def test_image_tag_overrides_the_app_version(render: Render) -> None:
    image = {"repository": "registry.example.com/devboxes", "tag": "1.2.3", "pullPolicy": "Always"}
    deployment = find(objects(render(with_token({"image": image}))), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/devboxes:1.2.3"
    assert container["imagePullPolicy"] == "Always"


def test_a_settings_change_rolls_the_controller(render: Render) -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = find(objects(render(with_token(values))), "Deployment")
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/settings"])

    assert checksum({}) != checksum({"gpu": GPU_ON})
    assert checksum({}) == checksum({"replicaCount": 1})


EXPECTED_RULES = {
    ("apps", "deployments"): {"list", "watch", "create", "patch", "delete"},
    ("apps", "replicasets"): {"list", "watch"},
    ("", "pods"): {"list", "watch", "patch"},
    ("", "services"): {"list", "watch", "create", "delete"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "events"): {"list", "watch", "create"},
    ("", "secrets"): {"create", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "update", "delete"},
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    ("", "resourcequotas"): {"list"},
    ("", "limitranges"): {"list"},
    ("resource.k8s.io", "resourceclaimtemplates"): {"list", "watch", "create"},
    ("resource.k8s.io", "resourceclaims"): {"list", "watch"},
}
# Whatever availability says: the cluster's id, and only kube-system's.
IDENTITY_RULES = {("", "namespaces/kube-system"): {"get"}}
EXPECTED_CLUSTER_RULES = {
    **IDENTITY_RULES,
    ("", "nodes"): {"list", "watch"},
    ("", "pods"): {"list", "watch"},
    ("node.k8s.io", "runtimeclasses"): {"list", "watch"},
    ("storage.k8s.io", "storageclasses"): {"list"},
    ("resource.k8s.io", "resourceslices"): {"list", "watch"},
    ("resource.k8s.io", "resourceclaims"): {"list", "watch"},
    ("resource.k8s.io", "deviceclasses"): {"list", "watch"},
}


def granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """The verbs of each group and resource, or ``resource/name`` where a rule names the
    objects it grants."""
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) - {"resourceNames"} == {"apiGroups", "resources", "verbs"}, "no URLs"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for name in rule.get("resourceNames", [None]):
                    key = (group, resource if name is None else f"{resource}/{name}")
                    rules.setdefault(key, set()).update(rule["verbs"])
    return rules


def test_role_grants_exactly_what_the_controller_uses_in_the_box_namespace(
    render: Render,
) -> None:
    docs = objects(render(with_token({"controller": {"namespace": "boxes"}})))
    role = find(docs, "Role")
    assert granted(role) == EXPECTED_RULES
    assert all("*" not in verbs for verbs in granted(role).values())
    assert role["metadata"]["namespace"] == "boxes"
    binding = find(docs, "RoleBinding")
    assert binding["metadata"]["namespace"] == "boxes"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": find(docs, "ServiceAccount")["metadata"]["name"],
            "namespace": RELEASE_NAMESPACE,
        }
    ]
    assert rendered_settings(docs)["namespace"] == "boxes"


def test_availability_widens_the_read_only_cluster_role_unique_to_the_release_namespace(
    render: Render,
) -> None:
    docs = objects(render(with_token({})))
    cluster_role = find(docs, "ClusterRole")
    assert granted(cluster_role) == EXPECTED_CLUSTER_RULES
    assert (
        cluster_role["metadata"]["name"] == f"{RELEASE_NAMESPACE}-{RELEASE}-devboxes-cluster-read"
    )
    binding = find(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": find(docs, "ServiceAccount")["metadata"]["name"],
            "namespace": RELEASE_NAMESPACE,
        }
    ]
    off = objects(render(with_token({"controller": {"availability": {"enabled": False}}})))
    assert granted(find(off, "ClusterRole")) == IDENTITY_RULES
    assert find(off, "ClusterRoleBinding")["roleRef"] == binding["roleRef"]
    assert rendered_settings(off)["availability"] == {"enabled": False}
    refused = render(with_token({"controller": {"availability": {"enabled": "yes"}}}))
    assert refused.returncode != 0
    assert "availability" in refused.stderr


def test_helm_test_runs_the_doctor_with_the_controllers_account_and_settings(
    render: Render,
) -> None:
    docs = objects(render(with_token({})))
    pod = find(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["serviceAccountName"] == find(docs, "ServiceAccount")["metadata"]["name"]
    (container,) = pod["spec"]["containers"]
    assert (
        container["image"]
        == find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    assert [*container["command"], *container["args"]] == [
        "devboxes-controller",
        "doctor",
        "--settings",
        "/etc/devboxes/settings.yaml",
    ]
    assert (
        pod["spec"]["volumes"][0]["configMap"]["name"]
        == find(docs, "ConfigMap")["metadata"]["name"]
    )


def test_disruption_budget_only_with_several_replicas(render: Render) -> None:
    assert all(doc["kind"] != "PodDisruptionBudget" for doc in objects(render(with_token({}))))
    docs = objects(
        render(with_token({"replicaCount": 3, "podDisruptionBudget": {"minAvailable": 2}}))
    )
    pdb = find(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 2
    assert (
        pdb["spec"]["selector"]["matchLabels"]
        == (find(docs, "Deployment")["spec"]["selector"]["matchLabels"])
    )
    assert find(docs, "Deployment")["spec"]["replicas"] == 3


def test_ingress_routes_to_the_service(render: Render) -> None:
    ingress_values = {
        "enabled": True,
        "className": "nginx",
        "host": "devboxes.example.com",
        "tls": [{"secretName": "devboxes-tls", "hosts": ["devboxes.example.com"]}],
    }
    docs = objects(render(with_token({"ingress": ingress_values})))
    ingress = find(docs, "Ingress")
    service = find(docs, "Service")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == ingress_values["tls"]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "devboxes.example.com"
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"] == {
        "name": service["metadata"]["name"],
        "port": {"name": "http"},
    }
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_the_ingress_routes_the_preview_domain_to_the_service_when_previews_are_set(
    render: Render,
) -> None:
    ingress_values = {"enabled": True, "className": "", "host": "devboxes.example.com", "tls": []}
    values = with_token({"ingress": ingress_values})
    values["controller"] = {"connections": {"previewUrl": "https://*.preview.example.com"}}
    docs = objects(render(values))
    service = find(docs, "Service")
    dashboard, previews = find(docs, "Ingress")["spec"]["rules"]
    assert dashboard["host"] == "devboxes.example.com"
    assert previews["host"] == "*.preview.example.com"
    (path,) = previews["http"]["paths"]
    assert path["backend"]["service"] == {
        "name": service["metadata"]["name"],
        "port": {"name": "http"},
    }
    assert rendered_settings(docs)["connections"]["previewUrl"] == "https://*.preview.example.com"
