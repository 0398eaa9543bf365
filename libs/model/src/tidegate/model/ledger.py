"""The schema of every record in the ledger KV bucket (``tidegate-<cluster>-ledger``), once.

The bucket is shared by admission and preemption; each writes only its own keys and reads
the other's through the types here (no service keeps a copy of another's schema):

======================================  ==========================  =====================
key                                     value                       written by
======================================  ==========================  =====================
``<namespace>/<name>``                  :class:`LedgerRecord`       admission
``sequence`` (:data:`SEQUENCE_KEY`)     :class:`SequenceRecord`     admission
``outbox.<event id>``                   :class:`OutboxChunk`        admission
``stopped.<namespace>.<name>``          :class:`StoppedRecord`      admission
``preemption.<namespace>/<name>``       :class:`PreemptionRecord`   preemption
``fence.<service>``                     fence markers               :mod:`tidegate.bus`
======================================  ==========================  =====================

A namespace never holds a dot, so the prefixed keys never collide with workload keys. Records
evolve as bus messages do: new fields get defaults, nothing is renamed or retyped.

:func:`stored_or_superseded` is the rule both services apply before publishing a decision
again from a record (an outbox entry, an unpublished preemption): not when its subject ends
with it or a later decision already (docs/admission.md, One leader, no double admission).
Pure: no I/O.
"""

from typing import Final

import msgspec

from tidegate.model.events import Admitted, Envelope, OnPreemption, Preempted
from tidegate.model.ids import WorkloadKey
from tidegate.model.resources import Resources

SEQUENCE_KEY: Final = "sequence"
"""Ledger key of admission's sequence high-water mark (workload keys always hold a ``/``)."""

OUTBOX_PREFIX: Final = "outbox."
"""Prefix of admission's outbox keys (``outbox.<event id>``; event ids hold no ``/``)."""

STOPPED_PREFIX: Final = "stopped."
"""Prefix of the keys of workloads admission keeps out (``stopped.<namespace>.<name>``: no
``/``, so other readers of the bucket never take them for admission records)."""

PREEMPTION_PREFIX: Final = "preemption."
"""Prefix of the preemption service's keys (``preemption.<namespace>/<name>``)."""


class LedgerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the ledger holds for one admitted workload (key ``<namespace>/<name>``): the
    admitted decision as published, and what it takes on each node (a successor re-applies
    that as overlay until the capacity view reports it)."""

    admitted: Admitted
    node_usage: dict[str, Resources] = msgspec.field(default_factory=dict)
    admitted_at: float | None = None
    """When the first admission of the chain was made (Unix seconds): a reserved gang's wait
    counts the workload's declared runtime from here (docs/reservations.md). None: written
    by an older leader (a successor then counts from its takeover)."""


class SequenceRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The highest decision sequence handed out, and by which leader epoch."""

    sequence: int
    epoch: int


class OutboxEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A committed decision not yet known to be stored on the decision stream."""

    subject: str
    envelope: Envelope

    @property
    def sequence(self) -> int:
        """The decision's sequence (0 for a body without one)."""
        return int(getattr(self.envelope.body, "sequence", 0))


class OutboxChunk(msgspec.Struct, frozen=True, kw_only=True):
    """The value of one outbox key: decisions of one commit, in order."""

    entries: list[OutboxEntry]


class StoppedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A workload not to be admitted again until re-created, on a decision's word only (an
    aborted preemption victim, or finished as another service said)."""

    workload: str
    uid: str


def stopped_key(workload: str) -> str:
    """The ledger key of a kept-out workload (``namespace/name``)."""
    namespace, _, name = workload.partition("/")
    return f"{STOPPED_PREFIX}{namespace}.{name}"


class PodRef(msgspec.Struct, frozen=True, kw_only=True):
    """One pod to evict, by name and UID (a newer pod of the same name is left alone)."""

    namespace: str
    name: str
    uid: str
    node: str | None = None


class VictimRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A training gang to evict whole, and what its controller must be told."""

    key: str
    """Workload key ``ns/name``."""
    uid: str
    mode: OnPreemption
    owner_kind: str
    """Kind of its top owner (Job, JobSet, …): what abort mode suspends."""
    owner_api_version: str = ""
    pods: list[PodRef] = msgspec.field(default_factory=list)
    """Its pods that held or were about to hold capacity when the victim was chosen."""


class PreemptionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Everything needed to finish one preemption, whoever finishes it (key
    ``preemption.<namespace>/<name>`` of the preemptor; the lifecycle is the preemption
    service's, :mod:`tidegate.preemption.preempter`)."""

    preemptor: str
    preemptor_uid: str
    request_sequence: int
    """Sequence of the preempt-requested decision this answers."""
    decision: Preempted
    """The decision to publish before the first victim is evicted."""
    victims: list[VictimRecord]
    recorded_at: float
    """When the record was written (Unix seconds); pods created later are never evicted."""
    event_id: str
    """Event id (and Nats-Msg-Id) of the decision, so a repeated publish is dropped."""
    published_at: float | None = None
    """When the decision was published; None while it is still to be published."""
    evicted_at: float | None = None
    """When every pod of every victim was found evicted or gone; None while evictions are
    still to be finished. The nomination timeout counts from here. Records written before
    this field existed count as not evicted (evicting them again is a no-op)."""
    trace_context: dict[str, str] = msgspec.field(default_factory=dict)
    """W3C headers of the request, so a resumed preemption continues its trace."""

    @property
    def published(self) -> bool:
        """Whether the decision was published (its victims' admissions have ended)."""
        return self.published_at is not None

    @property
    def evicted(self) -> bool:
        """Whether every victim was evicted whole: the preemption is finished and only its
        nomination remains."""
        return self.evicted_at is not None

    def victim_keys(self) -> set[str]:
        """Keys of its victims."""
        return {victim.key for victim in self.victims}


def preemption_key(preemptor: str) -> str:
    """The ledger key of the preemption record of ``preemptor`` (a workload key ``ns/name``)."""
    return PREEMPTION_PREFIX + preemptor


def preemptor_of(key: str) -> WorkloadKey | None:
    """The preemptor named by a ledger key, or None if the key is not a preemption record's."""
    if not key.startswith(PREEMPTION_PREFIX):
        return None
    return WorkloadKey(key.removeprefix(PREEMPTION_PREFIX))


def preemption_event_id(preemptor_uid: str, request_sequence: int) -> str:
    """Deterministic event id of the ``preempted`` decision answering one request."""
    return f"preemption-{preemptor_uid}-{request_sequence}"


def decision_order(body: object) -> int | None:
    """Where a decision stands among the decisions of its subject: its ``sequence`` (an
    admitted, pending, released, preempt-requested decision), for a ``preempted`` decision
    the sequence of the request it answers (:attr:`Preempted.request_sequence`); None when
    unknown (an older writer)."""
    if isinstance(body, Preempted):
        return body.request_sequence
    sequence = getattr(body, "sequence", None)
    return sequence if isinstance(sequence, int) else None


def stored_or_superseded(envelope: Envelope, last: Envelope | None) -> bool:
    """Whether ``last``, the newest message on ``envelope``'s subject, is ``envelope`` itself
    or a later decision. Publishing ``envelope`` again then would store a stale copy behind
    it (past the duplicate window), which a replay of the last message per subject takes for
    the decision in force."""
    if last is None:
        return False
    if last.event_id == envelope.event_id:
        return True
    stored, ours = decision_order(last.body), decision_order(envelope.body)
    return stored is not None and ours is not None and stored >= ours


_encoder = msgspec.json.Encoder()
_admission_decoder = msgspec.json.Decoder(LedgerRecord)
_preemption_decoder = msgspec.json.Decoder(PreemptionRecord)


def encode_record(record: msgspec.Struct) -> bytes:
    """A record as stored in the ledger (JSON)."""
    return _encoder.encode(record)


def decode_admission(data: bytes) -> LedgerRecord:
    """Parse a stored admission record; raises msgspec.ValidationError / DecodeError naming
    the path."""
    return _admission_decoder.decode(data)


def decode_preemption(data: bytes) -> PreemptionRecord:
    """Parse a stored preemption record; raises msgspec.ValidationError / DecodeError naming
    the path."""
    return _preemption_decoder.decode(data)
