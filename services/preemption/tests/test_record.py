"""The record's two marks: the decision published, then the victims evicted; older records."""

import msgspec

from tidegate.model import Preempted
from tidegate.model.ledger import PreemptionRecord, decode_preemption, encode_record


def recorded() -> PreemptionRecord:
    return PreemptionRecord(
        preemptor="team/serve",
        preemptor_uid="u",
        request_sequence=4,
        decision=Preempted(preemptor="team/serve", preemptor_uid="u", victims=["team/low"]),
        victims=[],
        recorded_at=10.0,
        event_id="preemption-u-4",
    )


def test_a_record_is_published_before_it_is_evicted() -> None:
    record = recorded()
    assert not record.published
    assert not record.evicted
    published = msgspec.structs.replace(record, published_at=11.0)
    assert published.published
    assert not published.evicted
    evicted = msgspec.structs.replace(published, evicted_at=14.0)
    assert evicted.evicted
    assert decode_preemption(encode_record(evicted)) == evicted


def test_a_record_written_before_evicted_at_existed_still_decodes() -> None:
    stored = msgspec.json.encode(
        {
            "preemptor": "team/serve",
            "preemptor_uid": "u",
            "request_sequence": 4,
            "decision": {
                "type": "preempted",
                "preemptor": "team/serve",
                "preemptor_uid": "u",
                "victims": ["team/low"],
            },
            "victims": [],
            "recorded_at": 10.0,
            "event_id": "preemption-u-4",
            "published_at": 12.0,
        }
    )
    record = decode_preemption(stored)
    assert record.published_at == 12.0
    # Not known to be evicted: its evictions are finished once more (a no-op) at takeover.
    assert record.evicted_at is None
    assert not record.evicted
