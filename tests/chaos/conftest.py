"""Prints the fault-injection summary (schedules run, faults injected by kind) at the end of
the test output, whether or not ``-s`` is given (from an xdist worker, through the root
conftest.py's controller)."""

import pytest

from tidegate.testing import workers

SUMMARY = pytest.StashKey[list[str]]()
"""Summary lines the chaos tests leave for the terminal report."""


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUMMARY] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput.setdefault(workers.REPORT_LINES, []).extend(
            session.config.stash.get(SUMMARY, [])
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in terminalreporter.config.stash.get(SUMMARY, []):
        terminalreporter.write_line(line)
