"""The admission service over a real nats-server gives a finished workload's quota back.

The harness publishes workload states as the watcher would, with ``finished`` set once the
owner ran to the end, and reads admission's decisions from the decision stream.
"""

import asyncio

import msgspec

from tidegate.model import Admitted, Pending, Released

from .conftest import GPU, Harness, msg
from .test_admission_service import small_cluster, workers, workload

ONE_GANG_QUOTA = msg.queue_config("q", quota={"cpu": 100_000, GPU: 8})
"""A queue whose quota holds one 8-GPU gang."""


async def test_a_finished_workload_gives_its_quota_to_the_next_one_in_its_queue(
    harness: Harness,
) -> None:
    await small_cluster(harness, ONE_GANG_QUOTA)
    await harness.start_admission()
    train = workload("train", workers(1, 8), created_at=1)
    await harness.workload(train)
    await harness.workload(workload("next", workers(1, 8), created_at=2))
    await harness.until(lambda: harness.of(Pending, "ns/next"), what="next to wait on quota")
    (pending,) = harness.of(Pending, "ns/next")
    assert isinstance(pending, Pending)
    assert pending.reason == "ExceedsQuota"

    done = msgspec.structs.replace(train, finished="Completed")
    await harness.workload(done)
    await harness.until(lambda: harness.of(Admitted, "ns/next"), what="the quota given back")
    (released,) = harness.of(Released, "ns/train")
    assert isinstance(released, Released)
    assert (released.uid, released.queue, released.reason) == ("uid-train", "q", "Completed")
    assert released.message == "Job ns/train completed"
    # The watcher republishing it (a replay, another resourceVersion) releases nothing more,
    # and it is never admitted again.
    await harness.workload(msgspec.structs.replace(done, priority=1))
    await asyncio.sleep(0.5)
    assert len(harness.of(Released, "ns/train")) == 1
    assert len(harness.of(Admitted, "ns/train")) == 1


async def test_a_successor_releases_a_workload_that_failed_while_nobody_led_exactly_once(
    harness: Harness,
) -> None:
    await small_cluster(harness, ONE_GANG_QUOTA)
    first = await harness.start_admission(lease_holder="first")
    train = workload("train", workers(1, 8), created_at=1)
    await harness.workload(train)
    await harness.until(lambda: harness.of(Admitted, "ns/train"), what="the admission")
    assert await harness.services.stop(first) == 0

    # Nobody leads: the Job fails, and another waits for the quota it holds.
    await harness.workload(msgspec.structs.replace(train, finished="Failed"))
    await harness.workload(workload("next", workers(1, 8), created_at=2))
    second = await harness.start_admission(lease_holder="second")
    await harness.until(lambda: harness.of(Admitted, "ns/next"), what="the quota given back")
    (released,) = harness.of(Released, "ns/train")
    assert isinstance(released, Released)
    assert released.reason == "Failed"
    (admitted,) = harness.of(Admitted, "ns/train")
    assert isinstance(admitted, Admitted)
    assert released.sequence > admitted.sequence

    # A third leader (restarted from the same ledger and streams) releases nothing again.
    assert await harness.services.stop(second) == 0
    await harness.start_admission(lease_holder="third")
    await asyncio.sleep(0.5)
    assert len(harness.of(Released, "ns/train")) == 1
    assert len(harness.of(Admitted, "ns/train")) == 1
    assert len(harness.of(Admitted, "ns/next")) == 1
