"""Session-wide test fixtures: a real nats-server with JetStream, and a real Kubernetes
control plane, each shared by every test that asks for it.

The nats-server runs on a free loopback port with its own store directory and is stopped when
the session ends. Tests isolate themselves by cluster id (each test gets a fresh one), so the
streams of one test never see another's messages.

``real_cluster`` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler once
per session from the binaries in ``KUBEBUILDER_ASSETS`` (envtest's way). Tests that use it are
marked ``real_k8s`` and work in their own namespaces. Without the variable those tests are
deselected and one line says how many and how to enable them; the run fails only when the
variable is set and the tests still could not run (the user asked for a real cluster).
"""

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.bus.server import NatsServerProcess
from tidegate.sim import SimCluster, SimSettings
from tidegate.testing import workers
from tidegate.testing.controlplane import (
    ASSETS_ENV,
    ControlPlane,
    find_binaries,
    missing_binaries,
)
from tidegate.testing.rbac import RbacUsage


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServerProcess]:
    """A nats-server with JetStream for the whole test session."""
    store: Path = tmp_path_factory.mktemp("jetstream")
    # Each test's cluster reserves a 1 GiB decisions stream (it writes a few KiB): above the
    # default limit of 75% of the free disk, later tests could not create their streams.
    with NatsServerProcess(store_dir=store, max_file_store_bytes=1 << 40) as server:
        yield server


@pytest.fixture
def nats_url(nats_server: NatsServerProcess) -> str:
    """URL of the session's nats-server."""
    return nats_server.url


@pytest.fixture
def cluster_id() -> str:
    """A fresh cluster id per test, so each test has its own streams."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    """A running simulated cluster (1 block x 2 racks x 4 nodes x 8 GPUs, full control plane)."""
    async with SimCluster.running(SimSettings(nodes="1x2x4x8gpu")) as cluster:
        yield cluster


# --- a real Kubernetes control plane ------------------------------------------------------

REAL_K8S_MARK = "real_k8s"
_BINARIES = pytest.StashKey[Path | None]()
_WHY_NOT = pytest.StashKey[str]()
_NOT_RUN = pytest.StashKey[int]()
_RBAC_USAGE = pytest.StashKey[RbacUsage]()
_LINES = pytest.StashKey[list[str]]()
_WORKER_NOT_RUN = "tidegate_real_k8s_not_run"
_WORKER_WHY_NOT = "tidegate_real_k8s_why_not"


def _locate_binaries() -> tuple[Path | None, str]:
    """The binaries directory KUBEBUILDER_ASSETS names, or None and why not."""
    found = find_binaries()
    if found is not None:
        return found, ""
    configured = os.environ.get(ASSETS_ENV)
    if configured:
        lacking = ", ".join(missing_binaries(Path(configured)))
        return None, f"{ASSETS_ENV}={configured} lacks {lacking}"
    return None, f"{ASSETS_ENV} is unset"


def _needs_real_cluster(item: pytest.Item) -> bool:
    return item.get_closest_marker(REAL_K8S_MARK) is not None or "real_cluster" in getattr(
        item, "fixturenames", ()
    )


SLOW_DEFAULT_SECONDS = 10.0
"""What a ``slow`` mark without a figure is taken to cost."""


def _test_file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _expected_seconds(item: pytest.Item) -> float:
    mark = item.get_closest_marker("slow")
    if mark is None:
        return 0.0
    return float(mark.args[0]) if mark.args else SLOW_DEFAULT_SECONDS


def _longest_files_first(items: list[pytest.Item]) -> None:
    """Order the test files by the seconds their ``slow`` marks name, most first, the others
    after them in collection order; a file's own tests keep their order. Two workers that
    take one file at a time (``--dist loadfile --no-loadscope-reorder``) then start the long
    files early instead of finishing the run on one of them alone."""
    seconds: dict[str, float] = {}
    for item in items:
        name = _test_file(item)
        seconds[name] = seconds.get(name, 0.0) + _expected_seconds(item)
    rank = {name: (-total, index) for index, (name, total) in enumerate(seconds.items())}
    items.sort(key=lambda item: rank[_test_file(item)])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long files first; without binaries, real-cluster tests are deselected (and said so
    at the end)."""
    _longest_files_first(items)
    config.stash[_NOT_RUN] = 0
    real = [item for item in items if _needs_real_cluster(item)]
    if not real:
        return
    binaries, why_not = _locate_binaries()
    config.stash[_BINARIES] = binaries
    config.stash[_WHY_NOT] = why_not
    if binaries is None:
        items[:] = [item for item in items if not _needs_real_cluster(item)]
        config.hook.pytest_deselected(items=real)
        config.stash[_NOT_RUN] = len(real)


def _must_run() -> bool:
    """Whether real-cluster tests that did not run fail the run: only when the user asked for
    them by setting KUBEBUILDER_ASSETS."""
    return bool(os.environ.get(ASSETS_ENV))


def _not_run_line(config: pytest.Config) -> str | None:
    count = config.stash.get(_NOT_RUN, 0)
    if not count:
        return None
    return (
        f"real Kubernetes: {count} tests did NOT run ({config.stash.get(_WHY_NOT, '')}); "
        f"enable them with {ASSETS_ENV}=DIR holding etcd, kube-apiserver, "
        f"kube-controller-manager and kube-scheduler (docs/testing.md#real-kubernetes)"
    )


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Under pytest-xdist, the controller learns what its workers deselected (each collects
    every test, so the largest count is the suite's)."""
    output = getattr(node, "workeroutput", {})
    count = int(output.get(_WORKER_NOT_RUN, 0))
    config = node.config
    if count > config.stash.get(_NOT_RUN, 0):
        config.stash[_NOT_RUN] = count
        config.stash[_WHY_NOT] = str(output.get(_WORKER_WHY_NOT, ""))
    # What tests/e2e/conftest.py and tests/chaos/conftest.py report in a run without workers.
    usage = config.stash.setdefault(_RBAC_USAGE, RbacUsage())
    usage.merge_json(output.get(workers.RBAC_USAGE, {}))
    config.stash.setdefault(_LINES, []).extend(output.get(workers.REPORT_LINES, []))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """One line when real-cluster tests did not run; under pytest-xdist also what the workers'
    real-cluster scenarios reported (tests/e2e/conftest.py prints it in a run without them)."""
    for report in config.stash.get(_RBAC_USAGE, RbacUsage()).report():
        terminalreporter.write_line(report)
    for note in config.stash.get(_LINES, []):
        terminalreporter.write_line(note)
    line = _not_run_line(config)
    if line:
        markup = {"red": True} if _must_run() else {"yellow": True}
        terminalreporter.write_line(line, **markup)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Real-cluster tests that did not run fail the run when KUBEBUILDER_ASSETS is set."""
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports and decides
        workeroutput[_WORKER_NOT_RUN] = config.stash.get(_NOT_RUN, 0)
        workeroutput[_WORKER_WHY_NOT] = config.stash.get(_WHY_NOT, "")
        return
    if _not_run_line(config) and _must_run():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def real_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """A real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
    for the whole session; see tidegate.testing.controlplane. Tests that use it are marked
    ``real_k8s`` (or are deselected, and reported, where no binaries exist)."""
    binaries = request.config.stash.get(_BINARIES, None)
    if binaries is None:
        binaries, why_not = _locate_binaries()
        if binaries is None:
            pytest.fail(f"no Kubernetes binaries: {why_not}")
    with ControlPlane.start(binaries, tmp_path_factory.mktemp("k8s")) as plane:
        yield plane
