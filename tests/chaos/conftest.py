"""Prints the fault-injection summary (schedules run, faults injected by kind) at the end of
the test output, whether or not ``-s`` is given."""

import pytest

SUMMARY = pytest.StashKey[list[str]]()
"""Summary lines the chaos tests leave for the terminal report."""


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUMMARY] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in terminalreporter.config.stash.get(SUMMARY, []):
        terminalreporter.write_line(line)
