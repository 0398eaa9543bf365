"""Kueue-like queue metrics of the admission service, scraped over HTTP like Prometheus does.

A leader reports pending workloads by queue and reason, quota and usage per resource and
card model, the wait from creation to first admission and evictions; a standby reports the
same names with no samples, until it takes over.
"""

import asyncio
import time
from collections.abc import Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tidegate.admission.config import Settings
from tidegate.model import Admitted, NodeState, Preempted, QueueConfig, Released, subjects
from tidegate.runtime import Service

from .conftest import GPU, Harness
from .test_admission_service import workers, workload

H200 = "NVIDIA-H200"
GPU_PRODUCT = "nvidia.com/gpu.product"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(service: Service[Settings]) -> tuple[str, Samples]:
    """The service's /metrics text and its samples by (name, labels)."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{service.http_port}/metrics") as response,
    ):
        assert response.status == 200
        text = await response.text()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return text, samples


async def scrape_until(
    service: Service[Settings], check: Callable[[Samples], bool], *, what: str
) -> Samples:
    """Scrape until ``check`` holds (within 15 s)."""
    deadline = time.monotonic() + 15
    while True:
        _, samples = await scrape(service)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {samples}"
        await asyncio.sleep(0.1)


def at(samples: Samples, name: str, **labels: str) -> float | None:
    """One sample's value, None when absent."""
    return samples.get((name, frozenset(labels.items())))


def named(samples: Samples, name: str) -> list[float]:
    """Every sample of one name."""
    return [value for (sample, _), value in samples.items() if sample == name]


async def h200_cluster(harness: Harness) -> None:
    """Two racks of two 8-GPU H200 nodes; queue q (24 GPUs, 16 H200 cards) and queue small."""
    await harness.topology()
    for name, rack in (("n1", "r1"), ("n2", "r1"), ("n3", "r2"), ("n4", "r2")):
        node = NodeState(name=name, labels={GPU_PRODUCT: H200}, allocatable={"cpu": 64_000})
        await harness.publish(subjects.node(harness.cluster, name), node)
        await harness.node(name, rack)
    await harness.queue(
        QueueConfig(
            name="q",
            quota={"cpu": 64_000, GPU: 24},
            card_quota={H200: 16, f"{H200}/mig-1g.18gb": 4},
        )
    )
    await harness.queue(QueueConfig(name="small", quota={GPU: 8}))


async def test_leader_reports_kueue_like_metrics_and_a_standby_none(harness: Harness) -> None:
    await h200_cluster(harness)
    leader = await harness.start_admission(lease_holder="leader")
    await harness.workload(
        workload("a", workers(2, 8), created_at=time.time() - 30, card_request={H200: 16})
    )
    await harness.until(lambda: harness.of(Admitted, "ns/a"), what="a admitted")
    for name, queue in (("b", "q"), ("c", None), ("d", "nope")):
        await harness.workload(workload(name, workers(2, 8), queue=queue))
    pending = "tidegate_pending_workloads"
    samples = await scrape_until(
        leader, lambda s: sum(named(s, pending)) == 3, what="three pending workloads"
    )
    assert at(samples, pending, queue="q", reason="ExceedsQuota") == 1
    assert at(samples, pending, queue="", reason="QueueNotFound") == 1
    assert at(samples, pending, queue="q", reason="WaitingForCapacity") == 0
    assert at(samples, pending, queue="small", reason="ExceedsQuota") == 0
    assert sum(named(samples, pending)) == 3

    usage, quota = "tidegate_queue_resource_usage", "tidegate_queue_resource_quota"
    assert at(samples, usage, queue="q", resource=GPU) == 16
    assert at(samples, usage, queue="q", resource="cpu") == 2  # cores, like Kueue
    assert at(samples, quota, queue="q", resource="cpu") == 64
    assert at(samples, quota, queue="q", resource=GPU) == 24
    assert at(samples, usage, queue="small", resource=GPU) == 0
    assert at(samples, quota, queue="small", resource="cpu") is None  # not limited
    cards, card_quota = "tidegate_queue_card_usage", "tidegate_queue_card_quota"
    assert at(samples, cards, queue="q", card=H200) == 16
    assert at(samples, cards, queue="q", card=f"{H200}/mig-1g.18gb") == 0
    assert at(samples, card_quota, queue="q", card=H200) == 16

    wait = "tidegate_admission_wait_time_seconds"
    assert at(samples, f"{wait}_count", queue="q") == 1
    assert at(samples, f"{wait}_bucket", queue="q", le="16.0") == 0
    assert at(samples, f"{wait}_bucket", queue="q", le="32.0") == 1

    # A standby: the same names, no samples.
    standby = await harness.start_admission(lease_holder="standby")
    text, standby_samples = await scrape(standby)
    for name in (pending, usage, quota, cards, card_quota):
        assert f"# TYPE {name} gauge" in text
        assert not named(standby_samples, name)
    assert f"# TYPE {wait} histogram" in text
    assert not named(standby_samples, f"{wait}_count")

    # a is preempted: one eviction; it is admitted again, which is not a first admission.
    preempted = Preempted(preemptor="ns/infer", preemptor_uid="uid-infer", victims=["ns/a"])
    await harness.publish(subjects.decision(harness.cluster, "preempted", "ns", "infer"), preempted)
    await harness.until(lambda: len(harness.of(Admitted, "ns/a")) == 2, what="a admitted again")
    released = harness.of(Released, "ns/a")
    assert [r.reason for r in released if isinstance(r, Released)] == ["Evicted"]
    _, samples = await scrape(leader)
    evicted = "tidegate_evicted_workloads_total"
    assert at(samples, evicted, queue="q", reason="Preempted") == 1
    assert at(samples, f"{wait}_count", queue="q") == 1

    # The leader stops: the standby takes over and reports what it now decides on.
    assert await harness.services.stop(leader) == 0

    samples = await scrape_until(
        standby,
        lambda s: at(s, pending, queue="q", reason="ExceedsQuota") == 1,
        what="the standby reporting after its takeover",
    )
    assert at(samples, usage, queue="q", resource=GPU) == 16
    assert at(samples, cards, queue="q", card=H200) == 16


async def test_queue_tree_gauges_carry_kueue_names_and_what_is_borrowed(harness: Harness) -> None:
    """Queues a and b share cohort research: a's 12-GPU gang borrows 4 of b's idle GPUs, and
    the Kueue-named tree gauges say so, per queue and per cohort (from the tree's report)."""
    await h200_cluster(harness)
    await harness.queue(
        QueueConfig(name="a", parent="research", nominal={GPU: 8}, borrowing_limit={GPU: 8})
    )
    await harness.queue(
        QueueConfig(
            name="b",
            parent="research",
            nominal={GPU: 8},
            lending_limit={GPU: 6},
            card_nominal={H200: 8},
        )
    )
    leader = await harness.start_admission(lease_holder="leader")
    await harness.workload(workload("g", workers(2, 6), queue="a"))
    await harness.until(lambda: harness.of(Admitted, "ns/g"), what="g admitted")
    borrowed = "tidegate_cluster_queue_resource_borrowed"
    samples = await scrape_until(
        leader, lambda s: bool(named(s, borrowed)), what="a borrowing reported"
    )
    a = {"cohort": "research", "cluster_queue": "a", "flavor": "", "resource": GPU}
    b = {"cohort": "research", "cluster_queue": "b", "flavor": "", "resource": GPU}
    assert at(samples, "tidegate_cluster_queue_nominal_quota", **a) == 8
    assert at(samples, "tidegate_cluster_queue_borrowing_limit", **a) == 8
    assert at(samples, "tidegate_cluster_queue_lending_limit", **a) is None  # none set
    assert at(samples, "tidegate_cluster_queue_lending_limit", **b) == 6
    assert at(samples, borrowed, **a) == 4
    assert at(samples, borrowed, **b) is None
    b_cards = {**b, "flavor": H200, "resource": "cards"}
    assert at(samples, "tidegate_cluster_queue_nominal_quota", **b_cards) == 8
    share = "tidegate_cluster_queue_weighted_share"
    # a borrows 4 of the 8 + 6 the cohort can lend: 285 thousandths at weight 1.
    assert at(samples, share, cohort="research", cluster_queue="a") == 4 * 1000 // 14
    assert at(samples, share, cohort="research", cluster_queue="b") == 0
    research = {"cohort": "research", "flavor": "", "resource": GPU}
    assert at(samples, "tidegate_cohort_resource_usage", **research) == 12
    assert at(samples, "tidegate_cohort_subtree_quota", **research) == 14
    assert at(samples, "tidegate_cohort_weighted_share", cohort="research") == 0  # a root
    # Queues outside any tree have no tree gauges.
    assert not [
        k
        for k in samples
        if k[0].startswith("tidegate_cluster_") and ("cluster_queue", "q") in k[1]
    ]
