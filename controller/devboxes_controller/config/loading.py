"""Reading the settings: a YAML or JSON file, environment overrides, or Helm values.

YAML is read strictly (a key written twice is refused) and every failure, from an
unreadable file to a broken rule, is a :class:`~.violations.ConfigError` naming the file
or the key, so ``check-config`` and start-up report the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from .settings import Settings, validate
from .violations import ConfigError, config_error, show

ENV_NAMESPACE = "DEVBOXES_NAMESPACE"
ENV_WORKSPACE_IMAGE = "DEVBOXES_WORKSPACE_IMAGE"
ENV_SSH_HOST = "DEVBOXES_SSH_HOST"

Source = Literal["settings", "chart values"]
SETTINGS_FILE: Source = "settings"
CHART_VALUES: Source = "chart values"


@dataclass(frozen=True)
class CheckTarget:
    """The settings read from a file that may be either kind, and which kind it was."""

    settings: Settings
    source: Source
    # Chart values that leave controller.namespace empty: the chart puts the release
    # namespace there, which the file cannot tell, so the namespace of ``settings`` is
    # the one the caller named as the release's or, without one, the default.
    namespace_from_release: bool = False


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key written twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"the key {key!r} is written more than once",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such settings file"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the settings file: {exc.strerror}"]) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML or JSON: {_yaml_problem(exc)}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping, got {show(data)}"])
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        problem = exc.problem or exc.context or "syntax error"
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
        return problem
    return str(exc)


def load_settings(path: Path | None, environ: Mapping[str, str]) -> Settings:
    """Settings from a YAML or JSON file (None: all defaults) plus environment overrides.

    ``DEVBOXES_NAMESPACE``, ``DEVBOXES_WORKSPACE_IMAGE`` and ``DEVBOXES_SSH_HOST``, when
    set and not empty, replace ``namespace``, ``workspaceImage`` and ``ssh.host``.
    """
    return _with_overrides({} if path is None else _read_mapping(path), environ)


def _with_overrides(data: dict[str, Any], environ: Mapping[str, str]) -> Settings:
    sources: dict[str, str] = {}
    for variable, key in ((ENV_NAMESPACE, "namespace"), (ENV_WORKSPACE_IMAGE, "workspaceImage")):
        if environ.get(variable):
            data.pop("workspace_image" if key == "workspaceImage" else key, None)
            data[key] = environ[variable]
            sources[key] = variable
    if environ.get(ENV_SSH_HOST):
        ssh = data.get("ssh")
        if ssh is None:
            data["ssh"] = {"host": environ[ENV_SSH_HOST]}
            sources["ssh.host"] = ENV_SSH_HOST
        elif isinstance(ssh, Mapping):
            data["ssh"] = {**ssh, "host": environ[ENV_SSH_HOST]}
            sources["ssh.host"] = ENV_SSH_HOST
    settings, violations = validate(data)
    if settings is None:
        raise config_error(
            [(f"{p} (from {sources[p]})" if p in sources else p, m) for p, m in violations]
        )
    return settings


def load_check_target(
    path: Path | None,
    environ: Mapping[str, str] | None = None,
    release_namespace: str | None = None,
) -> CheckTarget:
    """Settings from a settings file or a Helm values file, for ``check-config`` and the
    doctor; None reads no file (all defaults).

    A Helm values file is recognised by its top-level ``controller:`` key; its
    ``controller`` and ``gpu`` blocks are checked and the other chart keys are left to
    the chart's JSON schema. Paths in errors then name the values keys. It is read as
    the chart renders it: ``release_namespace`` (or, without it, the default) stands in
    for an empty or missing ``controller.namespace``. ``environ`` overrides a settings file as in
    :func:`load_settings`, never a values file: the chart passes none of those variables
    to the controller.
    """
    data = {} if path is None else _read_mapping(path)
    if "controller" not in data:
        return CheckTarget(_with_overrides(data, environ or {}), SETTINGS_FILE)
    controller = data["controller"]
    if controller is None:
        controller = {}
    if not isinstance(controller, Mapping):
        raise ConfigError([f"controller: must be a mapping, got {show(controller)}"])
    misplaced: list[tuple[str, str]] = []
    if "gpu" in controller:
        misplaced.append(
            ("controller.gpu", "GPU profiles belong in the top-level gpu: block of the values")
        )
    merged = {k: v for k, v in controller.items() if k != "gpu"}
    # The chart replaces an empty namespace with the release namespace.
    sources: dict[str, str] = {}
    from_release = merged.get("namespace", "") == ""
    if from_release:
        merged.pop("namespace", None)
        if release_namespace is not None:
            merged["namespace"] = release_namespace
            sources["namespace"] = "the release namespace"
    merged["gpu"] = data.get("gpu", {})
    settings, violations = validate(merged)
    named = [
        (
            (p if p == "gpu" or p.startswith(("gpu.", "gpu[")) else f"controller.{p}")
            + (f" ({sources[p]})" if p in sources else ""),
            m,
        )
        for p, m in violations
    ]
    if settings is None or misplaced:
        raise config_error(misplaced + named)
    return CheckTarget(settings, CHART_VALUES, namespace_from_release=from_release)
