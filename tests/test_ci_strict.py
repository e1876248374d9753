"""Under CI a skip is a failure that gives the skip's reason; by hand it stays a skip.

Each test runs pytest on a small test file with the plugin of tests/ci_strict.py, as
tests/conftest.py loads it.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SKIPS = """
import shutil

import pytest


@pytest.fixture
def frobnicator():
    pytest.skip("the frobnicator is not installed")


def test_in_its_body():
    pytest.skip("the widget service is not running")


@pytest.mark.skipif(shutil.which("sh") is not None, reason="a shell is on PATH")
def test_by_a_marker():
    pass


def test_in_a_fixture(frobnicator):
    pass


@pytest.mark.xfail(reason="a known gap", strict=True)
def test_an_expected_failure():
    assert False


def test_that_runs():
    pass
"""

# A test that skips itself, and is deselected by its marker.
DESELECTED_SKIP = """
import pytest

@pytest.mark.slow
def test_left_out():
    pytest.skip("the slow machine is not here")

def test_kept():
    pass
"""

# A module that skips itself while it is collected.
MODULE_SKIP = """
import pytest

pytest.skip("the gadget library is missing", allow_module_level=True)

def test_never_collected():
    pass
"""

REASONS = [
    "the widget service is not running",
    "a shell is on PATH",
    "the frobnicator is not installed",
]


def run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None, *args: str
) -> pytest.RunResult:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    # The summary options of `make test`: a line for each failure, error and skip.
    return pytester.runpytest("-p", "ci_strict", "-p", "no:cacheprovider", "-rfEs", *args)


@pytest.mark.parametrize("ci", [None, "", "false", "0", "False"])
def test_without_ci_a_skip_is_a_skip_with_its_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    pytester.makepyfile(test_skips=SKIPS)
    result = run(pytester, monkeypatch, ci)
    result.assert_outcomes(passed=1, skipped=3, xfailed=1)
    for reason in REASONS:
        result.stdout.fnmatch_lines([f"SKIPPED * {reason}"])
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_under_ci_a_skip_fails_with_its_reason_on_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    pytester.makepyfile(test_skips=SKIPS)
    result = run(pytester, monkeypatch, ci)
    # A skip while the test is set up (a marker, a fixture) fails as an error of its setup.
    result.assert_outcomes(passed=1, failed=1, errors=2, xfailed=1)
    outcomes = (
        "FAILED test_skips.py::test_in_its_body",
        *(f"ERROR test_skips.py::{test}" for test in ("test_by_a_marker", "test_in_a_fixture")),
    )
    for outcome, reason in zip(outcomes, REASONS, strict=True):
        result.stdout.fnmatch_lines([f"{outcome} - CI requires every prerequisite: {reason}"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_under_ci_deselected_tests_are_no_failures(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_marked=DESELECTED_SKIP)
    pytester.makeini("[pytest]\nmarkers =\n    slow: a slow test\n")
    result = run(pytester, monkeypatch, "true", "-m", "not slow")
    result.assert_outcomes(passed=1, deselected=1)
    assert result.ret == pytest.ExitCode.OK


def test_a_module_that_skips_itself_is_an_error_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_module=MODULE_SKIP)
    by_hand = run(pytester, monkeypatch, None)
    by_hand.assert_outcomes(skipped=1)
    by_hand.stdout.fnmatch_lines(["SKIPPED * the gadget library is missing"])

    under_ci = run(pytester, monkeypatch, "true")
    under_ci.assert_outcomes(errors=1)
    under_ci.stdout.fnmatch_lines(
        ["ERROR test_module.py - CI requires every prerequisite: the gadget library is missing"]
    )
    assert under_ci.ret == pytest.ExitCode.INTERRUPTED
