"""A preemption whose decision is out is evicted to the end, even if its preemptor is deleted."""

import asyncio
from pathlib import Path

from tidegate.kube import DEPLOYMENTS

from .conftest import NAMESPACE, Harness
from .test_preemption_service import evicted_record, gone, published_not_evicted


async def test_a_record_with_unfinished_evictions_outlives_its_deleted_preemptor(
    harness: Harness, tmp_path: Path
) -> None:
    h = harness
    # The leader records and publishes the preemption but cannot reach the API server to evict.
    original, first, _ = await published_not_evicted(h, tmp_path)
    await h.kube.delete(DEPLOYMENTS, "serve", namespace=NAMESPACE, propagation="Background")
    await h.until(lambda: h.workload("serve") is None, what="the preemptor's deletion on the bus")
    await asyncio.sleep(2.0)  # ten reconcile rounds of the leader, which sees the preemptor gone
    unfinished = await h.record("serve")
    assert unfinished is not None, "a record with unfinished evictions was dropped"
    assert not unfinished.evicted

    # A leader that can reach the API server evicts the victim to the end, then drops the record.
    assert await h.stop(first) == 0
    await h.start_preemption()
    await h.until_async(lambda: gone(h, original), what="every original pod gone")

    async def dropped() -> bool:
        return await h.record("serve") is None and await evicted_record(h) is None

    await h.until_async(dropped, what="the record dropped once its evictions finished")
