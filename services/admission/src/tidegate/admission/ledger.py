"""The admission ledger: what is admitted, and the outbox of decisions not yet stored.

Every record's schema is :mod:`tidegate.model.ledger` (the preemption service reads admission's
records, and admission the preemption service's, through it). One key per admitted workload
(its key ``namespace/name``) holds a :class:`LedgerRecord`: the
admitted decision as published and what it takes on each node (the successor re-applies that
as overlay until the capacity view reports it). The key ``sequence`` holds the highest decision
sequence handed out and the epoch that did it. One key per workload kept out on a decision's
word only (``stopped.<namespace>.<name>``, a :class:`StoppedRecord`: an aborted preemption
victim, or one another service released as finished) keeps a successor from admitting it
again; it is deleted once the workload is deleted or re-created.

**The outbox.** Every decision is first written to the outbox as an :class:`OutboxEntry`
(subject and envelope, byte for byte what is published), the decisions of one commit together
in as few keys as fit (``outbox.<event id of the first>``, an :class:`OutboxChunk` of at most
:data:`OUTBOX_CHUNK_BYTES`, so a commit costs one write, not one per decision); then their
state changes are made (an admission's key written, a release's key deleted), then they are
published; once JetStream has stored every decision of a key, the key is deleted. A decision whose publish failed stays
in the outbox and is published again, by the same event id (``Nats-Msg-Id``, so JetStream
drops a copy it already stored), by this leader on its next tick or by a successor at
takeover: nothing is re-published by comparing sequences to a watermark. An entry whose state
change was never made (a crash in between) is dropped instead (:func:`deliverable`): the
decision was not committed, and the successor decides again. So is one whose subject already
ends with it or with a later decision
(:func:`tidegate.model.ledger.stored_or_superseded`): its key outlived its
publish, and a copy stored now would follow the newer decision.

The leader writes through its ledger :class:`~tidegate.bus.Fence` (claimed at takeover): an
instance that is no longer the leader cannot write any key once its successor has claimed
(JetStream refuses it) and stops (:class:`tidegate.bus.LeaseLost`). Without a fence every
write names the revision it expects instead. A batch of decisions is committed as: claim the
sequence, stage the outbox entries, write or delete the workload keys, publish, unstage.
"""

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Final

import msgspec

from tidegate.bus import Bus, BusError, Conflict, Fence, LeaseLost, Ledger
from tidegate.model import Admitted, Released
from tidegate.model.ledger import (
    OUTBOX_PREFIX,
    PREEMPTION_PREFIX,
    SEQUENCE_KEY,
    STOPPED_PREFIX,
    LedgerRecord,
    OutboxChunk,
    OutboxEntry,
    PreemptionRecord,
    SequenceRecord,
    StoppedRecord,
    decode_admission,
    decode_preemption,
    encode_record,
    stopped_key,
)

__all__ = [
    "OUTBOX_CHUNK_BYTES",
    "AdmissionLedger",
    "LedgerRecord",
    "OutboxChunk",
    "OutboxEntry",
    "SequenceRecord",
    "StoppedRecord",
    "chunks",
    "deliverable",
]

log = logging.getLogger(__name__)

OUTBOX_CHUNK_BYTES: Final = 256 * 1024
"""Largest outbox value written (well below NATS's default 1 MiB maximum payload)."""


def chunks(entries: Sequence[OutboxEntry], *, limit: int = OUTBOX_CHUNK_BYTES) -> list[OutboxChunk]:
    """``entries`` in order, cut into chunks whose encoded entries stay within ``limit``
    bytes (an entry larger than that gets a chunk of its own)."""
    out: list[OutboxChunk] = []
    current: list[OutboxEntry] = []
    size = 0
    for entry in entries:
        length = len(encode_record(entry)) + 1
        if current and size + length > limit:
            out.append(OutboxChunk(entries=current))
            current, size = [], 0
        current.append(entry)
        size += length
    if current:
        out.append(OutboxChunk(entries=current))
    return out


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


_outbox_decoder = msgspec.json.Decoder(OutboxChunk)
_stopped_decoder = msgspec.json.Decoder(StoppedRecord)
_sequence_decoder = msgspec.json.Decoder(SequenceRecord)


class AdmissionLedger:
    """The ledger with the revisions this leader last saw; every write fenced (the service) or,
    without a fence (tools, tests), revision-checked."""

    def __init__(self, ledger: Ledger, *, fence: Fence | None = None) -> None:
        """Wrap an opened :class:`tidegate.bus.Ledger`. With ``fence`` (claimed on the ledger
        bucket at takeover) every write is fenced instead of revision-checked: JetStream
        stores it only while this leader's claim is the newest, so a deposed leader writes
        nothing, whichever key (docs/architecture.md, Fencing)."""
        self._ledger = ledger
        self._fence = fence
        self._revisions: dict[str, int] = {}
        self.preemptions: list[PreemptionRecord] = []
        """The preemption service's records as of the last :meth:`load` (read, never written)."""
        self.outbox: list[OutboxEntry] = []
        """The outbox as of the last :meth:`load`, in decision order."""
        self._chunk_of: dict[str, str] = {}
        """Event id of a staged decision → the outbox key holding it."""
        self._waiting: dict[str, set[str]] = {}
        """Outbox key → event ids of its decisions not yet stored on the stream."""
        self.stopped: dict[str, str] = {}
        """Kept-out workloads (key → uid) as stored: loaded, then kept by :meth:`keep_out`."""

    @classmethod
    async def open(cls, bus: Bus, cluster: str, *, fence: Fence | None = None) -> "AdmissionLedger":
        """The ledger of ``cluster`` (written through ``fence`` when given)."""
        return cls(await Ledger.open(bus, cluster), fence=fence)

    async def load(self) -> tuple[SequenceRecord | None, list[LedgerRecord]]:
        """Read everything (at takeover), the preemption service's records into
        :attr:`preemptions`. Unreadable records are logged and skipped."""
        records: list[LedgerRecord] = []
        sequence: SequenceRecord | None = None
        self._revisions.clear()
        self.preemptions = []
        self.outbox = []
        self._chunk_of.clear()
        self._waiting.clear()
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
                    chunk = _outbox_decoder.decode(entry.value)
                    self._register(entry.key, chunk)
                    self.outbox.extend(chunk.entries)
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
                    records.append(decode_admission(entry.value))
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
                self._write(stopped_key(k), encode_record(StoppedRecord(workload=k, uid=uid)))
                for k, uid in writes.items()
            ),
            *(self._delete(stopped_key(k)) for k in deletes),
        )
        self.stopped = dict(stopped)

    async def stage(self, entries: Sequence[OutboxEntry]) -> None:
        """Write ``entries`` to the outbox (before their state changes; revision-checked), as
        few keys as fit (:func:`chunks`)."""
        writes = []
        for chunk in chunks(entries):
            key = OUTBOX_PREFIX + chunk.entries[0].envelope.event_id
            self._register(key, chunk)
            writes.append(self._write(key, encode_record(chunk)))
        await asyncio.gather(*writes)

    async def unstage(self, entries: Sequence[OutboxEntry]) -> None:
        """Mark ``entries`` done (stored on the stream, or dropped as never committed) and
        delete the outbox keys all of whose decisions are done. A failure other than a
        conflict is logged: the key stays and its decisions are published once more at the
        next takeover (copies that JetStream, or else every consumer, ignores)."""
        done: list[str] = []
        for entry in entries:
            key = self._chunk_of.pop(entry.envelope.event_id, None)
            waiting = self._waiting.get(key) if key is not None else None
            if key is None or waiting is None:
                continue
            waiting.discard(entry.envelope.event_id)
            if not waiting:
                del self._waiting[key]
                done.append(key)
        results = await asyncio.gather(*(self._delete(key) for key in done), return_exceptions=True)
        for key, result in zip(done, results, strict=True):
            if isinstance(result, LeaseLost):
                raise result
            if isinstance(result, BaseException):
                if not isinstance(result, BusError):
                    raise result
                log.warning("outbox key %s not deleted (sent again later): %s", key, result)

    def _register(self, key: str, chunk: OutboxChunk) -> None:
        ids = {entry.envelope.event_id for entry in chunk.entries}
        self._waiting[key] = ids
        for event_id in ids:
            self._chunk_of[event_id] = key

    async def claim(self, *, sequence: int, epoch: int) -> None:
        """Record ``sequence`` as handed out, if nobody else wrote since; else LeaseLost."""
        value = encode_record(SequenceRecord(sequence=sequence, epoch=epoch))
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
                await self._write(key, encode_record(change))

    async def _write(self, key: str, value: bytes) -> None:
        if self._fence is not None:
            self._revisions[key] = await self._ledger.put(key, value, fence=self._fence)
            return
        try:
            self._revisions[key] = await self._ledger.put(
                key, value, revision=self._revisions.get(key, 0)
            )
        except Conflict as exc:
            raise LeaseLost(f"ledger key {key} was written by another admission: {exc}") from exc

    async def _delete(self, key: str) -> None:
        # The revision is forgotten only once the delete is stored: a delete that failed (a
        # BusError; the commit is tried again) must be sent again, not skipped as done.
        revision = self._revisions.get(key)
        if revision is None:
            return
        if self._fence is not None:
            await self._ledger.delete(key, fence=self._fence)
        else:
            try:
                await self._ledger.delete(key, revision=revision)
            except Conflict as exc:
                raise LeaseLost(
                    f"ledger key {key} was changed by another admission: {exc}"
                ) from exc
        self._revisions.pop(key, None)
