"""The bus as a test sees it: a connection with the cluster's layout, followers, test envelopes.

A test plays the services around the one under test: it publishes what they would publish and
follows the streams the way they would. These helpers give every test the same connection
(layout created, drained at the end), the same follower task (cancelled at the end) and the
same envelope for what it publishes, so a harness only says what it publishes and what it
remembers. They use the real bus (:mod:`tidegate.bus`) and never replace it.
"""

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence

from tidegate.bus import (
    Bus,
    BusSettings,
    Fence,
    Lease,
    LeaseSettings,
    Received,
    StateFollower,
    StateHandler,
    connect,
    layout,
    servers_from_url,
)
from tidegate.model import Envelope, Message


def envelope(
    cluster: str, body: Message, *, event_id: str | None = None, source: str = "test"
) -> Envelope:
    """``body`` in an envelope of ``cluster``, stamped now, with a fresh event id unless given."""
    return Envelope(
        event_id=event_id or uuid.uuid4().hex,
        cluster=cluster,
        source=source,
        time=time.time(),
        body=body,
    )


@contextlib.asynccontextmanager
async def connected(
    nats_url: str,
    cluster: str,
    *,
    name: str = "tidegate",
    wait_for_server_seconds: float | None = None,
    stream_replicas: int = 1,
) -> AsyncIterator[Bus]:
    """A bus connection (named ``name``) with ``cluster``'s streams created; drained at exit.

    ``nats_url`` may list several servers, comma-separated; ``stream_replicas`` must be what
    the services use, or creating the layout would change the streams' replicas.
    """
    bus = await connect(
        BusSettings(
            servers=tuple(servers_from_url(nats_url)),
            name=name,
            wait_for_server_seconds=wait_for_server_seconds,
            stream_replicas=stream_replicas,
        )
    )
    try:
        await bus.ensure_layout(cluster)
        yield bus
    finally:
        await bus.drain()


@contextlib.asynccontextmanager
async def following(
    bus: Bus,
    *,
    stream: str,
    subjects: Sequence[str],
    handler: StateHandler,
    name: str = "",
    replayed_within: float | None = None,
) -> AsyncIterator[StateFollower]:
    """Follow ``stream`` in a task while the block runs; cancelled at exit.

    With ``replayed_within``, the block starts only once the stream has been replayed (at most
    that many seconds).
    """
    follower = StateFollower(bus, stream=stream, subjects=subjects, handler=handler, name=name)
    task = asyncio.create_task(follower.run())
    try:
        if replayed_within is not None:
            await asyncio.wait_for(follower.replayed.wait(), replayed_within)
        yield follower
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def counting(total: int) -> tuple[StateHandler, asyncio.Event]:
    """A handler that counts the messages it is given, and the event it sets at ``total``."""
    done = asyncio.Event()
    handled = 0

    async def handle(message: Received) -> None:
        nonlocal handled
        handled += 1
        if handled >= total:
            done.set()

    return handle, done


async def take_over(bus: Bus, cluster: str, role: str, *, holder: str = "successor") -> Lease:
    """Take ``role``'s lease from whoever holds it (as after a pause past its TTL) and claim
    the ledger and decision fences, as a successor's takeover does; the holder is not told."""
    leases = await bus.key_value(layout.leases_bucket(cluster))
    await leases.delete(role)
    successor = Lease(
        bus, cluster=cluster, settings=LeaseSettings(name=role, holder=holder, ttl_seconds=60.0)
    )
    assert await successor.try_acquire(), f"{holder} could not take the {role} lease"
    await Fence.on_ledger(bus, successor, cluster=cluster).claim()
    await Fence.on_decisions(bus, successor, cluster=cluster).claim()
    return successor
