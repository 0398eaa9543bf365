"""Fixtures of the bus tests: a connected :class:`Bus` with this test's layout created."""

from collections.abc import AsyncIterator

import pytest

from tidegate.bus import Bus, BusSettings, connect


@pytest.fixture
async def bus(nats_url: str, cluster_id: str) -> AsyncIterator[Bus]:
    """A bus connected to the session's server, with the streams of ``cluster_id`` created."""
    connection = await connect(BusSettings(servers=(nats_url,), wait_for_server_seconds=5))
    await connection.ensure_layout(cluster_id)
    yield connection
    await connection.close()
