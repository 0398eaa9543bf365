"""The preemption service's part of the ledger bucket, and its reading of admission's part.

The ledger KV bucket (``tidegate-<cluster>-ledger``) is shared: admission keeps one key per
admitted workload (``<namespace>/<name>``) and the key ``sequence``; this service keeps one key
per preemptor with a preemption in flight (``preemption.<namespace>/<name>``, see
:mod:`.record`). Neither writes the other's keys.

The leading instance writes through its ledger :class:`~tidegate.bus.Fence`: JetStream stores
a write only while this instance's claim on the fence marker (``fence.preemption``) is the
newest, so once a successor has claimed it, every write of a deposed instance — a new record,
an update, a delete — is refused and it stops (:class:`tidegate.bus.LeaseLost`). Without a
fence (tools, tests) every write names the revision this instance last saw instead
(create-only for a new key), which protects existing keys only.

At takeover the service also reads admission's records, for the workloads admitted longer ago
than the decision stream keeps (7 days by default). Only the ``admitted`` field is read; other
fields of admission's records are ignored, so admission may add fields freely.
"""

import logging

import msgspec

from tidegate.bus import Conflict, Fence, LeaseLost, Ledger
from tidegate.model import Admitted, WorkloadKey
from tidegate.preemption.record import (
    PreemptionRecord,
    decode_record,
    encode_record,
    ledger_key,
    preemptor_of,
)

log = logging.getLogger(__name__)


class _AdmissionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The part of admission's ledger record this service reads."""

    admitted: Admitted


_admission_decoder = msgspec.json.Decoder(_AdmissionRecord)


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
                    self.records[preemptor] = decode_record(entry.value)
                    self._revisions[preemptor] = entry.revision
                elif "/" in entry.key:
                    admitted.append(_admission_decoder.decode(entry.value).admitted)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.error("ledger key %s is unreadable, skipped: %s", entry.key, exc)
        return admitted

    async def write(self, record: PreemptionRecord) -> None:
        """Store ``record`` under its preemptor, if nobody else wrote since; else LeaseLost."""
        key = WorkloadKey(record.preemptor)
        if self._fence is not None:
            self._revisions[key] = await self._ledger.put(
                ledger_key(key), encode_record(record), fence=self._fence
            )
            self.records[key] = record
            return
        try:
            self._revisions[key] = await self._ledger.put(
                ledger_key(key), encode_record(record), revision=self._revisions.get(key, 0)
            )
        except Conflict as exc:
            raise LeaseLost(
                f"ledger key {ledger_key(key)} was written by another preemption instance: {exc}"
            ) from exc
        self.records[key] = record

    async def delete(self, preemptor: WorkloadKey) -> None:
        """Remove the record of ``preemptor`` (only the revision this instance wrote)."""
        revision = self._revisions.pop(preemptor, None)
        self.records.pop(preemptor, None)
        if revision is None:
            return
        if self._fence is not None:
            await self._ledger.delete(ledger_key(preemptor), fence=self._fence)
            return
        try:
            await self._ledger.delete(ledger_key(preemptor), revision=revision)
        except Conflict as exc:
            raise LeaseLost(
                f"ledger key {ledger_key(preemptor)} was changed by another preemption "
                f"instance: {exc}"
            ) from exc
