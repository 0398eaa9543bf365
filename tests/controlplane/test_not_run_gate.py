"""Real-cluster tests never pass silently: without binaries they are reported in one line; the
run passes (on CI too), and fails only when KUBEBUILDER_ASSETS asks for a real cluster that
could not be started.

Each case runs pytest on a checkout of its own (the repository's root conftest.py, a pytest.ini,
one real-cluster test and one other) in a temporary directory.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTEST_INI = """\
[pytest]
markers =
    real_k8s: needs the session's real Kubernetes control plane
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""
ONE_REAL_TEST = """\
import pytest


@pytest.mark.real_k8s
def test_needs_the_control_plane(real_cluster: object) -> None:
    assert real_cluster is not None


def test_needs_nothing() -> None:
    assert True
"""


def checkout(root: Path) -> Path:
    """``root/repo`` with the root conftest.py, one real-cluster test and one other."""
    repo = root / "repo"
    repo.mkdir()
    shutil.copy(REPO / "conftest.py", repo / "conftest.py")
    (repo / "pytest.ini").write_text(PYTEST_INI)
    (repo / "test_real.py").write_text(ONE_REAL_TEST)
    return repo


def run_pytest(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "KUBEBUILDER_ASSETS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=repo,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def not_run_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stdout.splitlines() if "did NOT run" in line]


@pytest.mark.slow(30)
def test_without_binaries_a_run_reports_them_in_one_line_and_passes_in_ci_too(
    tmp_path: Path,
) -> None:
    repo = checkout(tmp_path)

    for env in ({}, {"CI": "true"}):
        result = run_pytest(repo, **env)
        (line,) = not_run_lines(result)
        assert "1 tests did NOT run (KUBEBUILDER_ASSETS is unset)" in line, line
        assert "enable them with KUBEBUILDER_ASSETS=DIR" in line, line
        assert "shared" not in line, line
        assert result.returncode == 0, result.stdout
        assert "1 passed, 1 deselected" in result.stdout, result.stdout

    # With the workers of pytest-xdist (as ./dev/test runs): the controller, which collects
    # nothing itself, learns from its workers and says so once.
    parallel = run_pytest(repo, "-n", "2", CI="true")
    assert len(not_run_lines(parallel)) == 1, parallel.stdout
    assert parallel.returncode == 0, parallel.stdout


@pytest.mark.slow(30)
def test_a_run_asked_for_a_real_cluster_that_cannot_start_fails(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()

    for env in ({}, {"CI": "true"}):
        result = run_pytest(repo, KUBEBUILDER_ASSETS=str(empty), **env)
        (line,) = not_run_lines(result)
        assert f"KUBEBUILDER_ASSETS={empty} lacks etcd, kube-apiserver" in line, line
        assert result.returncode == 1, result.stdout

    parallel = run_pytest(repo, "-n", "2", KUBEBUILDER_ASSETS=str(empty))
    assert len(not_run_lines(parallel)) == 1, parallel.stdout
    assert parallel.returncode == 1, parallel.stdout
