"""Queues and queue names of other systems, through the whole system on the simulator.

A Job written for KAI-Scheduler — labelled only ``kai.scheduler/queue`` and queued in a KAI
Queue (``scheduling.run.ai``) — is admitted and runs; before the label was read, such a Job
waited with ``QueueNotFound`` (seen on a real control plane).
"""

from pathlib import Path
from typing import Any

import pytest

from tidegate.cli.demo_trace import WorkloadEntry, workload_object
from tidegate.kube import JOBS, ResourceType
from tidegate.model import Admitted, Pending

from .system import running_system

pytestmark = [pytest.mark.slow(15), pytest.mark.timeout(180)]

KAI_QUEUES = ResourceType(
    group="scheduling.run.ai", version="v2", plural="queues", kind="Queue", namespaced=False
)
KAI_QUEUE_LABEL = "kai.scheduler/queue"
TIDEGATE_QUEUE = "tidegate.io/queue"


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
        body: Any = workload_object(
            WorkloadEntry(
                name="train", queue="research", pods=2, requests={"cpu": "1", "nvidia.com/gpu": 8}
            ),
            "",
        )
        del body["metadata"]["namespace"]
        for meta in (body["metadata"], body["spec"]["template"]["metadata"]):
            del meta["labels"][TIDEGATE_QUEUE]
            meta["labels"][KAI_QUEUE_LABEL] = "research"
        await system.kube.create(JOBS, body, namespace=system.namespace)
        await system.until(
            lambda: system.running("train", 2), within=60, what="the KAI-labelled Job running"
        )
        (admitted,) = system.of(Admitted, "train")
        assert admitted.queue == "research"
        assert admitted.charged["nvidia.com/gpu"] == 16
        assert [p.reason for p in system.of(Pending, "train")] == [], system.report()
        assert system.admission_problems() == [], system.report()
