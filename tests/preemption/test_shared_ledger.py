"""Admission and preemption share the ledger bucket without reading each other's keys wrong."""

import pytest

from tidegate.admission.ledger import AdmissionLedger, LedgerRecord
from tidegate.bus import BusSettings, LeaseLost, Ledger, connect
from tidegate.model import Admitted, Preempted, WorkloadKey
from tidegate.model.ledger import PreemptionRecord
from tidegate.preemption.ledger import PreemptionLedger


def record(sequence: int) -> PreemptionRecord:
    return PreemptionRecord(
        preemptor="team/serve",
        preemptor_uid="u-serve",
        request_sequence=sequence,
        decision=Preempted(preemptor="team/serve", preemptor_uid="u-serve", victims=["team/t"]),
        victims=[],
        recorded_at=1.0,
        event_id=f"e{sequence}",
    )


async def test_each_service_reads_its_own_keys_and_admissions_are_shared(
    nats_url: str, cluster_id: str
) -> None:
    bus = await connect(BusSettings(servers=(nats_url,)))
    try:
        await bus.ensure_layout(cluster_id)
        admission = await AdmissionLedger.open(bus, cluster_id)
        admitted = Admitted(
            workload="team/train",
            uid="u-train",
            queue="offline",
            sequence=3,
            epoch=1,
            assignments={},
        )
        await admission.load()
        await admission.claim(sequence=3, epoch=1)
        await admission.commit([LedgerRecord(admitted=admitted)])

        preemption = PreemptionLedger(await Ledger.open(bus, cluster_id))
        await preemption.load()
        await preemption.write(record(1))

        # admission's successor sees its own records only
        high, records = await AdmissionLedger(await Ledger.open(bus, cluster_id)).load()
        assert high is not None
        assert high.sequence == 3
        assert [r.admitted for r in records] == [admitted]

        # preemption's successor sees its record, and admission's admitted workloads
        successor = PreemptionLedger(await Ledger.open(bus, cluster_id))
        assert await successor.load() == [admitted]
        assert successor.records == {WorkloadKey("team/serve"): record(1)}

        # the successor now owns the key: the predecessor's next write is refused
        await successor.write(record(2))
        with pytest.raises(LeaseLost, match="another preemption instance"):
            await preemption.write(record(3))
        await successor.delete(WorkloadKey("team/serve"))
        assert await PreemptionLedger(await Ledger.open(bus, cluster_id)).load() == [admitted]
    finally:
        await bus.drain()
