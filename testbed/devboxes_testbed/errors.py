"""The one exception the testbed raises for problems a person can fix."""


class TestbedError(Exception):
    """A clear, one-line-per-cause problem with the testbed (bad input, failed start, missing tool)."""

    __test__ = False  # not a pytest test class despite the name
