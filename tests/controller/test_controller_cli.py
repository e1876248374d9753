"""``devboxes-controller doctor``'s handling of its input, up to the first cluster call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from devboxes_controller.__main__ import doctor_json, doctor_source, main
from devboxes_controller.config.loading import load_check_target

from devboxes_sdk.models import DoctorCheck, DoctorReport

ROOT = Path(__file__).resolve().parents[2]
CHART_VALUES = ROOT / "charts" / "devboxes" / "values.yaml"
PREFIX = "devboxes-controller: doctor: "


def write(tmp_path: Path, data: object, name: str) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_the_source_line_names_the_kind_of_file_and_the_namespace(tmp_path: Path) -> None:
    settings = write(tmp_path, {"namespace": "boxes"}, "settings.yaml")
    assert doctor_source(settings, load_check_target(settings), None) == (
        f"read settings file {settings}; boxes in namespace boxes"
    )
    assert doctor_source(None, load_check_target(None), None) == (
        "no file, default settings; boxes in namespace devboxes"
    )
    named = write(tmp_path, {"controller": {"namespace": "gpu"}}, "named.yaml")
    assert doctor_source(named, load_check_target(named, release_namespace="x"), "x") == (
        f"read chart values file {named}; boxes in namespace gpu from controller.namespace "
        "(--namespace is used only when it is empty)"
    )


def test_an_empty_values_namespace_is_the_release_namespace_or_an_assumption() -> None:
    given = load_check_target(CHART_VALUES, release_namespace="team-a")
    assert doctor_source(CHART_VALUES, given, "team-a") == (
        f"read chart values file {CHART_VALUES}; boxes in namespace team-a, the release "
        "namespace (controller.namespace is empty)"
    )
    assumed = load_check_target(CHART_VALUES)
    assert doctor_source(CHART_VALUES, assumed, None) == (
        f"read chart values file {CHART_VALUES}; boxes in namespace devboxes assumed: "
        "controller.namespace is empty, so the chart uses the release namespace; name it "
        "with --namespace"
    )


def test_the_json_report_says_what_was_read() -> None:
    check = DoctorCheck(check="ssh-keys", verdict="warn", message="m", fix="f")
    report = DoctorReport(ok=True, checks=[check])
    found = json.loads(doctor_json(report, load_check_target(CHART_VALUES)))
    assert (found["source"], found["namespace"]) == ("chart values", "devboxes")
    assert DoctorReport.model_validate(found) == report


def test_the_charts_values_are_read_before_asking_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-kubeconfig"
    code = main(["doctor", "--settings", str(CHART_VALUES), "--kubeconfig", str(missing)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[0].startswith(f"{PREFIX}read chart values file {CHART_VALUES}")
    assert "cannot load Kubernetes credentials" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("data", "name", "expected"),
    [
        (
            {"namespace": "boxes"},
            "settings.yaml",
            f"{PREFIX}--namespace names the Helm release namespace of a chart values file, "
            "but {path} is a settings file: set namespace in the settings file, or "
            "DEVBOXES_NAMESPACE",
        ),
        (
            {"image": {"tag": ""}, "controller": {"ttl": {"defaultHours": 0}}},
            "values.yaml",
            "devboxes-controller: invalid settings:\n"
            "  controller.ttl.defaultHours: must be at least 1, got 0",
        ),
    ],
)
def test_unusable_input_exits_2_with_a_message(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    data: object,
    name: str,
    expected: str,
) -> None:
    path = write(tmp_path, data, name)
    code = main(["doctor", "--settings", str(path), "--namespace", "team-a"])
    assert code == 2
    assert capsys.readouterr().err.strip() == expected.format(path=path)
