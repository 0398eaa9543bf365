"""Fixtures of the end-to-end tests on the real control plane."""

import functools
from pathlib import Path

import pytest

from tidegate.testing import workers
from tidegate.testing.controlplane import ControlPlane
from tidegate.testing.rbac import RbacUsage

from .chart import USAGE
from .real import STARTUP_RESTARTS, RealTidegate, real_system


@pytest.fixture(scope="session")
def rbac_usage() -> RbacUsage:
    """Grants and requests of every scenario that ran the chart's RBAC, on the real control
    plane or the simulator (:data:`tests.e2e.chart.USAGE`); the grants no request used are
    reported once, at the end of the run."""
    return USAGE


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """An xdist worker hands its RBAC usage and notes to the controller (root conftest.py),
    which reports them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[workers.RBAC_USAGE] = USAGE.as_json()
        workeroutput.setdefault(workers.REPORT_LINES, []).extend(STARTUP_RESTARTS)


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
    """The RBAC report of :func:`rbac_usage`, when scenarios with the chart's RBAC ran in
    this process, and every service that had to be started twice."""
    if getattr(config, "workerinput", None) is not None:
        return  # a worker: the controller reports
    for line in USAGE.report():
        terminalreporter.write_line(line)
    for note in STARTUP_RESTARTS:
        terminalreporter.write_line(note)
