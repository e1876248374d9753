"""The one exception the testbed raises for problems a person can fix."""


class TestbedError(Exception):
    """A problem a person can fix: bad input, a failed start, a missing tool."""

    __test__ = False  # not a pytest test class despite the name
