"""Bounded state: tombstones expire, so a replay after the retention reads live objects only."""

import asyncio
from collections.abc import AsyncIterator

import pytest

from tidegate.bus import (
    Bus,
    BusSettings,
    Ledger,
    Publisher,
    Received,
    StateFollower,
    connect,
    layout,
)
from tidegate.model import PodState, Tombstone, subjects
from tidegate.testing import until_async
from tidegate.testing.bus import envelope as enveloped
from tidegate.testing.messages import Messages


@pytest.fixture
async def short_retention(nats_url: str, cluster_id: str) -> AsyncIterator[Bus]:
    """A connection whose tombstones live one second."""
    settings = BusSettings(servers=(nats_url,), wait_for_server_seconds=5, tombstone_ttl_seconds=1)
    connection = await connect(settings)
    await connection.ensure_layout(cluster_id)
    yield connection
    await connection.close()


msg = Messages(namespace="batch")


async def test_deleted_pods_leave_the_state_stream_after_the_retention(
    short_retention: Bus, cluster_id: str
) -> None:
    bus = short_retention
    stream = layout.state_stream(cluster_id)
    names = [f"finished-{i}" for i in range(200)]
    async with Publisher(bus) as publisher:
        for name in names:
            await publisher.submit(
                subjects.pod(cluster_id, "batch", name),
                enveloped(cluster_id, msg.pod(name), event_id=f"{name}-created"),
            )
        for name in names[:190]:  # a batch cluster: most pods finish and are deleted
            await publisher.submit(
                subjects.pod(cluster_id, "batch", name),
                enveloped(
                    cluster_id,
                    msg.tombstone("pod", name, "batch", uid=f"uid-{name}"),
                    event_id=f"{name}-deleted",
                ),
            )
        for name in names[190:]:
            await bus.publish(
                subjects.pod(cluster_id, "batch", name),
                enveloped(cluster_id, msg.pod(name), event_id=f"{name}-created"),
            )

    async def only_live_left() -> bool:
        info = await bus.jetstream.stream_info(stream)
        return info.state.messages == 10

    await until_async(only_live_left, within=30, what="the tombstones to expire")

    seen: list[Received] = []

    async def handle(message: Received) -> None:
        seen.append(message)

    follower = StateFollower(
        bus, stream=stream, subjects=[f"tg.{cluster_id}.pod.>"], handler=handle
    )
    task = asyncio.create_task(follower.run())
    try:
        async with asyncio.timeout(10):
            await follower.replayed.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert sorted(m.envelope.body.name for m in seen) == sorted(names[190:])  # type: ignore[union-attr]
    assert all(isinstance(m.envelope.body, PodState) for m in seen)


async def test_a_follower_that_is_running_sees_every_deletion(bus: Bus, cluster_id: str) -> None:
    """Expiry only shortens what a *replay* reads: a live follower gets each tombstone (with
    the default retention of an hour; the conftest's ``bus``).

    The stream keeps one message per subject, so the pod is published and seen before its
    tombstone replaces it (published back to back, the follower may get the tombstone only).
    """
    seen: list[Received] = []
    arrived = asyncio.Event()

    async def handle(message: Received) -> None:
        seen.append(message)
        arrived.set()

    follower = StateFollower(
        bus,
        stream=layout.state_stream(cluster_id),
        subjects=[f"tg.{cluster_id}.pod.>"],
        handler=handle,
    )
    task = asyncio.create_task(follower.run())
    try:
        async with asyncio.timeout(10):
            await follower.replayed.wait()
        for deleted in (False, True):
            arrived.clear()
            await bus.publish(
                subjects.pod(cluster_id, "batch", "p"),
                enveloped(
                    cluster_id,
                    msg.tombstone("pod", "p", "batch", uid="uid-p") if deleted else msg.pod("p"),
                ),
            )
            async with asyncio.timeout(10):
                await arrived.wait()
        assert [type(m.envelope.body) for m in seen] == [PodState, Tombstone]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_deleted_ledger_keys_leave_the_bucket_after_the_retention(
    short_retention: Bus, cluster_id: str
) -> None:
    bus = short_retention
    ledger = await Ledger.open(bus, cluster_id)
    for index in range(50):
        revision = await ledger.put(f"team/w{index}", b"admitted", revision=0)
        if index >= 5:
            await ledger.delete(f"team/w{index}", revision=revision)
    stream = f"KV_{layout.ledger_bucket(cluster_id)}"

    async def only_live_left() -> bool:
        info = await bus.jetstream.stream_info(stream)
        return info.state.messages == 5

    await until_async(only_live_left, within=30, what="the delete markers to expire")
    assert await ledger.keys() == [f"team/w{i}" for i in range(5)]
    # A key whose marker expired is simply absent: it can be created again.
    await ledger.put("team/w7", b"admitted again", revision=0)


async def test_the_decision_stream_keeps_decisions_by_count_per_subject_not_by_age(
    short_retention: Bus, cluster_id: str
) -> None:
    """An admission lives as long as its workload: no age or size limit would forget it; the
    newest ``decisions_per_subject`` per subject bound a long-lived workload's history."""
    info = await short_retention.jetstream.stream_info(layout.decisions_stream(cluster_id))
    assert not info.config.max_age
    assert info.config.max_bytes in (None, -1)
    assert info.config.max_msgs_per_subject == layout.LayoutSettings().decisions_per_subject
