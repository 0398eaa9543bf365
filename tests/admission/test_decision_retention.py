"""The decision stream stays proportional to live workloads.

The stream has no age limit (an admission lives as long as its workload); the admission
leader purges the decisions of a workload it has not known for
``decisions_kept_after_delete_seconds``. Here that is 1 s: a deleted workload's decisions
leave the stream while a live one's stay, and a fresh replay of the newest decision per
subject (what a restarted ungater or topology-cache reads) finds only the live one.
"""

import asyncio
import functools
import time

import msgspec

from tidegate.bus import Received, layout
from tidegate.model import Admitted, Released, WorkloadState, subjects
from tidegate.testing import following, until_async

from .conftest import Harness
from .test_admission_service import small_cluster, workers, workload


async def workloads_on_the_stream(harness: Harness) -> set[tuple[str, str]]:
    """The workloads the decision stream holds decisions about."""
    listed = await harness.bus.subjects_in(
        layout.decisions_stream(harness.cluster), subjects.decision_wildcard(harness.cluster)
    )
    return {w for s in listed if (w := subjects.decision_workload(s)) is not None}


async def admitted_then_deleted(harness: Harness, deleted: str, *alive: str) -> WorkloadState:
    """Admission with a 1 s retention swept every 0.2 s; ``deleted`` and ``alive`` admitted,
    then ``deleted`` deleted and released; its workload as first created."""
    await small_cluster(harness)
    await harness.start_admission(
        decisions_kept_after_delete_seconds=1.0, decisions_sweep_seconds=0.2
    )
    created = workload(deleted, workers(1, 8))
    for each in (created, *(workload(name, workers(1, 8)) for name in alive)):
        await harness.workload(each)
        await harness.until(
            functools.partial(harness.of, Admitted, f"ns/{each.name}"), within=30, what="admission"
        )
    await harness.delete_workload("ns", deleted)
    await harness.until(lambda: harness.of(Released, f"ns/{deleted}"), within=30, what="release")
    return created


async def test_a_deleted_workloads_decisions_are_purged_and_a_live_ones_kept(
    harness: Harness,
) -> None:
    await admitted_then_deleted(harness, "done", "alive")
    deleted_at = time.monotonic()

    async def purged() -> bool:
        return await workloads_on_the_stream(harness) == {("ns", "alive")}

    await until_async(purged, within=20, what="the deleted workload's decisions purged")
    assert time.monotonic() - deleted_at >= 1.0, "purged before the retention ran out"

    replayed: list[str] = []

    async def collect(received: Received) -> None:
        replayed.append(getattr(received.envelope.body, "workload", ""))

    async with following(
        harness.bus,
        stream=layout.decisions_stream(harness.cluster),
        subjects=[subjects.decision_wildcard(harness.cluster)],
        handler=collect,
        name="test-replay",
        replayed_within=5,
    ):
        pass
    assert set(replayed) == {"ns/alive"}, replayed


async def test_a_workload_created_again_under_its_name_keeps_its_decisions(
    harness: Harness,
) -> None:
    first = await admitted_then_deleted(harness, "again")
    await harness.workload(msgspec.structs.replace(first, uid="uid-again-2"))
    await harness.until(
        lambda: len(harness.of(Admitted, "ns/again")) == 2, within=30, what="admitted again"
    )
    for _ in range(10):  # 3 s: three times the retention, fifteen sweeps
        assert ("ns", "again") in await workloads_on_the_stream(harness)
        await asyncio.sleep(0.3)
