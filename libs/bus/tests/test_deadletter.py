"""A dead letter that cannot be stored is not dropped: the message is delivered again."""

import asyncio

from tidegate.bus import Bus, BusError, DurableConsumer, Received, Reject, layout
from tidegate.bus.message import DEADLETTER_DELIVERIES
from tidegate.testing.waiting import until_async

from .test_consumer import dead_letters, decisions, publish_decisions


async def test_a_failed_dead_letter_publish_naks_the_message_and_a_later_delivery_stores_it(
    bus: Bus, cluster_id: str
) -> None:
    await publish_decisions(bus, cluster_id, 1)
    # No stream takes the dead-letter subjects: the dead-letter publish fails.
    await bus.jetstream.delete_stream(layout.deadletter_stream(cluster_id))
    deliveries: list[int] = []

    async def handle(message: Received) -> Reject:
        deliveries.append(message.delivered)
        if len(deliveries) == 2:
            await bus.ensure_layout(cluster_id)  # the dead-letter stream is back
        return Reject("queue 'nope' does not exist")

    stop = asyncio.Event()
    consumer = DurableConsumer(
        bus, cluster=cluster_id, settings=decisions(cluster_id, max_deliver=5), handler=handle
    )
    running = asyncio.create_task(consumer.run(stop))

    async def dead_lettered() -> bool:
        return len(deliveries) >= 2 and await stored(bus, cluster_id)

    try:
        await until_async(dead_lettered, within=15, what="the dead letter stored")
    finally:
        stop.set()
        await running
    assert deliveries == [1, 2]  # the first dead letter failed; the second delivery stored it
    (dead,) = await dead_letters(bus, cluster_id)
    assert dead[DEADLETTER_DELIVERIES] == "2"
    info = await bus.jetstream.consumer_info(layout.decisions_stream(cluster_id), "test-consumer")
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


async def stored(bus: Bus, cluster: str) -> bool:
    try:
        return await bus.last_sequence(layout.deadletter_stream(cluster)) > 0
    except BusError:  # the stream is not there yet
        return False
