"""The admission ledger: what is admitted, and the outbox of decisions not yet stored.

One key per admitted workload (its key ``namespace/name``) holds a :class:`LedgerRecord`: the
admitted decision as published and what it takes on each node (the successor re-applies that
as overlay until the capacity view reports it). The key ``sequence`` holds the highest decision
sequence handed out and the epoch that did it. One key per workload kept out on a decision's
word only (``stopped.<namespace>.<name>``, a :class:`StoppedRecord`: an aborted preemption
victim, or one another service released as finished) keeps a successor from admitting it
again; it is deleted once the workload is deleted or re-created.

**The outbox.** Every decision is first written under ``outbox.<event id>`` as an
:class:`OutboxEntry` (subject and envelope, byte for byte what is published), then its state
change is made (an admission's key written, a release's key deleted), then it is published;
once JetStream has stored it the outbox key is deleted. A decision whose publish failed stays
in the outbox and is published again, by the same event id (``Nats-Msg-Id``, so JetStream
drops a copy it already stored), by this leader on its next tick or by a successor at
takeover: nothing is re-published by comparing sequences to a watermark. An entry whose state
change was never made (a crash in between) is dropped instead (:func:`deliverable`): the
decision was not committed, and the successor decides again.

Every write names the revision it expects, so an instance that is no longer the leader cannot
overwrite what the new leader wrote: its write fails with a conflict and it stops
(:class:`tidegate.bus.LeaseLost`). A batch of decisions is committed as: claim the sequence
(the fence), stage the outbox entries, write or delete the workload keys, publish, unstage.
"""

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Final

import msgspec

from tidegate.admission.nominations import (
    PREEMPTION_PREFIX,
    PreemptionRecord,
    decode_preemption,
)
from tidegate.bus import Bus, BusError, Conflict, LeaseLost, Ledger
from tidegate.model import Admitted, Envelope, Released, Resources

log = logging.getLogger(__name__)

SEQUENCE_KEY: Final = "sequence"
"""Ledger key of the sequence high-water mark (workload keys always hold a ``/``)."""


class LedgerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the ledger holds for one admitted workload."""

    admitted: Admitted
    node_usage: dict[str, Resources] = msgspec.field(default_factory=dict)


OUTBOX_PREFIX: Final = "outbox."
"""Prefix of the outbox keys (``outbox.<event id>``; event ids hold no ``/``)."""


class OutboxEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A committed decision not yet known to be stored on the decision stream."""

    subject: str
    envelope: Envelope

    @property
    def key(self) -> str:
        """Its ledger key."""
        return OUTBOX_PREFIX + self.envelope.event_id

    @property
    def sequence(self) -> int:
        """The decision's sequence (0 for a body without one)."""
        return int(getattr(self.envelope.body, "sequence", 0))


def deliverable(entry: OutboxEntry, records: dict[str, LedgerRecord]) -> bool:
    """Whether ``entry`` was committed, given the admitted ``records`` by workload key: an
    admission whose record (or a later one of the same object) is in the ledger, a release
    whose admission is no longer there; other decisions change no ledger state and always
    are. An entry staged by a leader that died before making its state change is not."""
    body = entry.envelope.body
    if isinstance(body, Admitted):
        record = records.get(body.workload)
        return (
            record is not None
            and record.admitted.uid == body.uid
            and record.admitted.sequence >= body.sequence
        )
    if isinstance(body, Released):
        record = records.get(body.workload)
        return not (
            record is not None
            and record.admitted.uid == body.uid
            and record.admitted.sequence < body.sequence
        )
    return True


STOPPED_PREFIX: Final = "stopped."
"""Prefix of the keys of workloads kept out (``stopped.<namespace>.<name>``: no ``/``, so
other readers of the bucket never take them for admission records)."""


class StoppedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A workload not to be admitted again until re-created, on a decision's word only (an
    aborted preemption victim, or finished as another service said)."""

    workload: str
    uid: str


def stopped_key(workload: str) -> str:
    """The ledger key of a kept-out workload (``namespace/name``)."""
    namespace, _, name = workload.partition("/")
    return f"{STOPPED_PREFIX}{namespace}.{name}"


class SequenceRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The highest decision sequence handed out, and by which leader epoch."""

    sequence: int
    epoch: int


_record_decoder = msgspec.json.Decoder(LedgerRecord)
_outbox_decoder = msgspec.json.Decoder(OutboxEntry)
_stopped_decoder = msgspec.json.Decoder(StoppedRecord)
_sequence_decoder = msgspec.json.Decoder(SequenceRecord)
_encoder = msgspec.json.Encoder()


class AdmissionLedger:
    """The ledger with the revisions this leader last saw, written only with revision checks."""

    def __init__(self, ledger: Ledger) -> None:
        """Wrap an opened :class:`tidegate.bus.Ledger`."""
        self._ledger = ledger
        self._revisions: dict[str, int] = {}
        self.preemptions: list[PreemptionRecord] = []
        """The preemption service's records as of the last :meth:`load` (read, never written)."""
        self.outbox: list[OutboxEntry] = []
        """The outbox as of the last :meth:`load`, in decision order."""
        self.stopped: dict[str, str] = {}
        """Kept-out workloads (key → uid) as stored: loaded, then kept by :meth:`keep_out`."""

    @classmethod
    async def open(cls, bus: Bus, cluster: str) -> "AdmissionLedger":
        """The ledger of ``cluster``."""
        return cls(await Ledger.open(bus, cluster))

    async def load(self) -> tuple[SequenceRecord | None, list[LedgerRecord]]:
        """Read everything (at takeover), the preemption service's records into
        :attr:`preemptions`. Unreadable records are logged and skipped."""
        records: list[LedgerRecord] = []
        sequence: SequenceRecord | None = None
        self._revisions.clear()
        self.preemptions = []
        self.outbox = []
        self.stopped = {}
        for entry in await self._ledger.entries():
            if entry.key.startswith(STOPPED_PREFIX):
                self._revisions[entry.key] = entry.revision
                try:
                    record = _stopped_decoder.decode(entry.value)
                    self.stopped[record.workload] = record.uid
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    log.error("ledger key %s is unreadable, skipped: %s", entry.key, exc)
                continue
            if entry.key.startswith(PREEMPTION_PREFIX):
                try:
                    self.preemptions.append(decode_preemption(entry.value))
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    log.error("ledger key %s is unreadable, skipped: %s", entry.key, exc)
                continue
            if entry.key.startswith(OUTBOX_PREFIX):
                self._revisions[entry.key] = entry.revision
                try:
                    self.outbox.append(_outbox_decoder.decode(entry.value))
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    log.error("ledger key %s is unreadable, skipped: %s", entry.key, exc)
                continue
            if "." in entry.key.partition("/")[0]:
                # Another service's key (e.g. "preemption.<ns>/<name>"): namespaces hold no dot.
                continue
            self._revisions[entry.key] = entry.revision
            try:
                if entry.key == SEQUENCE_KEY:
                    sequence = _sequence_decoder.decode(entry.value)
                else:
                    records.append(_record_decoder.decode(entry.value))
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.error("ledger key %s is unreadable, skipped: %s", entry.key, exc)
        self.outbox.sort(key=lambda e: (e.sequence, e.envelope.event_id))
        return sequence, records

    async def keep_out(self, stopped: Mapping[str, str]) -> None:
        """Make the kept-out records match ``stopped`` (workload key → uid): write the new and
        changed ones, delete those no longer kept out (revision-checked)."""
        writes = {k: uid for k, uid in stopped.items() if self.stopped.get(k) != uid}
        deletes = [k for k in self.stopped if k not in stopped]
        await asyncio.gather(
            *(
                self._write(stopped_key(k), _encoder.encode(StoppedRecord(workload=k, uid=uid)))
                for k, uid in writes.items()
            ),
            *(self._delete(stopped_key(k)) for k in deletes),
        )
        self.stopped = dict(stopped)

    async def stage(self, entries: Sequence[OutboxEntry]) -> None:
        """Write ``entries`` to the outbox (before their state changes; revision-checked)."""
        encoded = [(entry.key, _encoder.encode(entry)) for entry in entries]
        await asyncio.gather(*(self._write(key, value) for key, value in encoded))

    async def unstage(self, entries: Sequence[OutboxEntry]) -> None:
        """Delete outbox ``entries`` JetStream has stored. A failure other than a conflict is
        logged: the entry stays and is published once more (a duplicate JetStream drops)."""
        results = await asyncio.gather(
            *(self._delete(entry.key) for entry in entries), return_exceptions=True
        )
        for entry, result in zip(entries, results, strict=True):
            if isinstance(result, LeaseLost):
                raise result
            if isinstance(result, BaseException):
                if not isinstance(result, BusError):
                    raise result
                log.warning("outbox key %s not deleted (sent again later): %s", entry.key, result)

    async def claim(self, *, sequence: int, epoch: int) -> None:
        """Record ``sequence`` as handed out, if nobody else wrote since; else LeaseLost."""
        value = _encoder.encode(SequenceRecord(sequence=sequence, epoch=epoch))
        await self._write(SEQUENCE_KEY, value)

    async def commit(self, changes: Sequence[LedgerRecord | str]) -> None:
        """Apply ``changes`` in order per key (a record: write it; a key: delete it), keys
        concurrently, every write revision-checked."""
        by_key: dict[str, list[LedgerRecord | str]] = {}
        for change in changes:
            key = change if isinstance(change, str) else change.admitted.workload
            by_key.setdefault(key, []).append(change)
        await asyncio.gather(*(self._apply(key, chain) for key, chain in by_key.items()))

    async def _apply(self, key: str, chain: Sequence[LedgerRecord | str]) -> None:
        for change in chain:
            if isinstance(change, str):
                await self._delete(key)
            else:
                await self._write(key, _encoder.encode(change))

    async def _write(self, key: str, value: bytes) -> None:
        try:
            self._revisions[key] = await self._ledger.put(
                key, value, revision=self._revisions.get(key, 0)
            )
        except Conflict as exc:
            raise LeaseLost(f"ledger key {key} was written by another admission: {exc}") from exc

    async def _delete(self, key: str) -> None:
        revision = self._revisions.pop(key, None)
        if revision is None:
            return
        try:
            await self._ledger.delete(key, revision=revision)
        except Conflict as exc:
            raise LeaseLost(f"ledger key {key} was changed by another admission: {exc}") from exc
