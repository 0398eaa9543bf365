"""Publishing: deduplication by event id, expected-last-subject-sequence, async publishing."""

import asyncio

import pytest

from tidegate.bus import (
    Bus,
    BusSettings,
    Conflict,
    Publisher,
    PublishError,
    Unavailable,
    connect,
    layout,
)
from tidegate.bus.server import NatsServerProcess
from tidegate.model import subjects
from tidegate.testing.bus import envelope as enveloped
from tidegate.testing.faultproxy import nats_fault_proxy
from tidegate.testing.messages import Messages

msg = Messages()


async def test_a_duplicate_publish_is_dropped(bus: Bus, cluster_id: str) -> None:
    subject = subjects.decision(cluster_id, "released", "ns", "job")
    envelope = enveloped(cluster_id, msg.node("node-a"), event_id="evt-1")
    first = await bus.publish(subject, envelope)
    retry = await bus.publish(subject, envelope)
    assert not first.duplicate
    assert retry.duplicate
    assert retry.sequence == first.sequence
    assert await bus.last_sequence(layout.decisions_stream(cluster_id)) == first.sequence


async def test_last_on_reads_the_newest_message_of_one_subject(bus: Bus, cluster_id: str) -> None:
    stream = layout.decisions_stream(cluster_id)
    subject = subjects.decision(cluster_id, "released", "ns", "job")
    assert await bus.last_on(stream, subject) is None
    await bus.publish(subject, enveloped(cluster_id, msg.node("node-a"), event_id="evt-1"))
    second = await bus.publish(subject, enveloped(cluster_id, msg.node("node-a"), event_id="evt-2"))
    await bus.publish(
        subjects.decision(cluster_id, "released", "ns", "other"),
        enveloped(cluster_id, msg.node("node-a")),
    )
    last = await bus.last_on(stream, subject)
    assert last is not None
    assert (last.envelope.event_id, last.stream_sequence) == ("evt-2", second.sequence)


async def test_expected_last_subject_sequence_rejects_a_stale_writer(
    bus: Bus, cluster_id: str
) -> None:
    subject = subjects.node(cluster_id, "n1")
    created = await bus.publish(
        subject, enveloped(cluster_id, msg.node("n1")), expected_last_subject_sequence=0
    )
    with pytest.raises(Conflict):
        await bus.publish(
            subject, enveloped(cluster_id, msg.node("n1")), expected_last_subject_sequence=0
        )
    updated = await bus.publish(
        subject,
        enveloped(cluster_id, msg.node("n1")),
        expected_last_subject_sequence=created.sequence,
    )
    assert updated.sequence > created.sequence


async def test_publisher_stores_everything_and_counts_duplicates(bus: Bus, cluster_id: str) -> None:
    subject = subjects.decision(cluster_id, "admitted", "ns", "w")
    async with Publisher(bus, max_in_flight=64) as publisher:
        for index in range(500):
            await publisher.submit(
                subject, enveloped(cluster_id, msg.node("node-a"), event_id=f"e{index}")
            )
            assert publisher.in_flight <= 64
        await publisher.submit(subject, enveloped(cluster_id, msg.node("node-a"), event_id="e0"))
    assert publisher.in_flight == 0
    assert publisher.stats.stored == 501
    assert publisher.stats.duplicates == 1
    assert await bus.last_sequence(layout.decisions_stream(cluster_id)) == 500


async def test_publisher_reports_what_was_not_stored(bus: Bus, cluster_id: str) -> None:
    subject = subjects.node(cluster_id, "n2")
    async with Publisher(bus) as publisher:
        await publisher.submit(
            subject,
            enveloped(cluster_id, msg.node("n2"), event_id="a"),
            expected_last_subject_sequence=0,
        )
        await publisher.flush()
        await publisher.submit(
            subject,
            enveloped(cluster_id, msg.node("n2"), event_id="b"),
            expected_last_subject_sequence=0,
        )
        with pytest.raises(PublishError) as caught:
            await publisher.flush()
        (failure,) = caught.value.failures
        assert failure.event_id == "b"
        assert isinstance(failure.error, Conflict)
        assert publisher.in_flight == 0
        await publisher.flush()  # failures are reported once


async def test_publisher_fails_cleanly_where_no_stream_listens(bus: Bus, cluster_id: str) -> None:
    async with Publisher(bus) as publisher:
        await publisher.submit("nowhere.at.all", enveloped(cluster_id, msg.node("node-a")))
        with pytest.raises(PublishError) as caught:
            await publisher.flush()
    assert isinstance(caught.value.failures[0].error, Unavailable)


async def test_layout_is_idempotent_and_applies_new_limits(bus: Bus, cluster_id: str) -> None:
    await bus.ensure_layout(cluster_id)
    await bus.ensure_layout(cluster_id, layout.LayoutSettings(decisions_max_age_seconds=3600.0))
    info = await bus.jetstream.stream_info(layout.decisions_stream(cluster_id))
    assert info.config.max_age == 3600.0
    state = await bus.jetstream.stream_info(layout.state_stream(cluster_id))
    assert state.config.max_msgs_per_subject == 1
    assert state.config.subjects == subjects.state_wildcards(cluster_id)
    ledger = await bus.key_value(layout.ledger_bucket(cluster_id))
    assert await ledger.put("ns/w", b"x") > 0


async def test_a_publish_whose_answer_is_lost_with_its_connection_fails_after_the_reconnect(
    nats_server: NatsServerProcess, cluster_id: str
) -> None:
    # The server stores the message, then the proxy drops the connection before the answer.
    # Without the reconnect watch the publish would wait out the request timeout (an hour
    # here, far past the deadline below); with it, it fails as a timeout soon after the
    # client is connected again, and sending it again finds it stored.
    async with nats_fault_proxy(nats_server.host, nats_server.port) as proxy:
        settings = BusSettings(
            servers=(proxy.url,), wait_for_server_seconds=5, request_timeout_seconds=3600
        )
        bus = await connect(settings)
        try:
            await bus.ensure_layout(cluster_id)
            subject = subjects.decision(cluster_id, "released", "ns", "job")
            envelope = enveloped(cluster_id, msg.node("node-a"), event_id="lost-answer")
            proxy.drop_after_publish(subject)
            with pytest.raises(Unavailable):
                async with asyncio.timeout(60):
                    await bus.publish(subject, envelope)
            assert proxy.injected == 1
            again = await bus.publish(subject, envelope)
            assert again.duplicate
        finally:
            await bus.close()
