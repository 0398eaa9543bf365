"""The admission service over a real nats-server resizes an admitted workload exactly once.

A workload grows (its admission replaced by a resize charging the delta), the leader stops, a
give-back request of the ungater arrives while nobody leads, the successor answers it once; a
copy of the request stored again later, and a third leader, change nothing.
"""

import asyncio

import msgspec

from tidegate.model import Admitted, DomainCount, ReplaceRequested, subjects

from .conftest import GPU, Harness
from .test_admission_service import small_cluster, workers, workload


def slots(admitted: Admitted) -> int:
    return sum(d.count for a in admitted.assignments.values() for d in a.domains)


def give_back(admitted: Admitted) -> ReplaceRequested:
    """The ungater's request: every slot of ``admitted`` is free."""
    domains = [
        DomainCount(values=list(d.values), count=d.count)
        for d in admitted.assignments["workers"].domains
    ]
    return ReplaceRequested(
        workload=admitted.workload,
        uid=admitted.uid,
        admitted_sequence=admitted.sequence,
        lost={"workers": domains},
        give_back=True,
    )


async def test_a_resize_is_applied_once_across_leaders(harness: Harness) -> None:
    await small_cluster(harness)
    await harness.start_admission(lease_holder="first")
    web = workload("web", workers(2, 4))
    await harness.workload(web)
    await harness.until(lambda: harness.of(Admitted, "ns/web"), what="the admission")
    grown_state = msgspec.structs.replace(web, podsets=[workers(4, 4)])
    await harness.workload(grown_state)
    await harness.until(lambda: len(harness.of(Admitted, "ns/web")) == 2, what="the growth")
    first, grown = harness.of(Admitted, "ns/web")
    assert isinstance(first, Admitted)
    assert isinstance(grown, Admitted)
    assert grown.replaces == first.sequence
    assert grown.resized
    assert slots(grown) == 4
    assert grown.charged[GPU] == 16

    service, task = harness.services.running.pop()
    service.request_stop()
    assert await asyncio.wait_for(task, 10) == 0

    # Nobody leads: the workload shrinks to one pod and the ungater gives its free slots back.
    await harness.workload(msgspec.structs.replace(web, podsets=[workers(1, 4)]))
    subject = subjects.decision(harness.cluster, "replace-requested", "ns", "web")
    request = give_back(grown)
    await harness.publish(subject, request, event_id="ungater-giveback-1")
    await harness.start_admission(lease_holder="second")
    await harness.until(lambda: len(harness.of(Admitted, "ns/web")) == 3, what="the shrink")
    shrunk = harness.of(Admitted, "ns/web")[2]
    assert isinstance(shrunk, Admitted)
    assert shrunk.replaces == grown.sequence
    assert slots(shrunk) == 1
    assert shrunk.charged[GPU] == 4

    # A copy of the request stored later (after the duplicate window: another event id) is
    # about an admission that is no longer in force: nothing happens.
    await harness.publish(subject, request, event_id="ungater-giveback-1-again")
    service, task = harness.services.running.pop()
    service.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    await harness.start_admission(lease_holder="third")
    await asyncio.sleep(1.0)
    assert len(harness.of(Admitted, "ns/web")) == 3
    assert len({a.sequence for a in harness.of(Admitted, "ns/web")}) == 3  # type: ignore[attr-defined]
