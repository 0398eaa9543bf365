"""Reservations over a real nats-server (docs/reservations.md): the admission service
publishes ``reserved`` for a big gang that fits nowhere, lets a short job backfill, keeps one
without a runtime off the reserved rack, takes the reservation over on failover, and drops it
(``Started``) once the gang is admitted."""

import asyncio
import time

import msgspec

from tidegate.model import (
    Admitted,
    Message,
    Pending,
    PodSetSpec,
    ReservationDropped,
    Reserved,
    TopologyRequest,
)

from .conftest import Harness
from .test_admission_service import small_cluster, workers, workload

HOUR = 3600.0


def last_sequence(decisions: list[Message]) -> int:
    return max((getattr(d, "sequence", 0) for d in decisions), default=0)


def nodes_of(admitted: Message) -> set[str]:
    assert isinstance(admitted, Admitted)
    return {d.values[-1] for a in admitted.assignments.values() for d in a.domains}


async def report(harness: Harness, used: dict[str, int]) -> None:
    """The topology-cache reports every node with ``used`` GPUs taken, having applied every
    decision published so far."""
    applied = last_sequence(harness.decisions)
    for name, rack in (("n1", "r1"), ("n2", "r1"), ("n3", "r2"), ("n4", "r2")):
        await harness.node(name, rack, free_gpus=8 - used.get(name, 0), applied=applied)


def _rack_gang() -> PodSetSpec:
    """Two 8-GPU pods that require one rack: a whole rack of this cluster."""
    return msgspec.structs.replace(
        workers(2, 8), topology=TopologyRequest(required="example.com/rack")
    )


async def test_a_big_gang_is_reserved_a_rack_others_backfill_and_it_starts_after_a_failover(
    harness: Harness,
) -> None:
    await small_cluster(harness)
    first = await harness.start_admission(lease_holder="first")
    start = time.time()
    g1 = workload("g1", workers(1, 8), created_at=start - 50, max_runtime_seconds=HOUR)
    g2 = workload("g2", workers(2, 8), created_at=start - 40, max_runtime_seconds=2 * HOUR)
    await harness.workload(g1)
    await harness.workload(g2)
    await harness.until(
        lambda: harness.of(Admitted, "ns/g1") and harness.of(Admitted, "ns/g2"), what="g1, g2"
    )
    assert nodes_of(harness.of(Admitted, "ns/g1")[0]) == {"n1"}
    await report(harness, {"n1": 8, "n3": 8, "n4": 8})

    big = workload("big", _rack_gang(), created_at=start - 30)
    await harness.workload(big)
    await harness.until(lambda: harness.of(Reserved, "ns/big"), what="the reservation")
    (reserved,) = harness.of(Reserved, "ns/big")
    assert isinstance(reserved, Reserved)
    assert (reserved.domain, reserved.nodes) == (["b1", "r1"], ["n1", "n2"])
    assert [w.workload for w in reserved.waits_for] == ["ns/g1"]

    # Failover: the successor takes the reservation over from the decision stream; its plan
    # is the same, so it publishes nothing new about it.
    assert await harness.services.stop(first) == 0
    await harness.start_admission(lease_holder="second")
    await asyncio.sleep(1.0)
    assert harness.of(Reserved, "ns/big") == [reserved]
    assert harness.of(ReservationDropped, "ns/big") == []

    # No runtime: kept off rack r1 though n2 is free. A short one backfills onto n2.
    await harness.workload(workload("long", workers(1, 8), created_at=start - 20))
    await harness.until(lambda: harness.of(Pending, "ns/long"), what="long to wait")
    (pending,) = harness.of(Pending, "ns/long")
    assert isinstance(pending, Pending)
    assert "reserved for ns/big" in pending.message
    short = workload("short", workers(1, 8), created_at=start - 10, max_runtime_seconds=600)
    await harness.workload(short)
    await harness.until(lambda: harness.of(Admitted, "ns/short"), what="short to backfill")
    assert nodes_of(harness.of(Admitted, "ns/short")[0]) == {"n2"}
    await report(harness, {"n1": 8, "n2": 8, "n3": 8, "n4": 8})

    # short and g1 end: the big gang starts on rack r1 and its reservation is dropped.
    await harness.workload(msgspec.structs.replace(short, finished="Completed"))
    await harness.workload(msgspec.structs.replace(g1, finished="Completed"))
    await report(harness, {"n3": 8, "n4": 8})
    await harness.until(lambda: harness.of(ReservationDropped, "ns/big"), what="the drop")
    (admitted,) = harness.of(Admitted, "ns/big")
    assert isinstance(admitted, Admitted)
    assert nodes_of(admitted) == {"n1", "n2"}
    (dropped,) = harness.of(ReservationDropped, "ns/big")
    assert isinstance(dropped, ReservationDropped)
    newest = harness.of(Reserved, "ns/big")[-1]  # re-planned when short took n2, maybe
    assert isinstance(newest, Reserved)
    assert (dropped.reason, dropped.reserved_sequence) == ("Started", newest.sequence)
    assert dropped.sequence > admitted.sequence
    assert harness.of(Admitted, "ns/long") == []


async def test_the_periodic_cycle_republishes_a_reservation_whose_gang_outlived_its_runtime(
    harness: Harness,
) -> None:
    """Nothing but time moves: g1, which the big gang's reservation waits for, declares two
    seconds and runs on. The service's periodic cycle republishes the reservation with the
    estimate moved one overrun step (three seconds), and nothing more within that step."""
    await small_cluster(harness)
    await harness.start_admission(reservation_overrun_seconds=3.0)
    start = time.time()
    g1 = workload("g1", workers(1, 8), created_at=start - 50, max_runtime_seconds=2.0)
    g2 = workload("g2", workers(2, 8), created_at=start - 40, max_runtime_seconds=HOUR)
    await harness.workload(g1)
    await harness.workload(g2)
    await harness.until(
        lambda: harness.of(Admitted, "ns/g1") and harness.of(Admitted, "ns/g2"), what="g1, g2"
    )
    await report(harness, {"n1": 8, "n3": 8, "n4": 8})
    await harness.workload(workload("big", _rack_gang(), created_at=start - 30))
    await harness.until(lambda: harness.of(Reserved, "ns/big"), what="the reservation")
    reserved = harness.of(Reserved, "ns/big")[0]
    assert isinstance(reserved, Reserved)
    assert [(w.workload, w.overdue) for w in reserved.waits_for] == [("ns/g1", False)]

    await harness.until(lambda: len(harness.of(Reserved, "ns/big")) == 2, what="a re-plan")
    moved = harness.of(Reserved, "ns/big")[1]
    assert isinstance(moved, Reserved)
    assert moved.domain == reserved.domain
    steps = (moved.expected_start - reserved.expected_start) / 3.0  # 1 unless a cycle was late
    assert steps >= 1
    assert abs(steps - round(steps)) < 1e-6
    assert [(w.workload, w.overdue) for w in moved.waits_for] == [("ns/g1", True)]
    assert "outlived its declared runtime" in moved.message
    # Within a step every tick plans the same: nothing is published twice for one estimate.
    await asyncio.sleep(max(moved.expected_start - time.time() - 0.5, 0.0))
    published = [r.expected_start for r in harness.of(Reserved, "ns/big")]
    assert len(published) == len(set(published))
