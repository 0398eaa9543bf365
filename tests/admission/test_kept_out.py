"""An aborted preemption victim stays out across any leader change.

The fact is in the ledger, not only in the leader's memory (and, while the nomination lasts, in
the preemption service's record): otherwise a successor taking over after the nomination timed
out would admit the suspended Job again and reserve room for pods that never come.
"""

import asyncio

from tidegate.bus import Ledger
from tidegate.model import Admitted, QueueConfig, Released, subjects

from .conftest import Harness
from .test_admission_service import inference_needs_the_victims_room, victim_aborted_for_serve

NOMINATION_TIMEOUT = 1.0


async def test_an_aborted_victim_is_not_admitted_by_a_successor_past_the_nomination_timeout(
    harness: Harness,
) -> None:
    await harness.topology()
    await harness.node("n1", "r1")
    await harness.queue(QueueConfig(name="q"))
    first = await harness.start_admission(nomination_timeout_seconds=NOMINATION_TIMEOUT)
    await inference_needs_the_victims_room(harness)
    await harness.delete_workload("ns", "serve")  # nothing waits for the room any more
    preempted = victim_aborted_for_serve()
    await harness.publish(subjects.decision(harness.cluster, "preempted", "ns", "serve"), preempted)
    await harness.until(lambda: harness.of(Released, "ns/victim"), what="the victim released")
    (released,) = harness.of(Released, "ns/victim")
    assert isinstance(released, Released)

    await harness.services.stop(first)
    await asyncio.sleep(NOMINATION_TIMEOUT * 2)  # past the nomination timeout
    await harness.start_admission(nomination_timeout_seconds=NOMINATION_TIMEOUT)
    # The victim's pods are gone: n1 is free again, and the successor runs its cycles.
    await harness.node("n1", "r1", free_gpus=8, applied=released.sequence)
    await asyncio.sleep(2.0)
    assert len(harness.of(Admitted, "ns/victim")) == 1, "the aborted victim was admitted again"
    ledger = await Ledger.open(harness.bus, harness.cluster)
    assert await ledger.get("stopped.ns.victim") is not None

    # Deleting it forgets it: the record goes, so a re-created workload is admitted.
    await harness.delete_workload("ns", "victim")

    async def forgotten() -> bool:
        return await ledger.get("stopped.ns.victim") is None

    deadline = asyncio.get_running_loop().time() + 15
    while not await forgotten():
        harness.services.check()
        assert asyncio.get_running_loop().time() < deadline, "the kept-out record stayed"
        await asyncio.sleep(0.1)
