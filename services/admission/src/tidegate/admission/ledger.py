"""The admission ledger: what is admitted, kept in a KV bucket so a successor can continue.

One key per admitted workload (its key ``namespace/name``) holds a :class:`LedgerRecord`: the
admitted decision as published and what it takes on each node (the successor re-applies that
as overlay until the capacity view reports it). The key ``sequence`` holds the highest decision
sequence handed out and the epoch that did it.

Every write names the revision it expects, so an instance that is no longer the leader cannot
overwrite what the new leader wrote: its write fails with a conflict and it stops
(:class:`tidegate.bus.LeaseLost`). A batch of decisions is committed as: claim the sequence
(the fence), write or delete the workload keys, then publish. A crash before the publish loses
nothing: the successor re-publishes admissions the capacity view has not applied yet (the
same event ids, so JetStream drops what was already stored).
"""

import asyncio
import logging
from collections.abc import Sequence
from typing import Final

import msgspec

from tidegate.admission.nominations import (
    PREEMPTION_PREFIX,
    PreemptionRecord,
    decode_preemption,
)
from tidegate.bus import Bus, Conflict, LeaseLost, Ledger
from tidegate.model import Admitted, Resources

log = logging.getLogger(__name__)

SEQUENCE_KEY: Final = "sequence"
"""Ledger key of the sequence high-water mark (workload keys always hold a ``/``)."""


class LedgerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the ledger holds for one admitted workload."""

    admitted: Admitted
    node_usage: dict[str, Resources] = msgspec.field(default_factory=dict)


class SequenceRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The highest decision sequence handed out, and by which leader epoch."""

    sequence: int
    epoch: int


_record_decoder = msgspec.json.Decoder(LedgerRecord)
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
        for entry in await self._ledger.entries():
            if entry.key.startswith(PREEMPTION_PREFIX):
                try:
                    self.preemptions.append(decode_preemption(entry.value))
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
        return sequence, records

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
