"""Queues and queue names of other systems, through the whole system on the simulator.

A Job written for KAI-Scheduler — labelled only ``kai.scheduler/queue`` and queued in a KAI
Queue (``scheduling.run.ai``) — is admitted and runs; before the label was read, such a Job
waited with ``QueueNotFound`` (seen on a real control plane). A Kueue ClusterQueue whose
ResourceFlavor pins NVIDIA-H200 bounds the H200 cards of the Jobs queued in it.
"""

from pathlib import Path
from typing import Any

import pytest

from tidegate.cli.demo_trace import WorkloadEntry, workload_object
from tidegate.kube import (
    JOBS,
    KAI_QUEUES,
    KUEUE_CLUSTER_QUEUES,
    KUEUE_LOCAL_QUEUES,
    KUEUE_RESOURCE_FLAVORS,
)
from tidegate.model import Admitted, Pending

from .system import running_system

pytestmark = [pytest.mark.slow(15), pytest.mark.timeout(180)]

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
TIDEGATE_QUEUE = "tidegate.io/queue"


def job_labelled(entry: WorkloadEntry, label: str) -> Any:
    """The Job of ``entry`` naming its queue only with ``label`` (another system's queue label),
    for the test's namespace."""
    body: Any = workload_object(entry, "")
    del body["metadata"]["namespace"]
    for meta in (body["metadata"], body["spec"]["template"]["metadata"]):
        del meta["labels"][TIDEGATE_QUEUE]
        meta["labels"][label] = entry.queue
    return body


async def test_a_job_labelled_only_with_kais_queue_label_is_admitted_on_the_simulator(
    tmp_path: Path,
) -> None:
    async with running_system(
        tmp_path, nodes="1x1x2x8gpu", time_scale=0.02, namespace="kai"
    ) as system:
        await system.set_up(priority_classes={}, queues=[])
        await system.kube.create(
            KAI_QUEUES,
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": "research"},
                "spec": {"resources": {"gpu": {"quota": 16, "limit": 16, "overQuotaWeight": 1}}},
            },
        )
        entry = WorkloadEntry(
            name="train", queue="research", pods=2, requests={"cpu": "1", "nvidia.com/gpu": 8}
        )
        await system.kube.create(
            JOBS, job_labelled(entry, KAI_QUEUE_LABEL), namespace=system.namespace
        )
        await system.until(
            lambda: system.running("train", 2), within=60, what="the KAI-labelled Job running"
        )
        (admitted,) = system.of(Admitted, "train")
        assert admitted.queue == "research"
        assert admitted.charged["nvidia.com/gpu"] == 16
        assert [p.reason for p in system.of(Pending, "train")] == [], system.report()
        assert system.admission_problems() == [], system.report()


async def test_a_kueue_h200_flavor_bounds_the_h200_cards_of_jobs_in_its_cluster_queue(
    tmp_path: Path,
) -> None:
    """The ClusterQueue has 16 GPUs: 8 of a flavor pinning NVIDIA-H200 and 8 of one pinning no
    product. Two Jobs of 8 H200 cards each fit its 16 GPUs and the cluster's 16 free ones, but
    only one fits its 8 H200 cards: the other waits with CardQuotaExceeded."""
    async with running_system(
        tmp_path, nodes="1x1x2x8gpu", time_scale=0.02, namespace="kueue"
    ) as system:
        await system.set_up(priority_classes={}, queues=[])
        labels = {"nvidia.com/gpu.product": "NVIDIA-H200"}
        await system.kube.create(
            KUEUE_RESOURCE_FLAVORS, {"metadata": {"name": "h200"}, "spec": {"nodeLabels": labels}}
        )
        await system.kube.create(KUEUE_RESOURCE_FLAVORS, {"metadata": {"name": "any"}, "spec": {}})
        flavors = [
            {"name": name, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}
            for name in ("h200", "any")
        ]
        await system.kube.create(
            KUEUE_CLUSTER_QUEUES,
            {"metadata": {"name": "research"}, "spec": {"resourceGroups": [{"flavors": flavors}]}},
        )
        await system.kube.create(
            KUEUE_LOCAL_QUEUES,
            {"metadata": {"name": "team"}, "spec": {"clusterQueue": "research"}},
            namespace=system.namespace,
        )
        for name in ("first", "second"):
            entry = WorkloadEntry(
                name=name,
                queue="team",
                pods=2,
                requests={"cpu": "1", "nvidia.com/gpu": 4},
                template_annotations={"volcano.sh/card.name": "NVIDIA-H200"},
            )
            await system.kube.create(
                JOBS, job_labelled(entry, KUEUE_QUEUE_LABEL), namespace=system.namespace
            )
            if name == "first":
                await system.until(
                    lambda: system.running("first", 2), within=60, what="the first Job running"
                )
        await system.until(
            lambda: [p.reason for p in system.of(Pending, "second")][-1:] == ["CardQuotaExceeded"],
            within=30,
            what="the second Job waiting for H200 card quota",
        )
        (admitted,) = system.of(Admitted, "first")
        assert (admitted.queue, admitted.charged_cards) == ("research", {"NVIDIA-H200": 8})
        assert system.of(Admitted, "second") == [], system.report()
        assert system.admission_problems() == [], system.report()
