"""Leases: one holder at a time, takeover after the TTL, stale holders fenced off."""

import asyncio
import json
import time

import pytest

from tidegate.bus import (
    Bus,
    BusError,
    BusSettings,
    Conflict,
    LeaseLost,
    LeaseUnconfirmed,
    connect,
    layout,
)
from tidegate.bus.lease import Lease, LeaseRecord, LeaseSettings
from tidegate.bus.ledger import Ledger

from .slow_link import SlowLink


def contender(bus: Bus, cluster: str, holder: str, ttl: float = 1.0) -> Lease:
    return Lease(
        bus,
        cluster=cluster,
        settings=LeaseSettings(
            name="admission", holder=holder, ttl_seconds=ttl, acquire_poll_seconds=0.1
        ),
    )


async def test_one_holder_at_a_time(bus: Bus, cluster_id: str) -> None:
    leases = [contender(bus, cluster_id, f"replica-{i}", ttl=5) for i in range(5)]
    won = await asyncio.gather(*(lease.try_acquire() for lease in leases))
    assert sum(won) == 1
    holder = leases[won.index(True)]
    record, _ = await holder.current()
    assert record is not None
    assert record.holder == holder.settings.holder
    assert record.epoch == holder.epoch > 0
    await holder.renew()
    assert not any([await lease.try_acquire() for lease in leases if lease is not holder])
    await holder.release()


async def test_a_standby_takes_over_after_the_ttl_and_the_stale_holder_is_rejected(
    bus: Bus, cluster_id: str
) -> None:
    leader = contender(bus, cluster_id, "leader")
    standby = contender(bus, cluster_id, "standby")
    assert await leader.try_acquire()
    old_epoch, old_revision = leader.epoch, leader.revision
    assert not await standby.try_acquire()

    # The leader stalls (no renewals): the key expires and the standby takes over.
    new_epoch = await asyncio.wait_for(standby.acquire(), timeout=10)
    assert new_epoch > old_epoch

    # The stale leader wakes up: its renewal is refused, and so is any write with its revision.
    with pytest.raises(LeaseLost):
        await leader.renew()
    assert not leader.held
    stale = LeaseRecord(
        holder="leader", epoch=old_epoch, ttl_seconds=1, acquired_at=0, renewed_at=0
    ).encode()
    bucket = layout.leases_bucket(cluster_id)
    raw = Ledger(await bus.key_value(bucket), bucket, bus=bus)
    with pytest.raises(Conflict):
        await raw.put("admission", stale, revision=old_revision)
    record, _ = await standby.current()
    assert record is not None
    assert record.holder == "standby"
    await standby.check()
    with pytest.raises(LeaseLost):
        await leader.check()


async def test_keep_alive_holds_the_lease_past_its_ttl(bus: Bus, cluster_id: str) -> None:
    leader = contender(bus, cluster_id, "leader")
    standby = contender(bus, cluster_id, "standby")
    assert await leader.try_acquire()
    renewing = asyncio.create_task(leader.keep_alive())
    try:
        await asyncio.sleep(2.5)
        assert not await standby.try_acquire()
        await leader.check()
    finally:
        renewing.cancel()
        await asyncio.gather(renewing, return_exceptions=True)


async def test_release_hands_over_at_once_and_keep_alive_reports_loss(
    bus: Bus, cluster_id: str
) -> None:
    leader = contender(bus, cluster_id, "leader", ttl=30)
    standby = contender(bus, cluster_id, "standby", ttl=30)
    async with leader.holding() as epoch:
        assert epoch > 0
        assert not await standby.try_acquire()
    assert await standby.try_acquire(), "released: no need to wait 30 s"
    assert standby.epoch > epoch

    # A holder whose key was taken over learns it from keep_alive.
    usurped = contender(bus, cluster_id, "usurped", ttl=3)
    kv = await bus.key_value(layout.leases_bucket(cluster_id))
    await kv.delete("admission")
    assert await usurped.try_acquire()
    await kv.delete("admission")  # an operator removes the key by hand
    assert await standby.try_acquire()
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(usurped.keep_alive(), timeout=10)


async def test_a_record_from_a_newer_version_is_read_and_garbage_is_an_error(
    bus: Bus, cluster_id: str
) -> None:
    bucket = layout.leases_bucket(cluster_id)
    raw = Ledger(await bus.key_value(bucket), bucket, bus=bus)
    lease = contender(bus, cluster_id, "reader")
    newer = {"holder": "h", "epoch": 3, "ttl_seconds": 10, "acquired_at": 1, "renewed_at": 2}
    await raw.put("admission", json.dumps(newer | {"zone": "eu-1"}).encode())
    record, revision = await lease.current()
    assert record == LeaseRecord(**newer)
    assert revision > 0
    await raw.put("admission", b"not json")
    with pytest.raises(BusError, match="unreadable record"):
        await lease.current()


async def test_the_lease_clock_starts_when_the_renewal_is_sent_not_when_it_is_acked(
    nats_url: str, cluster_id: str
) -> None:
    """The server's TTL runs from when it stored the renewal; an acknowledgement that comes
    back late must not make the holder think it holds the lease longer than the server does."""
    async with SlowLink(nats_url) as link:
        slow_bus = await connect(BusSettings(servers=(link.url,), wait_for_server_seconds=5))
        try:
            await slow_bus.ensure_layout(cluster_id)
            lease = contender(slow_bus, cluster_id, "slow", ttl=2)
            assert await lease.try_acquire()
            link.delay_seconds = 1.5
            await lease.renew()
            acked = time.monotonic()
            # The renewal was sent at least 1.5 s before its ack was read, so the server drops
            # the key at most 2 s after that: by ``acked + 0.5`` at the latest.
            await asyncio.sleep(0.7)
            assert not lease.held
            with pytest.raises(LeaseLost):
                lease.ensure_held()
            assert time.monotonic() - acked < 2, "slept too long to tell (a very busy machine)"
        finally:
            link.delay_seconds = 0
            await slow_bus.close()


async def test_a_lease_with_too_little_confirmed_holds_writes_back_before_it_is_lost(
    bus: Bus, cluster_id: str
) -> None:
    """A renewal overdue (NATS electing a leader) is not yet a lost lease: an unfenced write is
    held back (retryable) while some of the TTL is left, and refused for good after it."""
    lease = contender(bus, cluster_id, "slow-renewer", ttl=3)
    assert await lease.try_acquire()
    lease.ensure_held(margin_seconds=0.5)
    await asyncio.sleep(0.2)  # no renewal: less than the margin is left, but some
    with pytest.raises(LeaseUnconfirmed):
        lease.ensure_held(margin_seconds=2.95)
    await asyncio.sleep(lease.remaining_seconds + 0.1)
    with pytest.raises(LeaseLost):
        lease.ensure_held(margin_seconds=2.95)
