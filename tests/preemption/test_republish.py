"""A preemption record finished at takeover never stores a stale decision last on its subject.

The preemption service's side of the rule: a leader that published a ``preempted`` decision
and died before marking its record published leaves the record to its successor, which
publishes the decision again. Past JetStream's duplicate window that would store a copy; when
the subject has moved on to a later answer meanwhile, the stale copy would become the last
message on the subject, and every service replaying the last message per subject would take
it for the decision in force. So the successor publishes only when the subject does not end with the
decision or a later one (:func:`tidegate.model.ledger.stored_or_superseded`, admission's
rule for its outbox).
"""

import asyncio
from pathlib import Path

import msgspec

from tidegate.bus import Ledger, layout
from tidegate.model import Preempted, codec, subjects
from tidegate.model.ledger import encode_record, preemption_key

from .conftest import NAMESPACE, Harness
from .test_preemption_service import evicted_record, published_not_evicted


async def forget_event_ids(h: Harness) -> None:
    """Make the decision stream forget the event ids it stored (as 120 s after a publish)."""
    js = h.bus.jetstream
    info = await js.stream_info(layout.decisions_stream(h.cluster))
    config = info.config
    config.duplicate_window = 0.5
    await js.update_stream(config)
    await asyncio.sleep(1.5)


async def test_a_superseded_preemption_is_not_published_again_at_takeover(
    harness: Harness, tmp_path: Path
) -> None:
    h = harness
    _, first, recorded = await published_not_evicted(h, tmp_path)
    assert await h.stop(first) == 0
    await h.until(lambda: h.of(Preempted), what="the preempted decision")
    assert recorded.decision.request_sequence == recorded.request_sequence

    # What a leader killed between its publish and marking the record published leaves,
    # after a later answer for the same preemptor reached the subject.
    ledger = await Ledger.open(h.bus, h.cluster)
    unpublished = msgspec.structs.replace(recorded, published_at=None)
    await ledger.put(preemption_key(recorded.preemptor), encode_record(unpublished))
    later = Preempted(
        preemptor=recorded.preemptor,
        preemptor_uid=recorded.preemptor_uid,
        victims=[],
        message="a later answer",
        request_sequence=recorded.request_sequence + 10,
    )
    subject = subjects.decision(h.cluster, "preempted", NAMESPACE, "serve")
    await h.publish(subject, later)
    await h.until(lambda: len(h.of(Preempted)) == 2, what="the later answer")
    await forget_event_ids(h)

    await h.start_preemption()
    finished = await h.until_async(lambda: evicted_record(h), what="the record finished")
    assert finished.published  # marked published: its decision is on the stream already
    await asyncio.sleep(0.5)
    stream = layout.decisions_stream(h.cluster)
    last = await h.bus.jetstream.get_last_msg(stream, subject)
    assert codec.decode(last.data or b"").body == later
    assert len(h.of(Preempted)) == 2, h.of(Preempted)
