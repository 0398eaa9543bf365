"""Durable pull consumers: ack, redelivery, resume after restart, retry with delay, dead letters."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest

from tidegate.bus import (
    Bus,
    BusSettings,
    ConsumerSettings,
    DurableConsumer,
    Handler,
    LeaseLost,
    Outcome,
    Permanent,
    Received,
    Reject,
    Retry,
    Retryable,
    connect,
    layout,
)
from tidegate.bus.message import DEADLETTER_DELIVERIES, DEADLETTER_REASON, DEADLETTER_SUBJECT
from tidegate.model import NodeState, codec, subjects
from tidegate.testing.bus import envelope as enveloped
from tidegate.testing.messages import Messages

msg = Messages()


@pytest.fixture
async def second_bus(nats_url: str) -> AsyncIterator[Bus]:
    """Another connection: a restarted service, or a second replica."""
    connection = await connect(BusSettings(servers=(nats_url,), wait_for_server_seconds=5))
    yield connection
    await connection.close()


def decisions(cluster: str, **overrides: object) -> ConsumerSettings:
    options: dict[str, object] = {
        "durable": "test-consumer",
        "stream": layout.decisions_stream(cluster),
        "subjects": (subjects.decision_wildcard(cluster),),
        "batch_size": 10,
        "fetch_timeout_seconds": 0.2,
        "ack_wait_seconds": 1.0,
        "backoff_seconds": (0.2,),
        "max_deliver": 3,
    } | overrides
    return ConsumerSettings(**options)  # type: ignore[arg-type]


async def publish_decisions(bus: Bus, cluster: str, count: int) -> None:
    for index in range(count):
        await bus.publish(
            subjects.decision(cluster, "released", "ns", f"w{index}"),
            enveloped(cluster, msg.node(f"w{index}")),
        )


async def consume_until(
    bus: Bus, cluster: str, handler: Handler, done: Callable[[], bool], **overrides: object
) -> DurableConsumer:
    """Run a consumer until ``done()`` holds after a batch (10 s at most)."""
    stop = asyncio.Event()

    async def handle_and_check(message: Received) -> Outcome | None:
        try:
            return await handler(message)
        finally:
            if done():
                stop.set()

    consumer = DurableConsumer(
        bus, cluster=cluster, settings=decisions(cluster, **overrides), handler=handle_and_check
    )
    async with asyncio.timeout(10):
        await consumer.run(stop)
    return consumer


def name_of(message: Received) -> str:
    body = message.envelope.body
    assert isinstance(body, NodeState)
    return body.name


async def test_every_message_is_handled_once_and_acked(bus: Bus, cluster_id: str) -> None:
    await publish_decisions(bus, cluster_id, 25)
    seen: list[str] = []

    async def handle(message: Received) -> None:
        seen.append(name_of(message))

    await consume_until(bus, cluster_id, handle, lambda: len(seen) == 25)
    assert seen == [f"w{i}" for i in range(25)]
    info = await bus.jetstream.consumer_info(layout.decisions_stream(cluster_id), "test-consumer")
    assert info.num_pending == 0


async def test_a_consumer_that_dies_before_acking_gets_the_message_again(
    bus: Bus, second_bus: Bus, cluster_id: str
) -> None:
    await publish_decisions(bus, cluster_id, 3)
    # The handler is idempotent: it records the outcome by event id, so running twice on the
    # same message leaves the same state as running once.
    applied: dict[str, str] = {}
    runs: list[tuple[str, int]] = []

    async def handle(message: Received) -> None:
        runs.append((message.envelope.event_id, message.delivered))
        applied[message.envelope.event_id] = name_of(message)

    doomed = DurableConsumer(
        second_bus, cluster=cluster_id, settings=decisions(cluster_id), handler=handle
    )
    await doomed.start()
    batch = await doomed.fetch()
    assert len(batch) == 3
    await doomed.handle_batch(batch[:1])  # the first is handled and acked ...
    second = batch[1]  # ... the second is handled, but the process dies before its ack ...
    await handle(
        Received(
            subject=second.subject,
            envelope=codec.decode(second.data),
            stream_sequence=second.metadata.sequence.stream,
        )
    )
    state_before_crash = dict(applied)
    await second_bus.close()  # ... and the third was never looked at.

    await consume_until(bus, cluster_id, handle, lambda: len(runs) == 4)
    assert [delivered for _, delivered in runs] == [1, 1, 2, 2]
    assert runs[1][0] == runs[2][0], "the unacked message came back and ran a second time"
    assert applied == state_before_crash | {runs[3][0]: "w2"}
    assert sorted(applied.values()) == ["w0", "w1", "w2"]


async def test_a_restarted_consumer_resumes_where_it_left_off(
    bus: Bus, second_bus: Bus, cluster_id: str
) -> None:
    await publish_decisions(bus, cluster_id, 10)
    first_run: list[str] = []

    async def first(message: Received) -> None:
        first_run.append(name_of(message))

    await consume_until(second_bus, cluster_id, first, lambda: len(first_run) == 10)
    await second_bus.drain()  # the service stops ...
    for index in range(10, 15):  # ... work arrives while it is down ...
        await bus.publish(
            subjects.decision(cluster_id, "released", "ns", f"w{index}"),
            enveloped(cluster_id, msg.node(f"w{index}")),
        )
    second_run: list[str] = []

    async def second(message: Received) -> None:
        second_run.append(name_of(message))

    await consume_until(bus, cluster_id, second, lambda: len(second_run) == 5)  # ... restarts
    assert first_run == [f"w{i}" for i in range(10)]
    assert second_run == [f"w{i}" for i in range(10, 15)]


async def test_retry_naks_with_a_delay_and_the_message_comes_back(
    bus: Bus, cluster_id: str
) -> None:
    await publish_decisions(bus, cluster_id, 1)
    deliveries: list[tuple[int, float]] = []

    async def handle(message: Received) -> Outcome | None:
        deliveries.append((message.delivered, time.monotonic()))
        if message.delivered == 1:
            return Retry("not yet", delay_seconds=0.6)
        return None

    await consume_until(bus, cluster_id, handle, lambda: len(deliveries) == 2, ack_wait_seconds=5.0)
    (first, first_at), (second, second_at) = deliveries
    assert (first, second) == (1, 2)
    assert second_at - first_at >= 0.5, "redelivered only after the nak delay"


async def test_retryable_exceptions_use_the_backoff_and_end_in_the_dead_letter_stream(
    bus: Bus, cluster_id: str
) -> None:
    await publish_decisions(bus, cluster_id, 1)
    deliveries: list[int] = []

    async def handle(message: Received) -> None:
        deliveries.append(message.delivered)
        raise Retryable("the capacity view is behind")

    await consume_until(bus, cluster_id, handle, lambda: len(deliveries) == 3)
    assert deliveries == [1, 2, 3]
    dead = await dead_letters(bus, cluster_id)
    assert len(dead) == 1
    assert "gave up after 3 deliveries: the capacity view is behind" in dead[0][DEADLETTER_REASON]
    assert dead[0][DEADLETTER_DELIVERIES] == "3"


async def test_without_max_deliver_a_failing_message_comes_back_until_it_is_handled(
    bus: Bus, cluster_id: str
) -> None:
    await publish_decisions(bus, cluster_id, 1)
    deliveries: list[int] = []

    async def handle(message: Received) -> None:
        deliveries.append(message.delivered)
        if message.delivered < 8:
            raise Retryable("the ledger is unavailable")

    await consume_until(bus, cluster_id, handle, lambda: len(deliveries) == 8, max_deliver=None)
    assert deliveries == list(range(1, 9))
    assert await dead_letters(bus, cluster_id) == []


@pytest.mark.parametrize(
    "outcome",
    [Reject("queue 'nope' does not exist"), Permanent("queue 'nope' does not exist")],
    ids=["returned-reject", "raised-permanent"],
)
async def test_permanent_failures_are_terminated_and_dead_lettered(
    bus: Bus, cluster_id: str, outcome: Reject | Permanent
) -> None:
    await publish_decisions(bus, cluster_id, 2)
    seen: list[str] = []

    async def handle(message: Received) -> Outcome | None:
        seen.append(name_of(message))
        if name_of(message) == "w0":
            if isinstance(outcome, Permanent):
                raise outcome
            return outcome
        return None

    await consume_until(bus, cluster_id, handle, lambda: len(seen) >= 2)
    await asyncio.sleep(1.5)  # longer than ack_wait: a terminated message is not redelivered
    assert seen == ["w0", "w1"]
    (dead,) = await dead_letters(bus, cluster_id)
    assert dead[DEADLETTER_REASON] == "queue 'nope' does not exist"
    assert dead[DEADLETTER_SUBJECT] == subjects.decision(cluster_id, "released", "ns", "w0")
    assert dead["subject"] == layout.deadletter_subject(
        cluster_id, "test-consumer", subjects.decision(cluster_id, "released", "ns", "w0")
    )


async def test_an_undecodable_message_is_dead_lettered_with_its_json_path(
    bus: Bus, cluster_id: str
) -> None:
    subject = subjects.decision(cluster_id, "released", "ns", "bad")
    await bus.jetstream.publish(subject, b'{"event_id": 7}')
    await publish_decisions(bus, cluster_id, 1)
    seen: list[str] = []

    async def handle(message: Received) -> None:
        seen.append(name_of(message))

    await consume_until(bus, cluster_id, handle, lambda: seen == ["w0"])
    (dead,) = await dead_letters(bus, cluster_id)
    assert "undecodable message" in dead[DEADLETTER_REASON]
    assert "$.event_id" in dead[DEADLETTER_REASON]


async def dead_letters(bus: Bus, cluster: str) -> list[dict[str, str]]:
    """Headers (plus "subject") of every message in the dead-letter stream."""
    stream = layout.deadletter_stream(cluster)
    last = await bus.last_sequence(stream)
    found = []
    for sequence in range(1, last + 1):
        raw = await bus.jetstream.get_msg(stream, sequence)
        found.append(dict(raw.headers or {}) | {"subject": raw.subject or ""})
    return found


async def test_lease_lost_in_a_handler_ends_the_consumer_and_hands_the_messages_back(
    bus: Bus, second_bus: Bus, cluster_id: str
) -> None:
    """A deposed leader's consumer stops (LeaseLost escapes ``run``) instead of nak-ing the
    message with a backoff until it is dead-lettered; the new leader gets every message."""
    await publish_decisions(bus, cluster_id, 3)
    deposed_runs: list[str] = []

    async def deposed(message: Received) -> None:
        deposed_runs.append(name_of(message))
        raise LeaseLost("another instance leads now")

    consumer = DurableConsumer(
        second_bus,
        cluster=cluster_id,
        settings=decisions(cluster_id),
        handler=deposed,
    )
    with pytest.raises(LeaseLost):
        async with asyncio.timeout(10):
            await consumer.run(asyncio.Event())
    assert deposed_runs == ["w0"], "the consumer stopped at the first LeaseLost"

    # The new leader sees all three, at once (nak'ed, not waiting for ack_wait or a backoff),
    # and none was dead-lettered.
    seen: list[str] = []

    async def leader(message: Received) -> None:
        seen.append(name_of(message))

    await consume_until(bus, cluster_id, leader, lambda: len(seen) == 3, ack_wait_seconds=30.0)
    assert sorted(seen) == ["w0", "w1", "w2"]
    info = await bus.jetstream.stream_info(layout.deadletter_stream(cluster_id))
    assert info.state.messages == 0


async def test_a_cancellation_swallowed_below_the_loop_still_stops_the_consumer(
    bus: Bus, cluster_id: str
) -> None:
    # Stands in for nats-py's fetch, whose asyncio.wait_for (Python 3.11) can return the
    # result when the cancellation arrives as the wait completes: a handler that swallows
    # the cancellation. The consumer must end cancelled, not run on inside a cancelled task.
    await publish_decisions(bus, cluster_id, 2)
    handling = asyncio.Event()

    async def swallowing(message: Received) -> Outcome | None:
        handling.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        return None

    consumer = DurableConsumer(
        bus, cluster=cluster_id, settings=decisions(cluster_id), handler=swallowing
    )
    running = asyncio.create_task(consumer.run(asyncio.Event()))
    async with asyncio.timeout(30):
        await handling.wait()
    running.cancel()
    async with asyncio.timeout(30):
        results = await asyncio.gather(running, return_exceptions=True)
    assert running.cancelled(), results
