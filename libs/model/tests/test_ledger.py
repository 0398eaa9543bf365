"""The ledger's one schema (tidegate.model.ledger): keys, records, and when a record's decision
is published again."""

import msgspec

from tidegate.model import Admitted, Envelope, Preempted
from tidegate.model.ledger import (
    LedgerRecord,
    PreemptionRecord,
    decode_admission,
    decode_preemption,
    encode_record,
    preemption_key,
    preemptor_of,
    stopped_key,
    stored_or_superseded,
)


def envelope(body: Admitted | Preempted, event_id: str) -> Envelope:
    return Envelope(event_id=event_id, cluster="c", source="s", time=0, body=body)


def preempted(request_sequence: int | None) -> Preempted:
    return Preempted(
        preemptor="ns/serve",
        preemptor_uid="u",
        victims=["ns/train"],
        request_sequence=request_sequence,
    )


def test_the_keys_of_each_service_never_collide() -> None:
    assert preemptor_of(preemption_key("ns/serve")) == "ns/serve"
    assert preemptor_of("ns/serve") is None
    assert stopped_key("ns/train") == "stopped.ns.train"
    assert "/" not in stopped_key("ns/train")


def test_each_service_reads_the_others_records_with_every_field() -> None:
    admitted = Admitted(workload="ns/a", uid="u", queue="q", sequence=5, epoch=1, assignments={})
    record = LedgerRecord(admitted=admitted, node_usage={"n1": {"cpu": 1000}})
    assert decode_admission(encode_record(record)) == record
    preemption = PreemptionRecord(
        preemptor="ns/serve",
        preemptor_uid="u",
        request_sequence=4,
        decision=preempted(4),
        victims=[],
        recorded_at=1.0,
        event_id="preemption-u-4",
        published_at=2.0,
    )
    assert decode_preemption(encode_record(preemption)) == preemption


def test_a_preempted_is_not_published_behind_itself_or_a_later_answer_on_its_subject() -> None:
    """The rule as preemption applies it (the service test:
    test_a_superseded_preemption_is_not_published_again_at_takeover in
    tests/preemption/test_republish.py)."""
    ours = envelope(preempted(4), "preemption-u-4")
    assert not stored_or_superseded(ours, None)
    assert stored_or_superseded(ours, ours)
    assert stored_or_superseded(ours, envelope(preempted(9), "preemption-u-9"))
    assert not stored_or_superseded(ours, envelope(preempted(2), "preemption-u-2"))
    # An older writer's decision (no request sequence) is ordered by nothing but its id.
    assert not stored_or_superseded(ours, envelope(preempted(None), "preemption-u-x"))
    older_writer = msgspec.structs.replace(preempted(None))
    assert not stored_or_superseded(envelope(older_writer, "e"), envelope(preempted(9), "f"))
