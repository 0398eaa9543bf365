"""Committed decisions are published from the ledger's outbox until stored.

A real publish failure, not a mock: the decision stream is made to refuse every message (its
maximum message size shrunk below any decision's) after the workload was admitted, so the
``released`` admission commits to the ledger cannot be stored. Without the outbox, the
decision would be lost: the leader dies on the failed flush, and a successor re-publishes only
admissions the capacity view has not applied (never a ``released``).
"""

import asyncio
import collections
import signal
import typing

import msgspec

from tidegate.admission.handlers import STUCK_AFTER
from tidegate.admission.ledger import OutboxChunk, OutboxEntry
from tidegate.bus import Ledger, Received, layout
from tidegate.model import (
    Admitted,
    LostAdmission,
    Message,
    Preempted,
    QueueConfig,
    Released,
    codec,
    subjects,
)
from tidegate.model.subjects import DecisionKind
from tidegate.testing import following, until_async

from .conftest import Harness
from .test_admission_service import (
    inference_needs_the_victims_room,
    small_cluster,
    victim_aborted_for_serve,
    workers,
    workload,
)
from .test_metrics import at, scrape, scrape_until

DECISION_KINDS: tuple[str, ...] = typing.get_args(DecisionKind)

UNSENT = ("tidegate_admission_outbox_unsent", frozenset())

REFUSING_MAX_BYTES = 16
"""A maximum message size no decision fits in: the stream refuses every publish."""


async def refuse_decisions(harness: Harness, refuse: bool) -> None:
    """Make the decision stream refuse every message (``refuse``) or take them again."""
    js = harness.bus.jetstream
    info = await js.stream_info(layout.decisions_stream(harness.cluster))
    config = info.config
    config.max_msg_size = REFUSING_MAX_BYTES if refuse else -1
    await js.update_stream(config)


async def committed_release(harness: Harness, key: str) -> None:
    """Wait until admission committed the release of ``key``: its ledger key is gone."""
    ledger = await Ledger.open(harness.bus, harness.cluster)

    async def absent() -> bool:
        return await ledger.get(key) is None

    await until_async(
        absent, within=20, what=f"the release of {key} committed", alive=harness.services.check
    )


def released_once(harness: Harness, key: str) -> Released:
    """The one ``released`` of ``key`` on the stream (fails if stored twice)."""
    counts = collections.Counter(
        type(d).__name__ for d in harness.decisions if getattr(d, "workload", None) == key
    )
    assert counts["Released"] == 1, f"released of {key} stored {counts['Released']} times"
    (released,) = harness.of(Released, key)
    assert isinstance(released, Released)
    return released


async def admitted_train(harness: Harness) -> Admitted:
    await harness.workload(workload("train", workers(2, 8)))
    await harness.until(lambda: harness.of(Admitted, "ns/train"), within=30, what="admission")
    (admitted,) = harness.of(Admitted, "ns/train")
    assert isinstance(admitted, Admitted)
    return admitted


async def test_a_release_whose_publish_failed_is_sent_again_by_the_same_leader(
    harness: Harness,
) -> None:
    await small_cluster(harness)
    service = await harness.start_admission()
    admitted = await admitted_train(harness)
    await refuse_decisions(harness, True)
    try:
        await harness.delete_workload("ns", "train")
        await committed_release(harness, "ns/train")
        await scrape_until(service, lambda s: s[UNSENT] >= 1, what="the release unsent")
        assert harness.of(Released, "ns/train") == []
    finally:
        await refuse_decisions(harness, False)
    await harness.until(lambda: harness.of(Released, "ns/train"), within=20, what="the release")
    await scrape_until(service, lambda s: s[UNSENT] == 0, what="the outbox emptied")
    await asyncio.sleep(1.0)  # a second copy would have arrived by now
    released = released_once(harness, "ns/train")
    assert (released.uid, released.reason) == (admitted.uid, "Deleted")
    assert released.sequence > admitted.sequence


async def test_a_release_whose_publish_failed_is_sent_by_the_successor_after_a_crash(
    harness: Harness,
) -> None:
    await small_cluster(harness)
    first = await harness.spawn_admission("first")
    admitted = await admitted_train(harness)
    await refuse_decisions(harness, True)
    try:
        await harness.delete_workload("ns", "train")
        await committed_release(harness, "ns/train")
        first.signal(signal.SIGKILL)
        await first.wait()
    finally:
        await refuse_decisions(harness, False)
    assert harness.of(Released, "ns/train") == []
    await harness.spawn_admission("second")
    await harness.until(
        lambda: harness.of(Released, "ns/train"), within=30, what="the successor's release"
    )
    await asyncio.sleep(1.0)  # a second copy would have arrived by now
    released = released_once(harness, "ns/train")
    assert (released.uid, released.reason) == (admitted.uid, "Deleted")


async def refuse_kind(harness: Harness, refused: DecisionKind | None) -> None:
    """Make the decision stream take every decision but those of kind ``refused``, or all of
    them again (None): a publish of that kind then finds no stream (a real failure)."""
    js = harness.bus.jetstream
    info = await js.stream_info(layout.decisions_stream(harness.cluster))
    config = info.config
    prefix = f"tg.{harness.cluster}.decision"
    config.subjects = (
        [f"{prefix}.{kind}.>" for kind in DECISION_KINDS if kind != refused]
        if refused is not None
        else [subjects.decision_wildcard(harness.cluster)]
    )
    await js.update_stream(config)


async def test_an_admission_whose_publish_failed_is_sent_by_the_successor_with_later_ones(
    harness: Harness,
) -> None:
    """The outbox's second case: without it, an admission whose publish failed while a later
    decision was stored would fall under the successor's watermark and never be published
    (its pods gated). Here ``first`` is admitted but its ``admitted`` cannot be stored,
    ``second`` is decided after it, the leader is killed; the successor publishes both, in
    order, once."""
    await small_cluster(harness)
    leader = await harness.spawn_admission("leader")
    # Leading (its start-up has created the layout, which the refusal below changes).
    await harness.workload(workload("ready", workers(1, 8)))
    await harness.until(lambda: harness.of(Admitted, "ns/ready"), within=30, what="a leader")
    await refuse_kind(harness, "admitted")
    try:
        await harness.workload(workload("first", workers(2, 8)))
        await committed_admission(harness, "ns/first")
        await harness.workload(workload("second", workers(1, 8)))
        await committed_admission(harness, "ns/second")
        leader.signal(signal.SIGKILL)
        await leader.wait()
    finally:
        await refuse_kind(harness, None)
    assert [getattr(d, "workload", None) for d in harness.of(Admitted)] == ["ns/ready"]
    await harness.spawn_admission("successor")
    await harness.until(
        lambda: len(harness.of(Admitted)) == 3, within=30, what="the successor's admissions"
    )
    await asyncio.sleep(1.0)  # a second copy would have arrived by now
    admitted = [d for d in harness.of(Admitted) if isinstance(d, Admitted)][1:]
    assert [a.workload for a in admitted] == ["ns/first", "ns/second"], admitted
    assert admitted[0].sequence < admitted[1].sequence


async def committed_admission(harness: Harness, key: str) -> None:
    """Wait until admission committed the admission of ``key``: its ledger key exists."""
    ledger = await Ledger.open(harness.bus, harness.cluster)

    async def present() -> bool:
        return await ledger.get(key) is not None

    await until_async(
        present, within=20, what=f"the admission of {key} committed", alive=harness.services.check
    )


async def test_a_victims_release_whose_publish_failed_in_the_handler_is_not_lost(
    harness: Harness,
) -> None:
    """The handler path: before the outbox, the failed publish nak'd the ``preempted`` after
    the policy had already released the victim, so its redelivery released nothing and the
    ``released`` was never published."""
    await harness.topology()
    await harness.node("n1", "r1")
    await harness.queue(QueueConfig(name="q"))
    await harness.start_admission()
    victim = await inference_needs_the_victims_room(harness)
    await refuse_kind(harness, "released")
    try:
        preempted = victim_aborted_for_serve()
        subject = subjects.decision(harness.cluster, "preempted", "ns", "serve")
        await harness.publish(subject, preempted)
        await committed_release(harness, "ns/victim")
        await asyncio.sleep(1.0)  # the message is handled (and acked or redelivered)
        assert harness.of(Released, "ns/victim") == []
    finally:
        await refuse_kind(harness, None)
    await harness.until(
        lambda: harness.of(Released, "ns/victim"), within=20, what="the victim's release"
    )
    await asyncio.sleep(1.0)  # a second copy would have arrived by now
    released = released_once(harness, "ns/victim")
    assert (released.uid, released.reason) == (victim.uid, "Evicted")


async def refuse_workload_keys(harness: Harness, refuse: bool) -> None:
    """Make the ledger bucket refuse writes to workload keys (``ns/name``) while it takes
    every other key (the sequence, the outbox, kept-out and preemption records, the fence),
    or take them all again: a ledger delete then finds no stream (a real failure)."""
    js = harness.bus.jetstream
    bucket = layout.ledger_bucket(harness.cluster)
    info = await js.stream_info(f"KV_{bucket}")
    config = info.config
    prefix = f"$KV.{bucket}"
    others = ("sequence", "outbox.>", "stopped.>", "preemption.>", "fence.>")
    config.subjects = [f"{prefix}.{o}" for o in others] if refuse else [f"{prefix}.>"]
    await js.update_stream(config)


async def test_a_release_whose_ledger_delete_failed_deletes_the_key_when_tried_again(
    harness: Harness,
) -> None:
    """Seen in the chaos run (seed 27): the ledger forgot a key's revision before its delete
    was stored, so after a failed commit the retry skipped the delete and published the
    release; the key stayed, and a successor restored the admission and released it again."""
    await small_cluster(harness)
    await harness.start_admission()
    await admitted_train(harness)
    await refuse_workload_keys(harness, True)
    try:
        await harness.delete_workload("ns", "train")
        await asyncio.sleep(1.0)  # commits tried and failed: the delete finds no stream
        assert harness.of(Released, "ns/train") == []
    finally:
        await refuse_workload_keys(harness, False)
    await harness.until(lambda: harness.of(Released, "ns/train"), within=20, what="the release")
    await committed_release(harness, "ns/train")
    released_once(harness, "ns/train")


async def forget_event_ids(harness: Harness) -> None:
    """Make the decision stream forget the event ids it stored (as 120 s after a publish):
    shrink its duplicate window so JetStream prunes them, then wait for the prune. The next
    service to start sets the window back."""
    js = harness.bus.jetstream
    info = await js.stream_info(layout.decisions_stream(harness.cluster))
    config = info.config
    config.duplicate_window = 0.5
    await js.update_stream(config)
    await asyncio.sleep(1.5)


async def test_a_stored_outbox_entry_is_not_stored_again_after_a_newer_decision(
    harness: Harness,
) -> None:
    """A leader stopped after an admission was stored but before its outbox key was
    deleted; the workload was resized since. A successor that published the entry again at
    takeover would, past the duplicate window, make it the last message on its subject: every
    later replay (a restart of the topology-cache, the ungater, preemption) would see the old
    admission as the one in force."""
    await small_cluster(harness)
    await harness.start_admission(lease_holder="first")
    web = workload("web", workers(2, 4))
    await harness.workload(web)
    await harness.until(lambda: harness.of(Admitted, "ns/web"), what="the admission")
    await harness.workload(msgspec.structs.replace(web, podsets=[workers(3, 4)]))
    await harness.until(lambda: len(harness.of(Admitted, "ns/web")) == 2, what="the resize")
    first, resized = harness.of(Admitted, "ns/web")
    assert isinstance(first, Admitted)
    assert isinstance(resized, Admitted)
    assert resized.replaces == first.sequence
    service, task = harness.services.running.pop()
    service.request_stop()
    async with asyncio.timeout(10):
        assert await task == 0

    # What a leader killed between the publish of `first` and its outbox delete leaves.
    stream = layout.decisions_stream(harness.cluster)
    subject = subjects.decision(harness.cluster, "admitted", "ns", "web")
    stored = await harness.bus.jetstream.get_msg(stream, seq=1, subject=subject, next=True)
    envelope = codec.decode(stored.data or b"")
    assert envelope.body == first
    ledger = await Ledger.open(harness.bus, harness.cluster)
    chunk = OutboxChunk(entries=[OutboxEntry(subject=subject, envelope=envelope)])
    await ledger.put(f"outbox.{envelope.event_id}", msgspec.json.encode(chunk))
    await forget_event_ids(harness)

    await harness.start_admission(lease_holder="second")
    await harness.workload(workload("after", workers(1, 4)))
    await harness.until(lambda: harness.of(Admitted, "ns/after"), what="the successor leading")
    await asyncio.sleep(0.5)
    assert len(harness.of(Admitted, "ns/web")) == 2, harness.of(Admitted, "ns/web")
    last = await harness.bus.jetstream.get_last_msg(stream, subject)
    assert codec.decode(last.data or b"").body == resized
    assert not any(key.startswith("outbox.") for key in await ledger.keys())

    # What a service replaying the decision stream at start sees: the resize, in force.
    replayed: list[Message] = []

    async def collect(received: Received) -> None:
        replayed.append(received.envelope.body)

    async with following(
        harness.bus, stream=stream, subjects=[subject], handler=collect, replayed_within=5
    ):
        assert replayed == [resized]


async def deliveries_or_dead_letter(harness: Harness, *, since: int, at_least: int) -> bool:
    """Wait until admission's consumer has made ``at_least`` deliveries after its consumer
    sequence ``since``, or dead-lettered something; True if it dead-lettered."""
    stream = layout.decisions_stream(harness.cluster)
    dead = layout.deadletter_stream(harness.cluster)
    wildcard = layout.deadletter_wildcard(harness.cluster)
    deadline = asyncio.get_running_loop().time() + 90
    while True:
        if await harness.bus.subjects_in(dead, wildcard):
            return True
        info = await harness.bus.jetstream.consumer_info(stream, "admission")
        if info.delivered.consumer_seq - since >= at_least:
            return False
        assert asyncio.get_running_loop().time() < deadline, "neither delivered nor dead-lettered"
        await asyncio.sleep(0.2)


async def test_a_preempted_whose_commits_keep_failing_is_never_dead_lettered(
    harness: Harness,
) -> None:
    """The ``preempted`` of a restart-mode victim whose commit fails on five deliveries (the
    ledger unwritable for a minute) is not dead-lettered: the release, kept only in the
    leader's memory, would die with it at the next leader change, and the successor would
    restore the victim's admission from the ledger and never release it (its quota leaked,
    its pods, ended by the ungater, gated)."""
    await harness.topology()
    await harness.node("n1", "r1")
    await harness.queue(QueueConfig(name="q"))
    await harness.start_admission(lease_holder="first")
    victim = await inference_needs_the_victims_room(harness)
    stream = layout.decisions_stream(harness.cluster)
    before = await harness.bus.jetstream.consumer_info(stream, "admission")
    await refuse_workload_keys(harness, True)
    try:
        preempted = Preempted(
            preemptor="ns/serve",
            preemptor_uid="uid-serve",
            victims=["ns/victim"],
            mode={"ns/victim": "restart"},
            lost={"ns/victim": LostAdmission(uid=victim.uid, sequence=victim.sequence)},
        )
        subject = subjects.decision(harness.cluster, "preempted", "ns", "serve")
        await harness.publish(subject, preempted, event_id="preemption-1")
        since = before.delivered.consumer_seq
        dead = await deliveries_or_dead_letter(harness, since=since, at_least=7)
        assert not dead, "the preempted decision was dead-lettered"
        assert harness.of(Released, "ns/victim") == []
        # The leader changes while the release is still uncommitted.
        service, task = harness.services.running.pop()
        service.request_stop()
        async with asyncio.timeout(10):
            assert await task == 0
    finally:
        await refuse_workload_keys(harness, False)
    await harness.start_admission(lease_holder="second")
    await harness.until(
        lambda: harness.of(Released, "ns/victim"), within=20, what="the victim's release"
    )
    await committed_release(harness, "ns/victim")
    released = released_once(harness, "ns/victim")
    assert (released.uid, released.reason) == (victim.uid, "Evicted")


async def test_a_decision_whose_commits_keep_failing_is_reported_stuck_and_still_retried(
    harness: Harness,
) -> None:
    """A ``preempted`` that fails on every delivery is retried for
    ever (never dead-lettered), but not silently: after STUCK_AFTER failures the leader counts
    it in ``tidegate_admission_stuck_decisions`` (and logs an error naming the victim) until
    it succeeds; then the release is committed and the gauge drops back."""
    await harness.topology()
    await harness.node("n1", "r1")
    await harness.queue(QueueConfig(name="q"))
    service = await harness.start_admission()
    victim = await inference_needs_the_victims_room(harness)
    _, samples = await scrape(service)
    assert at(samples, "tidegate_admission_stuck_decisions") == 0
    stream = layout.decisions_stream(harness.cluster)
    before = await harness.bus.jetstream.consumer_info(stream, "admission")
    await refuse_workload_keys(harness, True)
    try:
        preempted = Preempted(
            preemptor="ns/serve",
            preemptor_uid="uid-serve",
            victims=["ns/victim"],
            mode={"ns/victim": "restart"},
            lost={"ns/victim": LostAdmission(uid=victim.uid, sequence=victim.sequence)},
        )
        subject = subjects.decision(harness.cluster, "preempted", "ns", "serve")
        await harness.publish(subject, preempted, event_id="preemption-stuck")
        since = before.delivered.consumer_seq
        dead = await deliveries_or_dead_letter(harness, since=since, at_least=STUCK_AFTER + 1)
        assert not dead, "the preempted decision was dead-lettered"
        await scrape_until(
            service,
            lambda s: at(s, "tidegate_admission_stuck_decisions") == 1,
            what="the stuck decision counted",
        )
        assert harness.of(Released, "ns/victim") == []
    finally:
        await refuse_workload_keys(harness, False)
    await harness.until(
        lambda: harness.of(Released, "ns/victim"), within=20, what="the victim's release"
    )
    await scrape_until(
        service,
        lambda s: at(s, "tidegate_admission_stuck_decisions") == 0,
        what="the stuck decision handled",
    )
    released = released_once(harness, "ns/victim")
    assert (released.uid, released.reason) == (victim.uid, "Evicted")
