"""The preemption service's part of the ledger bucket, and its reading of admission's part.

The ledger KV bucket (``tidegate-<cluster>-ledger``) is shared: admission keeps one key per
admitted workload (``<namespace>/<name>``) and the key ``sequence``; this service keeps one key
per preemptor with a preemption in flight (``preemption.<namespace>/<name>``). Neither writes
the other's keys; both read them through the one schema, :mod:`tidegate.model.ledger`.

A preemption is committed all-or-nothing: before anything is published or evicted, its
:class:`~tidegate.model.ledger.PreemptionRecord` is written (the ``preempted`` decision, and
every victim's pods and mode); then the decision is published and the record marked
``published`` — before the first eviction, so that from then on nobody treats the victims'
admissions as in force; once every pod of every victim is gone or evicted it is marked
``evicted``. A service that dies in between finds the record and finishes it
(:mod:`.preempter`). The record stays while its nomination holds.

The leading instance writes through its ledger :class:`~tidegate.bus.Fence`: JetStream stores
a write only while this instance's claim on the fence marker (``fence.preemption``) is the
newest, so once a successor has claimed it, every write of a deposed instance — a new record,
an update, a delete — is refused and it stops (:class:`tidegate.bus.LeaseLost`). Without a
fence (tools, tests) every write names the revision this instance last saw instead
(create-only for a new key), which protects existing keys only.

At takeover the service also reads admission's records, for the workloads admitted longer ago
than the decision stream keeps (7 days by default).
"""

import logging

import msgspec

from tidegate.bus import Conflict, Fence, LeaseLost, Ledger
from tidegate.model import Admitted, WorkloadKey
from tidegate.model.ledger import (
    PreemptionRecord,
    decode_admission,
    decode_preemption,
    encode_record,
    preemption_key,
    preemptor_of,
)

log = logging.getLogger(__name__)


class PreemptionLedger:
    """Preemption records by preemptor, mirrored in memory, written with revision checks."""

    def __init__(self, ledger: Ledger, *, fence: Fence | None = None) -> None:
        """Wrap an opened :class:`tidegate.bus.Ledger`; write through ``fence`` (claimed on
        the ledger bucket) when given."""
        self._ledger = ledger
        self._fence = fence
        self._revisions: dict[WorkloadKey, int] = {}
        self.records: dict[WorkloadKey, PreemptionRecord] = {}
        """The records as last read or written by this instance."""

    async def load(self) -> list[Admitted]:
        """Read every preemption record into :attr:`records`; return admission's admitted
        workloads. Unreadable values are logged and skipped."""
        self.records.clear()
        self._revisions.clear()
        admitted: list[Admitted] = []
        for entry in await self._ledger.entries():
            preemptor = preemptor_of(entry.key)
            try:
                if preemptor is not None:
                    self.records[preemptor] = decode_preemption(entry.value)
                    self._revisions[preemptor] = entry.revision
                elif "/" in entry.key:
                    admitted.append(decode_admission(entry.value).admitted)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.error("ledger key %s is unreadable, skipped: %s", entry.key, exc)
        return admitted

    async def write(self, record: PreemptionRecord) -> None:
        """Store ``record`` under its preemptor, if nobody else wrote since; else LeaseLost."""
        key = WorkloadKey(record.preemptor)
        if self._fence is not None:
            self._revisions[key] = await self._ledger.put(
                preemption_key(key), encode_record(record), fence=self._fence
            )
            self.records[key] = record
            return
        try:
            self._revisions[key] = await self._ledger.put(
                preemption_key(key), encode_record(record), revision=self._revisions.get(key, 0)
            )
        except Conflict as exc:
            raise LeaseLost(
                f"ledger key {preemption_key(key)} was written by another preemption instance: {exc}"
            ) from exc
        self.records[key] = record

    async def delete(self, preemptor: WorkloadKey) -> None:
        """Remove the record of ``preemptor`` (only the revision this instance wrote)."""
        revision = self._revisions.pop(preemptor, None)
        self.records.pop(preemptor, None)
        if revision is None:
            return
        if self._fence is not None:
            await self._ledger.delete(preemption_key(preemptor), fence=self._fence)
            return
        try:
            await self._ledger.delete(preemption_key(preemptor), revision=revision)
        except Conflict as exc:
            raise LeaseLost(
                f"ledger key {preemption_key(preemptor)} was changed by another preemption "
                f"instance: {exc}"
            ) from exc
