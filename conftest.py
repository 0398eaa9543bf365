"""Session-wide test fixtures: a real nats-server with JetStream, shared by every test.

The server runs on a free loopback port with its own store directory and is stopped when the
session ends. Tests isolate themselves by cluster id (each test gets a fresh one), so the
streams of one test never see another's messages.
"""

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tidegate.bus.server import NatsServerProcess
from tidegate.sim import SimCluster, SimSettings


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
