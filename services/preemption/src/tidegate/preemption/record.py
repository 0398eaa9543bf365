"""The preemption record: what the service committed to before it evicted anything.

A preemption is committed all-or-nothing. Before anything is published or evicted, one record
per preemptor is written to the ledger KV bucket (key :func:`ledger_key`, revision-checked):
the ``preempted`` decision it will publish (victims, modes, nominated capacity), and for every
victim the pods to evict and how (restart or abort). Then the decision is published and the
record marked ``published`` — *before* the first eviction, so that from then on nobody treats
the victims' admissions as in force (the ungater would otherwise release the replacement pods a
victim's controller creates while its old pods are being evicted, back into the victim's old
slots). Only then are pods evicted; once every pod of every victim is gone or evicted the
record is marked ``evicted``. A service that dies anywhere in between finds the record on
restart and finishes it (publishing again is deduplicated by the event id, evicting a pod that
is gone is a no-op); a record that exists stops the same gang from being chosen again, and the
same request from being acted on twice.

The record stays while its nomination holds (until the preemptor is admitted, deleted, or the
nomination times out, counted from the end of the evictions), so the service keeps the freed
room out of other preemptors' searches.

Records written before ``evicted_at`` existed decode with it None: they count as not evicted,
so they are evicted once more (a no-op: their pods are gone) and their nomination time counts
from then.

This module only defines the record and its encoding; it does no I/O.
"""

from typing import Final

import msgspec

from tidegate.model import Preempted, WorkloadKey
from tidegate.model.events import OnPreemption

LEDGER_PREFIX: Final = "preemption."
"""Prefix of the preemption service's keys in the ledger bucket. A workload key's namespace
never holds a dot, so these keys cannot collide with admission's ``<namespace>/<name>`` keys."""


def ledger_key(preemptor: str) -> str:
    """The ledger key of the record of ``preemptor`` (a workload key ``ns/name``)."""
    return LEDGER_PREFIX + preemptor


def preemptor_of(key: str) -> WorkloadKey | None:
    """The preemptor named by a ledger key, or None if the key is not a preemption record's."""
    if not key.startswith(LEDGER_PREFIX):
        return None
    return WorkloadKey(key.removeprefix(LEDGER_PREFIX))


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
    """Everything needed to finish one preemption, whoever finishes it."""

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
    still to be finished. The nomination timeout counts from here."""
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


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(PreemptionRecord)


def encode_record(record: PreemptionRecord) -> bytes:
    """The record as stored in the ledger (JSON)."""
    return _encoder.encode(record)


def decode_record(data: bytes) -> PreemptionRecord:
    """Parse a stored record; raises msgspec.ValidationError / DecodeError naming the path."""
    return _decoder.decode(data)


def event_id(preemptor_uid: str, request_sequence: int) -> str:
    """Deterministic event id of the decision answering one request."""
    return f"preemption-{preemptor_uid}-{request_sequence}"
