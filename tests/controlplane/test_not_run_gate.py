"""Real-cluster tests never pass silently: without binaries they are reported in one line, and
the run fails in CI and wherever ``../shared/k8s`` exists beside the repository.

Each case runs pytest on a checkout of its own (the repository's root conftest.py, a pytest.ini,
one real-cluster test and one other) in a temporary directory, so that whether ``../shared/k8s`` exists
beside it is the test's choice, not this machine's.
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


def checkout(root: Path, *, shared: bool) -> Path:
    """``root/repo`` with the root conftest.py, one real-cluster test and one other; ``shared``: with an
    (empty) ``root/shared/k8s`` beside it."""
    repo = root / "repo"
    repo.mkdir()
    shutil.copy(REPO / "conftest.py", repo / "conftest.py")
    (repo / "pytest.ini").write_text(PYTEST_INI)
    (repo / "test_real.py").write_text(ONE_REAL_TEST)
    if shared:
        (root / "shared" / "k8s").mkdir(parents=True)
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


@pytest.mark.slow(40)
def test_without_shared_binaries_a_local_run_reports_them_and_ci_fails(tmp_path: Path) -> None:
    repo = checkout(tmp_path, shared=False)
    empty = tmp_path / "empty"
    empty.mkdir()

    local = run_pytest(repo, KUBEBUILDER_ASSETS=str(empty))
    (line,) = not_run_lines(local)
    assert "KUBEBUILDER_ASSETS" in line, line
    assert "../shared/k8s" in line, line
    assert local.returncode == 0, local.stdout

    unset = run_pytest(repo)
    (line,) = not_run_lines(unset)
    assert "does not exist" in line, line
    assert unset.returncode == 0, unset.stdout

    ci = run_pytest(repo, KUBEBUILDER_ASSETS=str(empty), CI="true")
    assert len(not_run_lines(ci)) == 1, ci.stdout
    assert ci.returncode == 1, ci.stdout

    # With the workers of pytest-xdist (as ./dev/test runs): the controller, which collects
    # nothing itself, learns from its workers, says so once and fails in CI.
    parallel = run_pytest(repo, "-n", "2", KUBEBUILDER_ASSETS=str(empty))
    assert len(not_run_lines(parallel)) == 1, parallel.stdout
    assert parallel.returncode == 0, parallel.stdout
    parallel_ci = run_pytest(repo, "-n", "2", KUBEBUILDER_ASSETS=str(empty), CI="true")
    assert len(not_run_lines(parallel_ci)) == 1, parallel_ci.stdout
    assert parallel_ci.returncode == 1, parallel_ci.stdout


@pytest.mark.slow
def test_with_shared_binaries_beside_the_repository_a_run_that_skips_them_fails(
    tmp_path: Path,
) -> None:
    repo = checkout(tmp_path, shared=True)
    empty = tmp_path / "empty"
    empty.mkdir()

    # KUBEBUILDER_ASSETS names a directory without the binaries: they did not run, though
    # ../shared/k8s was there. Not in CI, the run fails all the same.
    local = run_pytest(repo, KUBEBUILDER_ASSETS=str(empty))
    (line,) = not_run_lines(local)
    assert "KUBEBUILDER_ASSETS" in line, line
    assert "../shared/k8s" in line, line
    assert local.returncode == 1, local.stdout

    # ../shared/k8s without its SHA256SUMS: nothing to unpack, said so, and a failure.
    unset = run_pytest(repo)
    (line,) = not_run_lines(unset)
    assert "has no SHA256SUMS" in line, line
    assert unset.returncode == 1, unset.stdout
