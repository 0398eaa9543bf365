"""Real-cluster tests never pass silently: without binaries they are reported, and CI fails."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ONE_REAL_TEST = "tests/kube_contract/test_events.py::test_event_is_created_then_counted"


def run_pytest(**env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "KUBEBUILDER_ASSETS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", ONE_REAL_TEST, "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_missing_binaries_are_reported_in_one_line_and_fail_ci(tmp_path: Path) -> None:
    empty = str(tmp_path)
    local = run_pytest(KUBEBUILDER_ASSETS=empty)
    lines = [line for line in local.stdout.splitlines() if "did NOT run" in line]
    assert len(lines) == 1, local.stdout
    assert "KUBEBUILDER_ASSETS" in lines[0]
    assert "../shared/k8s" in lines[0]
    assert local.returncode == 0, local.stdout

    ci = run_pytest(KUBEBUILDER_ASSETS=empty, CI="true")
    assert ci.returncode == 1, ci.stdout
    assert any("did NOT run" in line for line in ci.stdout.splitlines())
