"""Under CI, a test that would skip for a missing prerequisite fails instead.

A run by hand may leave out what the machine lacks (skipped, with the reason printed); a
CI run that passed while skipping would claim more than it checked. CI is on when ``CI``
is set to anything but empty, ``false`` or ``0``. Deselection (``-m``, ``-k``) is no skip
and stays as it is; an expected failure (xfail) is reported as skipped too but is no
missing prerequisite, so it stays as it is.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import TypeVar

import pytest

ReportT = TypeVar("ReportT", pytest.TestReport, pytest.CollectReport)


def ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "false", "0")


def required(report: ReportT) -> ReportT:
    """The report as CI counts it: a skip becomes a failure that gives the skip's reason."""
    if not (report.skipped and ci()) or hasattr(report, "wasxfail"):
        return report
    # A skip's longrepr is (path, line, "Skipped: <reason>").
    assert isinstance(report.longrepr, tuple), report.longrepr
    reason = report.longrepr[2].removeprefix("Skipped: ")
    report.outcome = "failed"
    # A string longrepr is what the summary line prints after the test's name.
    report.longrepr = f"CI requires every prerequisite: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport() -> Generator[None, pytest.TestReport, pytest.TestReport]:
    return required((yield))


# A module that skips itself (``pytest.skip(..., allow_module_level=True)``, a module-level
# ``importorskip``) is skipped while it is collected, before it has any test.
@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report() -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    return required((yield))
