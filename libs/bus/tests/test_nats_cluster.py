"""The bus on a three-server JetStream cluster: replicated layout, and a stream leader's death.

A publish to a stream whose leader just died finds no responder until the two others have
elected a new one (a few seconds); :class:`tidegate.bus.Bus` and :class:`tidegate.bus.Publisher`
send it again meanwhile, so the caller sees a slow publish, not an error, and nothing is stored
twice. On a single server the same reply means no stream takes the subject: it fails at once.
"""

import asyncio
import time
from collections.abc import Iterator

import nats.js.errors
import pytest

from tidegate.bus import (
    Bus,
    BusSettings,
    Publisher,
    PublishError,
    Unavailable,
    connect,
    layout,
)
from tidegate.bus.connection import _LeaderWaitingJetStream
from tidegate.bus.server import NatsCluster
from tidegate.model import subjects
from tidegate.testing.bus import envelope as enveloped
from tidegate.testing.messages import Messages

msg = Messages()


@pytest.fixture(scope="module")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """Three nats-servers on loopback as one JetStream cluster."""
    with NatsCluster(size=3, store_dir=tmp_path_factory.mktemp("nats-cluster")) as cluster:
        yield cluster


async def clustered_bus(cluster: NatsCluster, cluster_id: str) -> Bus:
    bus = await connect(
        BusSettings(servers=tuple(cluster.urls), stream_replicas=3, wait_for_server_seconds=10)
    )
    await bus.ensure_layout(cluster_id)
    return bus


@pytest.mark.slow
async def test_the_layout_is_replicated_on_every_server(
    nats_cluster: NatsCluster, cluster_id: str
) -> None:
    bus = await clustered_bus(nats_cluster, cluster_id)
    try:
        names = {m.server_name for m in nats_cluster.members}
        streams = [c.name for c in layout.stream_configs(cluster_id, layout.LayoutSettings())]
        kv = [f"KV_{b}" for b in layout.bucket_names(cluster_id)]
        for stream in [*streams, *kv]:
            assert stream is not None
            info = await bus.jetstream.stream_info(stream)
            assert info.config.num_replicas == 3, stream
            assert await bus.stream_leader(stream) in names
    finally:
        await bus.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_publishes_wait_for_the_new_leader_after_the_leader_dies(
    nats_cluster: NatsCluster, cluster_id: str
) -> None:
    setup = await clustered_bus(nats_cluster, cluster_id)
    state = layout.state_stream(cluster_id)
    try:
        await setup.publish(
            subjects.node(cluster_id, "before"), enveloped(cluster_id, msg.node("before"))
        )
        leader = await setup.stream_leader(state)
    finally:
        await setup.close()
    assert leader is not None
    # A client of a surviving server: its connection stays up, only the stream loses its
    # leader (a client of the dead server reconnects first; that is the end-to-end test's).
    survivors = [m.url for m in nats_cluster.members if m.server_name != leader]
    bus = await connect(BusSettings(servers=tuple(survivors), stream_replicas=3))
    dead = nats_cluster.member(leader)
    dead.kill()
    try:
        # At once, while the stream has no leader: one publish and a batch.
        first = await bus.publish(
            subjects.node(cluster_id, "during"), enveloped(cluster_id, msg.node("during"))
        )
        async with Publisher(bus) as publisher:
            for index in range(20):
                name = f"batch-{index}"
                await publisher.submit(
                    subjects.node(cluster_id, name), enveloped(cluster_id, msg.node(name))
                )
        assert publisher.stats.stored == 20
        assert publisher.stats.failed == 0
        assert not first.duplicate
        new_leader = await bus.stream_leader(state)
        assert new_leader not in (None, leader)
        info = await bus.jetstream.stream_info(state)
        assert info.state.messages == 22  # before, during and the batch: each once
    finally:
        dead.start()
        await bus.close()
    nats_cluster.wait_for_meta_leader()


async def test_on_a_single_server_a_subject_without_a_stream_fails_at_once(
    nats_url: str, cluster_id: str
) -> None:
    # Were the no-responder reply waited out as a leader election, this would take an hour.
    bus = await connect(BusSettings(servers=(nats_url,), leaderless_wait_seconds=3600))
    try:
        async with asyncio.timeout(60):
            with pytest.raises(Unavailable):
                await bus.publish("nostream.here", enveloped(cluster_id, msg.node("node-a")))
            publisher = Publisher(bus)
            await publisher.submit("nostream.here", enveloped(cluster_id, msg.node("node-a")))
            with pytest.raises(PublishError):
                await publisher.flush()
            await publisher.close()
    finally:
        await bus.close()


async def test_a_timed_out_expected_sequence_write_is_resolved_by_reading_the_subject(
    bus: Bus, cluster_id: str
) -> None:
    # What a ledger or lease write does after its server died with it in flight: read the
    # subject's last message to learn whether the write was stored.
    jetstream = bus.jetstream
    assert isinstance(jetstream, _LeaderWaitingJetStream)
    subject = f"$KV.{layout.ledger_bucket(cluster_id)}.some-key"
    deadline = time.monotonic() + 30
    first = await jetstream.publish(subject, b"one")
    # Stored: the last message is ours, so its acknowledgement is the answer.
    stored = await jetstream._outcome(subject, b"one", 0, deadline)
    assert stored is not None
    assert stored.seq == first.seq
    # Not stored: the subject still has the sequence the write expected; send it again.
    assert await jetstream._outcome(subject, b"two", first.seq, deadline) is None
    # Someone else wrote: the conflict JetStream would have answered.
    await jetstream.publish(subject, b"theirs")
    with pytest.raises(nats.js.errors.BadRequestError) as conflict:
        await jetstream._outcome(subject, b"two", first.seq, deadline)
    assert conflict.value.err_code == 10071
