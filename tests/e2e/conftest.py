"""Fixtures of the end-to-end tests on the real control plane."""

from collections.abc import Iterator

import pytest

from .real import RbacUsage

_REPORT = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def rbac_usage(request: pytest.FixtureRequest) -> Iterator[RbacUsage]:
    """Grants and requests of every real-cluster scenario; the grants no request used are
    reported once, at the end of the run."""
    usage = RbacUsage()
    yield usage
    request.config.stash[_REPORT] = usage.report()


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """The RBAC report of :func:`rbac_usage`, when real-cluster scenarios ran."""
    for line in config.stash.get(_REPORT, []):
        terminalreporter.write_line(line)
