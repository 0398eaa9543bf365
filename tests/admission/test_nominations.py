"""A new admission leader inherits the nominations of the preemption records in the ledger.

The harness plays the preemption service: it writes the record the way that service does
(with that service's own record type, so a format change there breaks this test), then
publishes the ``preempted`` decision.
"""

import asyncio
import signal
import time

from tidegate.bus import Ledger
from tidegate.model import (
    Admitted,
    PreemptRequested,
    QueueConfig,
    Released,
    subjects,
)
from tidegate.model.ledger import PreemptionRecord, VictimRecord, encode_record, preemption_key

from .conftest import Harness
from .test_admission_service import (
    inference_needs_the_victims_room,
    victim_aborted_for_serve,
    workers,
    workload,
)


async def test_a_new_leader_keeps_the_room_nominated_for_the_preemptor(harness: Harness) -> None:
    await harness.topology()
    await harness.node("n1", "r1")
    await harness.queue(QueueConfig(name="q"))
    first = await harness.spawn_admission("first")
    victim = await inference_needs_the_victims_room(harness, within=30)
    (request,) = harness.of(PreemptRequested, "ns/serve")
    assert isinstance(request, PreemptRequested)

    # The preemption service records the preemption, then publishes it.
    decision = victim_aborted_for_serve()
    now = time.time()
    record = PreemptionRecord(
        preemptor="ns/serve",
        preemptor_uid="uid-serve",
        request_sequence=request.sequence,
        decision=decision,
        victims=[VictimRecord(key="ns/victim", uid="uid-victim", mode="abort", owner_kind="Job")],
        recorded_at=now,
        event_id="preemption-test",
        published_at=now,
        evicted_at=now,
    )
    ledger = await Ledger.open(harness.bus, harness.cluster)
    await ledger.put(preemption_key("ns/serve"), encode_record(record), revision=0)
    await harness.publish(subjects.decision(harness.cluster, "preempted", "ns", "serve"), decision)
    await harness.until(lambda: harness.of(Released, "ns/victim"), what="the victim released")
    (released,) = harness.of(Released, "ns/victim")
    assert isinstance(released, Released)
    await asyncio.sleep(0.5)  # the first leader acknowledged the decision: not delivered again

    # The first leader dies; a standby takes over with the nomination in its memory only if it
    # read the record.
    first.signal(signal.SIGKILL)
    await first.wait()
    await harness.spawn_admission("second")
    # A higher-priority newcomer must not take the nominated room once the victim is gone.
    await harness.workload(workload("sneaky", workers(1, 8), priority=1000))
    await harness.node("n1", "r1", free_gpus=8, applied=released.sequence)
    await harness.until(
        lambda: harness.of(Admitted, "ns/serve"), within=30, what="the preemptor admitted"
    )
    (admitted,) = harness.of(Admitted, "ns/serve")
    assert isinstance(admitted, Admitted)
    assert admitted.epoch > victim.epoch  # decided by the new leader
    assert admitted.nominated_by == "ns/serve"
    assert harness.of(Admitted, "ns/sneaky") == []
    assert harness.of(Admitted, "ns/victim") == [victim]  # aborted: not admitted again
