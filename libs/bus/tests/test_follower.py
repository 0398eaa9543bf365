"""Last-value state streams: replay the newest message per subject (tombstones too), then follow."""

import asyncio
import contextlib

import msgspec

from tidegate.bus import Bus, Received, StateFollower, layout
from tidegate.model import NodeState, Tombstone, subjects
from tidegate.testing.bus import envelope as enveloped
from tidegate.testing.messages import Messages

msg = Messages()


async def test_replays_last_value_per_subject_including_deletions_then_follows(
    bus: Bus, cluster_id: str
) -> None:
    for cpu in (1000, 2000, 3000):
        await bus.publish(
            subjects.node(cluster_id, "a"),
            enveloped(cluster_id, msg.node("a", allocatable={"cpu": cpu})),
        )
    await bus.publish(subjects.node(cluster_id, "b"), enveloped(cluster_id, msg.node("b")))
    await bus.publish(
        subjects.node(cluster_id, "b"), enveloped(cluster_id, msg.tombstone("node", "b"))
    )
    await bus.publish(subjects.queue(cluster_id, "ignored"), enveloped(cluster_id, msg.node("q")))

    seen: list[Received] = []
    third = asyncio.Event()

    async def handle(message: Received) -> None:
        seen.append(message)
        if len(seen) == 3:
            third.set()

    follower = StateFollower(
        bus,
        stream=layout.state_stream(cluster_id),
        subjects=[f"tg.{cluster_id}.node.>", f"tg.{cluster_id}.pod.>"],
        handler=handle,
    )
    task = asyncio.create_task(follower.run())
    try:
        async with asyncio.timeout(10):
            await follower.replayed.wait()
        bodies = {m.subject: m.envelope.body for m in seen}
        assert len(seen) == 2, "one message per subject, the newest"
        node_a = bodies[subjects.node(cluster_id, "a")]
        assert isinstance(node_a, NodeState)
        assert node_a.allocatable == {"cpu": 3000}
        assert isinstance(bodies[subjects.node(cluster_id, "b")], Tombstone)

        await bus.publish(subjects.pod(cluster_id, "ns", "p"), enveloped(cluster_id, msg.node("p")))
        async with asyncio.timeout(10):
            await third.wait()
        assert seen[-1].subject == subjects.pod(cluster_id, "ns", "p")
        assert seen[-1].stream_sequence > seen[-2].stream_sequence
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_empty_stream_is_replayed_at_once(bus: Bus, cluster_id: str) -> None:
    async def handle(message: Received) -> None:
        raise AssertionError("nothing to deliver")

    follower = StateFollower(
        bus,
        stream=layout.capacity_stream(cluster_id),
        subjects=[subjects.capacity_wildcard(cluster_id)],
        handler=handle,
    )
    task = asyncio.create_task(follower.run())
    try:
        async with asyncio.timeout(10):
            await follower.replayed.wait()
        assert follower.handled == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_bad_message_is_skipped_and_a_failing_handler_retried_not_skipped(
    bus: Bus, cluster_id: str
) -> None:
    """A message that is not an envelope is skipped; one whose handler raised is retried,
    not skipped for good (a decision the topology-cache failed to apply would never be
    applied)."""
    await bus.jetstream.publish(subjects.node(cluster_id, "junk"), b'{"not": "an envelope"}')
    await bus.publish(subjects.node(cluster_id, "boom"), enveloped(cluster_id, msg.node("boom")))
    await bus.publish(subjects.node(cluster_id, "fine"), enveloped(cluster_id, msg.node("fine")))
    names: list[str] = []
    attempts = 0

    async def handle(message: Received) -> None:
        nonlocal attempts
        body = message.envelope.body
        assert isinstance(body, NodeState)
        if body.name == "boom":
            attempts += 1
            if attempts <= 3:
                raise RuntimeError("handler failed (transient)")
        names.append(body.name)

    follower = StateFollower(
        bus,
        stream=layout.state_stream(cluster_id),
        subjects=[f"tg.{cluster_id}.node.>"],
        handler=handle,
    )
    task = asyncio.create_task(follower.run())
    try:
        async with asyncio.timeout(20):
            await follower.replayed.wait()
        assert names == ["boom", "fine"], "retried in order, then the next one"
        assert follower.failures == 3
        assert follower.failing is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_cancellation_swallowed_by_the_handler_still_stops_the_follower(
    bus: Bus, cluster_id: str
) -> None:
    """A handler that swallows the cancellation (as nats-py's ``asyncio.wait_for`` can in
    Python 3.11): the follower must end cancelled, not wait for its next message for ever
    inside a cancelled TaskGroup (an ungater that never stopped, in CI)."""
    stream = layout.state_stream(cluster_id)
    subject = subjects.node(cluster_id, "n1")
    await bus.publish(subject, enveloped(cluster_id, msg.node("n1")))
    handling = asyncio.Event()

    async def swallowing(received: Received) -> None:
        handling.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)

    follower = StateFollower(bus, stream=stream, subjects=[subject], handler=swallowing)
    running = asyncio.create_task(follower.run())
    async with asyncio.timeout(30):
        await handling.wait()
    running.cancel()
    async with asyncio.timeout(30):
        results = await asyncio.gather(running, return_exceptions=True)
    assert running.cancelled(), results


async def test_the_lag_is_the_age_of_the_last_message_followed(bus: Bus, cluster_id: str) -> None:
    await bus.publish(subjects.node(cluster_id, "old"), enveloped(cluster_id, msg.node("old")))
    handled = asyncio.Event()

    async def handle(message: Received) -> None:
        if message.subject.endswith(".late"):
            handled.set()

    follower = StateFollower(
        bus,
        stream=layout.state_stream(cluster_id),
        subjects=[f"tg.{cluster_id}.node.>"],
        handler=handle,
    )
    task = asyncio.create_task(follower.run())
    try:
        async with asyncio.timeout(10):
            await follower.replayed.wait()
        assert follower.lag_seconds == 0.0  # replayed history is no lag
        late = enveloped(cluster_id, msg.node("late"))
        late = msgspec.structs.replace(late, time=late.time - 30)
        await bus.publish(subjects.node(cluster_id, "late"), late)
        async with asyncio.timeout(10):
            await handled.wait()
        assert 30 <= follower.lag_seconds < 40
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_follower_cancelled_at_any_point_of_its_start_ends(
    bus: Bus, cluster_id: str
) -> None:
    """Cancelled while it subscribes or asks for its consumer's info, a follower must end, not
    wait on an empty stream for a message that never comes (nats-py's ``asyncio.wait_for`` can
    swallow the cancellation: seen stopping the console). Cancels at 100 points of the start."""

    async def handle(message: Received) -> None:
        raise AssertionError("nothing to deliver")

    stream = layout.capacity_stream(cluster_id)
    hung: list[int] = []
    for step in range(100):
        follower = StateFollower(
            bus, stream=stream, subjects=[subjects.capacity_wildcard(cluster_id)], handler=handle
        )
        task = asyncio.create_task(follower.run())
        for _ in range(step):  # let the start run this many turns of the loop, then cancel
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=5)
        if not done:
            hung.append(step)
            while not task.done():
                task.cancel()
                await asyncio.sleep(0.01)
    assert not hung, f"still running after cancellation at steps {hung}"
