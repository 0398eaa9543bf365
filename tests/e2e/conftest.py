"""Fixtures of the end-to-end tests on the real control plane."""

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidegate.testing import workers
from tidegate.testing.controlplane import ControlPlane
from tidegate.testing.rbac import RbacUsage

from .real import STARTUP_RESTARTS, RealTidegate, real_system

_REPORT = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def rbac_usage(request: pytest.FixtureRequest) -> Iterator[RbacUsage]:
    """Grants and requests of every real-cluster scenario; the grants no request used are
    reported once, at the end of the run."""
    usage = RbacUsage()
    yield usage
    workeroutput = getattr(request.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the root conftest's controller reports
        workeroutput[workers.RBAC_USAGE] = usage.as_json()
        workeroutput.setdefault(workers.REPORT_LINES, []).extend(STARTUP_RESTARTS)
        return
    request.config.stash[_REPORT] = usage.report()


@pytest.fixture
def real_tidegate(
    real_cluster: ControlPlane, nats_url: str, tmp_path: Path, rbac_usage: RbacUsage
) -> RealTidegate:
    """Starts tidegate on the real control plane: ``async with real_tidegate(nodes=…) as
    system``; see :func:`tests.e2e.real.real_system` for what it checks on a clean exit."""
    return functools.partial(real_system, real_cluster, nats_url, tmp_path, usage=rbac_usage)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """The RBAC report of :func:`rbac_usage`, when real-cluster scenarios ran, and every
    service that had to be started twice."""
    for line in config.stash.get(_REPORT, []):
        terminalreporter.write_line(line)
    for note in STARTUP_RESTARTS:
        terminalreporter.write_line(note)
