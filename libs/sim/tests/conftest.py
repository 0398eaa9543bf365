"""Fixtures for the simulator's own tests: a bare API server and an HTTP client on it."""

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tidegate.sim import SimCluster, SimSettings


@pytest.fixture
async def bare() -> AsyncIterator[SimCluster]:
    """An API server without scheduler, kubelet or controllers (like a lone kube-apiserver)."""
    settings = SimSettings(
        nodes="1x2x2x8gpu",
        scheduler=False,
        kubelet=False,
        controllers=False,
        bookmark_interval_seconds=0.2,
        history_window=50,
    )
    async with SimCluster.running(settings) as cluster:
        yield cluster


@pytest.fixture
async def http(bare: SimCluster) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session against the bare API server."""
    async with aiohttp.ClientSession(bare.url) as session:
        yield session
