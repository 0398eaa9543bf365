"""Which outbox entries a successor publishes: those whose state change is in the ledger."""

import msgspec

from tidegate.admission.ledger import (
    LedgerRecord,
    OutboxChunk,
    OutboxEntry,
    chunks,
    deliverable,
)
from tidegate.model import Admitted, Envelope, Pending, Released
from tidegate.model.ledger import stored_or_superseded

ADMITTED = Admitted(workload="ns/a", uid="u", queue="q", sequence=5, epoch=1, assignments={})


def entry(body: Admitted | Released | Pending) -> OutboxEntry:
    envelope = Envelope(
        event_id=f"admission-1-{body.sequence}", cluster="c", source="admission", time=0, body=body
    )
    return OutboxEntry(subject="tg.c.decision.x.ns.a", envelope=envelope)


def test_an_admission_is_delivered_only_if_its_record_was_written() -> None:
    record = LedgerRecord(admitted=ADMITTED)
    assert deliverable(entry(ADMITTED), {"ns/a": record})
    assert not deliverable(entry(ADMITTED), {})  # died before writing it: not committed
    other = LedgerRecord(admitted=msgspec.structs.replace(ADMITTED, uid="v"))
    assert not deliverable(entry(ADMITTED), {"ns/a": other})


def test_a_release_is_delivered_only_if_its_admission_is_gone() -> None:
    released = Released(workload="ns/a", uid="u", queue="q", reason="Deleted", sequence=7)
    assert deliverable(entry(released), {})
    assert not deliverable(entry(released), {"ns/a": LedgerRecord(admitted=ADMITTED)})
    later = msgspec.structs.replace(ADMITTED, sequence=9)
    assert deliverable(entry(released), {"ns/a": LedgerRecord(admitted=later)})


def test_decisions_without_ledger_state_are_always_delivered() -> None:
    pending = Pending(workload="ns/a", uid="u", queue="q", reason="WaitingForCapacity", message="")
    assert deliverable(entry(pending), {})


def test_an_entry_round_trips_byte_for_byte() -> None:
    original = entry(ADMITTED)
    encoded = msgspec.json.encode(OutboxChunk(entries=[original]))
    assert msgspec.json.decode(encoded, type=OutboxChunk).entries == [original]


def test_a_commit_is_cut_into_chunks_that_keep_the_order_and_the_size_limit() -> None:
    entries = [entry(msgspec.structs.replace(ADMITTED, sequence=i)) for i in range(10, 50)]
    size = len(msgspec.json.encode(entries[0])) + 1
    cut = chunks(entries, limit=size * 7)
    assert [len(c.entries) for c in cut] == [7, 7, 7, 7, 7, 5]
    assert [e for c in cut for e in c.entries] == entries
    assert chunks(entries, limit=1)[0].entries == entries[:1]  # too big: a chunk of its own
    assert chunks([]) == []


def test_an_entry_is_not_published_behind_itself_or_a_later_decision_on_its_subject() -> None:
    """The rule as admission applies it (the service test: test_a_stored_outbox_entry_is_not_stored_again_after_a_newer_decision
    in tests/admission/test_outbox.py)."""
    staged = entry(ADMITTED).envelope
    assert not stored_or_superseded(staged, None)  # nothing stored: publish it
    assert stored_or_superseded(staged, staged)  # stored already
    resized = entry(msgspec.structs.replace(ADMITTED, sequence=9, replaces=5)).envelope
    assert stored_or_superseded(staged, resized)  # a later decision: a copy would follow it
    older = entry(msgspec.structs.replace(ADMITTED, sequence=3)).envelope
    assert not stored_or_superseded(staged, older)  # not stored yet: publish it
