"""Fences: a deposed leader's ledger writes and publishes are refused by the server."""

import asyncio
import time
from pathlib import Path

import pytest

from tidegate.bus import Bus, BusSettings, Fence, LeaseLost, Ledger, connect, layout
from tidegate.bus.lease import Lease, LeaseSettings
from tidegate.bus.server import NatsCluster
from tidegate.model import Envelope, NodeState, subjects


def contender(bus: Bus, cluster: str, holder: str) -> Lease:
    settings = LeaseSettings(
        name="preemption", holder=holder, ttl_seconds=1, acquire_poll_seconds=0.1
    )
    return Lease(bus, cluster=cluster, settings=settings)


def envelope(cluster: str, event_id: str) -> Envelope:
    return Envelope(
        event_id=event_id,
        cluster=cluster,
        source="test",
        time=time.time(),
        body=NodeState(name=event_id, allocatable={"cpu": 1}),
    )


async def fences(bus: Bus, lease: Lease, cluster: str) -> tuple[Fence, Fence]:
    ledger_fence = Fence.on_ledger(bus, lease, cluster=cluster)
    decisions_fence = Fence.on_decisions(bus, lease, cluster=cluster)
    await ledger_fence.claim()
    await decisions_fence.claim()
    return ledger_fence, decisions_fence


async def decision_count(bus: Bus, cluster: str) -> int:
    info = await bus.jetstream.stream_info(
        layout.decisions_stream(cluster), subjects_filter=subjects.decision_wildcard(cluster)
    )
    return sum((info.state.subjects or {}).values())


async def test_a_deposed_leader_can_neither_write_the_ledger_nor_publish(
    bus: Bus, cluster_id: str
) -> None:
    ledger = await Ledger.open(bus, cluster_id)
    subject = subjects.decision(cluster_id, "preempted", "ns", "serve")
    old = contender(bus, cluster_id, "old")
    assert await old.try_acquire()
    old_ledger, old_decisions = await fences(bus, old, cluster_id)
    await ledger.put("preemption.ns/a", b"by old", fence=old_ledger)
    await old_decisions.publish(subject, envelope(cluster_id, "e1"))

    # The old leader stalls past its TTL (no renewal); a successor takes over and claims.
    new = contender(bus, cluster_id, "new")
    assert await asyncio.wait_for(new.acquire(), timeout=10) > old.epoch
    new_ledger, new_decisions = await fences(bus, new, cluster_id)

    # The old leader wakes up: every write is refused by the server, not by its own clock.
    with pytest.raises(LeaseLost):
        await ledger.put("preemption.ns/b", b"by old", fence=old_ledger)
    with pytest.raises(LeaseLost):
        await ledger.put("preemption.ns/a", b"overwritten by old", fence=old_ledger)
    with pytest.raises(LeaseLost):
        await ledger.delete("preemption.ns/a", fence=old_ledger)
    with pytest.raises(LeaseLost):
        await old_decisions.publish(subject, envelope(cluster_id, "e2"))
    with pytest.raises(LeaseLost):
        await Fence.on_decisions(bus, old, cluster=cluster_id).claim()  # nor claim again
    assert await ledger.get("preemption.ns/b") is None
    entry = await ledger.get("preemption.ns/a")
    assert entry is not None
    assert entry.value == b"by old"
    assert await decision_count(bus, cluster_id) == 1

    # The new leader writes and publishes as usual.
    await ledger.put("preemption.ns/a", b"by new", fence=new_ledger)
    await ledger.delete("preemption.ns/a", fence=new_ledger)
    await new_decisions.publish(subject, envelope(cluster_id, "e3"))
    assert await ledger.get("preemption.ns/a") is None
    assert await decision_count(bus, cluster_id) == 2
    # Fence markers are outside tg.<c>.decision.>: no consumer of decisions sees them.
    assert await bus.last_sequence(layout.decisions_stream(cluster_id)) > 2


async def test_a_marker_that_aged_out_is_claimed_again_while_the_lease_is_ours(
    bus: Bus, cluster_id: str
) -> None:
    leader = contender(bus, cluster_id, "leader")
    assert await leader.try_acquire()
    _, decisions = await fences(bus, leader, cluster_id)
    first = decisions.sequence
    # The decision stream's age limit removes the marker (here: a purge of its subject).
    await bus.jetstream.purge_stream(layout.decisions_stream(cluster_id), subject=decisions.marker)
    subject = subjects.decision(cluster_id, "preempted", "ns", "serve")
    await decisions.publish(subject, envelope(cluster_id, "e1"))
    assert decisions.sequence > first
    assert await decision_count(bus, cluster_id) == 1


@pytest.mark.slow
async def test_concurrent_fenced_writes_all_land_on_a_clustered_stream(
    tmp_path: Path, cluster_id: str
) -> None:
    """A replicated stream refuses a write fenced on a marker another in-flight write is
    fenced on (error 10164); a Fence sends its writes one at a time, so a leader's concurrent
    writes (admission commits many keys at once) are never refused by its own fence."""
    with NatsCluster(size=3, store_dir=tmp_path / "nats") as cluster:
        bus = await connect(
            BusSettings(servers=tuple(cluster.urls), stream_replicas=3, wait_for_server_seconds=10)
        )
        try:
            await bus.ensure_layout(cluster_id)
            leader = contender(bus, cluster_id, "leader")
            assert await leader.try_acquire()
            ledger_fence, decisions_fence = await fences(bus, leader, cluster_id)
            ledger = await Ledger.open(bus, cluster_id)
            await asyncio.gather(
                *(ledger.put(f"team/w{i}", b"admitted", fence=ledger_fence) for i in range(20)),
                *(
                    decisions_fence.publish(
                        subjects.decision(cluster_id, "preempted", "ns", f"s{i}"),
                        envelope(cluster_id, f"e{i}"),
                    )
                    for i in range(20)
                ),
            )
            assert len([k for k in await ledger.keys() if k.startswith("team/")]) == 20
            assert await decision_count(bus, cluster_id) == 20
        finally:
            await bus.close()
