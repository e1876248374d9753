"""Reading the refusal of a settings load."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from devboxes_controller.config.violations import ConfigError


def violations(action: Callable[[], object]) -> list[str]:
    """The violations named by the ConfigError that ``action`` raises; the test fails when
    it raises none."""
    with pytest.raises(ConfigError) as caught:
        action()
    return caught.value.violations
