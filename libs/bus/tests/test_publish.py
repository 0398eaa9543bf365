"""Publishing: deduplication by event id, expected-last-subject-sequence, async publishing."""

import pytest

from tidegate.bus import Bus, Conflict, Publisher, PublishError, Unavailable, layout
from tidegate.model import subjects

from .conftest import MakeNode


async def test_a_duplicate_publish_is_dropped(
    bus: Bus, cluster_id: str, make_node: MakeNode
) -> None:
    subject = subjects.decision(cluster_id, "released", "ns", "job")
    envelope = make_node(event_id="evt-1")
    first = await bus.publish(subject, envelope)
    retry = await bus.publish(subject, envelope)
    assert not first.duplicate
    assert retry.duplicate
    assert retry.sequence == first.sequence
    assert await bus.last_sequence(layout.decisions_stream(cluster_id)) == first.sequence


async def test_expected_last_subject_sequence_rejects_a_stale_writer(
    bus: Bus, cluster_id: str, make_node: MakeNode
) -> None:
    subject = subjects.node(cluster_id, "n1")
    created = await bus.publish(subject, make_node("n1"), expected_last_subject_sequence=0)
    with pytest.raises(Conflict):
        await bus.publish(subject, make_node("n1"), expected_last_subject_sequence=0)
    updated = await bus.publish(
        subject, make_node("n1"), expected_last_subject_sequence=created.sequence
    )
    assert updated.sequence > created.sequence


async def test_publisher_stores_everything_and_counts_duplicates(
    bus: Bus, cluster_id: str, make_node: MakeNode
) -> None:
    subject = subjects.decision(cluster_id, "admitted", "ns", "w")
    async with Publisher(bus, max_in_flight=64) as publisher:
        for index in range(500):
            await publisher.submit(subject, make_node(event_id=f"e{index}"))
            assert publisher.in_flight <= 64
        await publisher.submit(subject, make_node(event_id="e0"))
    assert publisher.in_flight == 0
    assert publisher.stats.stored == 501
    assert publisher.stats.duplicates == 1
    assert await bus.last_sequence(layout.decisions_stream(cluster_id)) == 500


async def test_publisher_reports_what_was_not_stored(
    bus: Bus, cluster_id: str, make_node: MakeNode
) -> None:
    subject = subjects.node(cluster_id, "n2")
    async with Publisher(bus) as publisher:
        await publisher.submit(
            subject, make_node("n2", event_id="a"), expected_last_subject_sequence=0
        )
        await publisher.flush()
        await publisher.submit(
            subject, make_node("n2", event_id="b"), expected_last_subject_sequence=0
        )
        with pytest.raises(PublishError) as caught:
            await publisher.flush()
        (failure,) = caught.value.failures
        assert failure.event_id == "b"
        assert isinstance(failure.error, Conflict)
        assert publisher.in_flight == 0
        await publisher.flush()  # failures are reported once


async def test_publisher_fails_cleanly_where_no_stream_listens(
    bus: Bus, make_node: MakeNode
) -> None:
    async with Publisher(bus) as publisher:
        await publisher.submit("nowhere.at.all", make_node())
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
