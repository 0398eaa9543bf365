"""Fixtures of the bus tests: a connected :class:`Bus` with this test's layout created."""

import itertools
import time
from collections.abc import AsyncIterator, Callable

import pytest

from tidegate.bus import Bus, BusSettings, connect
from tidegate.model import Envelope, NodeState, Tombstone

MakeNode = Callable[..., Envelope]


@pytest.fixture
async def bus(nats_url: str, cluster_id: str) -> AsyncIterator[Bus]:
    """A bus connected to the session's server, with the streams of ``cluster_id`` created."""
    connection = await connect(BusSettings(servers=(nats_url,), wait_for_server_seconds=5))
    await connection.ensure_layout(cluster_id)
    yield connection
    await connection.close()


@pytest.fixture
def make_node(cluster_id: str) -> MakeNode:
    """Build a node-state envelope; ``event_id`` defaults to a fresh one."""
    counter = itertools.count(1)

    def build(
        name: str = "node-a", *, event_id: str | None = None, cpu: int = 1000, deleted: bool = False
    ) -> Envelope:
        body: NodeState | Tombstone = (
            Tombstone(object_kind="node", name=name)
            if deleted
            else NodeState(name=name, allocatable={"cpu": cpu})
        )
        return Envelope(
            event_id=event_id or f"{name}-{next(counter)}",
            cluster=cluster_id,
            source="test",
            time=time.time(),
            body=body,
        )

    return build
