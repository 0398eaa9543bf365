"""The whole tide, end to end: every service as a real process on a simulated cluster.

watcher, topology-cache, admission, preemption and ungater run as ``python -m tidegate.…``
processes against a real nats-server and the simulated cluster (scheduler, kubelets,
controllers, the admission gate). Nothing is played by the test: it only creates Kubernetes
objects and watches the bus and the API server.

A training Job fills the cluster; an inference Deployment of higher priority arrives; the
training Job is evicted whole, the inference pods run, the training Job waits in its queue
(it never preempts back) and is admitted again, whole, when the inference workload goes away.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tidegate.kube import DEPLOYMENTS, JOBS
from tidegate.model import (
    Admitted,
    Pending,
    PodState,
    Preempted,
    PreemptRequested,
    Released,
    WorkloadState,
)
from tidegate.testing import service_process
from tidegate.testing.manifests import Builders

from .conftest import (
    NAMESPACE,
    Harness,
    environment,
    inference_deployment,
    pod_template,
    training_deployment,
    training_job,
)

SERVICES = ("watcher", "topology_cache", "admission", "preemption", "ungater")


@contextlib.asynccontextmanager
async def every_service(h: Harness, logs: Path) -> AsyncIterator[None]:
    """Start the five services as processes, wait until all are ready, stop them at the end."""
    common = {
        "TIDEGATE_CLUSTER": h.cluster,
        "TIDEGATE_NATS_URL": h.nats_url,
        "TIDEGATE_LOG_LEVEL": "INFO",
        "TIDEGATE_KUBECONFIG": str(h.kubeconfig),
        "TIDEGATE_KUEUE_TOPOLOGY_VERSION": "v1alpha1",
        "TIDEGATE_ABSENT_RETRY_SECONDS": "0.5",
        "TIDEGATE_LEASE_TTL_SECONDS": "2",
        "TIDEGATE_CYCLE_TICK_SECONDS": "0.2",
        "TIDEGATE_RECONCILE_INTERVAL_SECONDS": "0.5",
        "TIDEGATE_BATCH_WINDOW_SECONDS": "0.05",
        "TIDEGATE_WEBHOOK": "off",
        "TIDEGATE_SHUTDOWN_GRACE_SECONDS": "2",
    }
    async with contextlib.AsyncExitStack() as stack:
        processes = [
            await stack.enter_async_context(service_process(name, common, logs=logs))
            for name in SERVICES
        ]
        async with aiohttp.ClientSession() as http:
            for process in processes:
                await process.ready(http)
        try:
            yield
        finally:
            for process in processes:
                process.signal()  # all at once; leaving the stack waits for each


@pytest.fixture
async def cluster(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """The simulated cluster and the bus with every service running as a process."""
    async with environment(tmp_path, nats_url, cluster_id) as h:
        h.plays_topology_cache = False
        async with every_service(h, tmp_path):
            yield h


def pods_of(h: Harness, workload: str) -> list[PodState]:
    return [
        m
        for m in h.state.values()
        if isinstance(m, PodState) and m.workload == f"{NAMESPACE}/{workload}"
    ]


def running(h: Harness, workload: str, count: int) -> list[PodState]:
    """The workload's pods if exactly ``count`` of them run and none is being deleted."""
    pods = [p for p in pods_of(h, workload) if not p.terminating]
    ok = len(pods) == count and all(p.phase == "Running" and p.node_name for p in pods)
    return pods if ok else []


def decisions_about(h: Harness, kind: type, workload: str) -> list[object]:
    key = f"{NAMESPACE}/{workload}"
    return [
        d
        for d in h.of(kind)
        if getattr(d, "workload", None) == key or getattr(d, "preemptor", None) == key
    ]


@pytest.mark.slow
async def test_inference_reclaims_a_training_job_that_comes_back_later(cluster: Harness) -> None:
    h = cluster
    await h.create(JOBS, training_job("train", pods=4))
    await h.until(lambda: running(h, "train", 4), within=30, what="the training Job running")
    first_run = {p.uid for p in running(h, "train", 4)}
    gang_nodes = {p.node_name for p in running(h, "train", 4)}

    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=2))
    await h.until(lambda: h.of(Preempted), within=30, what="a preemption")
    (preempted,) = h.of(Preempted)
    assert preempted.preemptor == f"{NAMESPACE}/serve"
    assert preempted.victims == [f"{NAMESPACE}/train"]
    assert decisions_about(h, PreemptRequested, "serve")

    # The inference pods run on the room the whole training gang left: the nodes nominated, or
    # others of the gang's whose capacity report reached admission first (all of them are free
    # once the whole gang is evicted).
    await h.until(lambda: running(h, "serve", 2), within=30, what="the inference pods running")
    serving = running(h, "serve", 2)
    assert set(preempted.nominated) <= gang_nodes
    assert {p.node_name for p in serving} <= gang_nodes
    (serve_admitted,) = decisions_about(h, Admitted, "serve")
    assert isinstance(serve_admitted, Admitted)
    assert serve_admitted.nominated_by == f"{NAMESPACE}/serve"

    # The training Job is evicted whole, released, and back in its queue with gated pods (the
    # last of its first pods may still be in their termination grace while serve runs).
    await h.until(
        lambda: not first_run & {p.uid for p in pods_of(h, "train")},
        within=30,
        what="every first pod of the training Job gone",
    )
    released = decisions_about(h, Released, "train")
    assert [r.reason for r in released if isinstance(r, Released)] == ["Evicted"]
    train_state = h.workload("train")
    assert isinstance(train_state, WorkloadState)

    def waiting_for_capacity() -> bool:
        pending = decisions_about(h, Pending, "train")
        return bool(pending) and getattr(pending[-1], "reason", "") == "WaitingForCapacity"

    await h.until(waiting_for_capacity, within=30, what="the training Job waiting in its queue")
    # No ping-pong: training never asks to preempt, and nothing is preempted again.
    assert decisions_about(h, PreemptRequested, "train") == []
    assert len(h.of(Preempted)) == 1

    # The tide goes out: the inference Deployment is deleted, the training Job comes back whole.
    await h.kube.delete(DEPLOYMENTS, "serve", namespace=NAMESPACE, propagation="Background")
    await h.until(lambda: running(h, "train", 4), within=40, what="the training Job re-admitted")
    assert len(decisions_about(h, Admitted, "train")) == 2
    assert not first_run & {p.uid for p in running(h, "train", 4)}
    assert len(h.of(Preempted)) == 1


async def job_status(h: Harness, name: str) -> dict[str, Any]:
    return dict((await h.kube.get(JOBS, name, namespace=NAMESPACE)).get("status") or {})


@pytest.mark.slow
async def test_a_plain_job_preempted_once_runs_again_at_once_and_does_not_fail(
    cluster: Harness,
) -> None:
    """8 evicted pods are 8 failures to the Job controller, past the default backoffLimit
    of 6: the Job would fail for good (and short of that, its replacements would wait out the
    pod failure backoff, up to 10 minutes). Suspended instead, it spends nothing."""
    h = cluster
    # A training Job as a new user writes it: not Indexed, no podFailurePolicy, the default
    # backoffLimit (6).
    plain = Builders(server_fields=False).job(
        "train",
        parallelism=8,
        completions=8,
        annotations={"tidegate.io/queue": "offline"},
        template=pod_template(queue="offline", priority_class="low", gpus=4),
    )
    await h.create(JOBS, plain)
    await h.until(lambda: running(h, "train", 8), within=30, what="the training Job running")
    first_run = {p.uid for p in running(h, "train", 8)}

    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=2))
    await h.until(lambda: h.of(Preempted), within=30, what="a preemption")
    await h.until(lambda: running(h, "serve", 2), within=30, what="the inference pods running")
    job = await h.kube.get(JOBS, "train", namespace=NAMESPACE)
    # Re-queued by suspending it: queued for tidegate, not stopped by someone else (evicted
    # pod by pod instead, its 8 failures would pass the backoffLimit of 6: Failed for good).
    assert job["spec"].get("suspend") is True, job.get("status")
    assert (
        job["metadata"]["annotations"]["tidegate.io/requeued"] == f"preempted by {NAMESPACE}/serve"
    )
    await h.until(
        lambda: (w := h.workload("train")) is not None and w.suspended and w.resume_on_admission,
        within=10,
        what="the training Job queued again",
    )

    await h.kube.delete(DEPLOYMENTS, "serve", namespace=NAMESPACE, propagation="Background")
    await h.until(
        lambda: len(decisions_about(h, Admitted, "train")) == 2,
        within=30,
        what="the training Job re-admitted",
    )
    readmitted = asyncio.get_running_loop().time()
    await h.until(lambda: running(h, "train", 8), within=30, what="the training Job running again")
    took = asyncio.get_running_loop().time() - readmitted
    assert took < 10, f"{took:.1f} s from re-admission to running"
    assert not first_run & {p.uid for p in running(h, "train", 8)}
    status = await job_status(h, "train")
    assert status.get("failed", 0) == 0
    assert not any(c["type"] == "Failed" for c in status.get("conditions", []))
    job = await h.kube.get(JOBS, "train", namespace=NAMESPACE)
    assert "tidegate.io/requeued" not in job["metadata"]["annotations"]
    assert job["metadata"]["annotations"]["tidegate.io/resume"] == "manual"


@pytest.mark.slow
async def test_a_deployment_victim_is_still_evicted_and_comes_back(cluster: Harness) -> None:
    """Only Jobs and JobSets are re-queued by suspending them; a training Deployment's pods
    are evicted as before, its ReplicaSet re-creates them gated, and they run again when
    re-admitted."""
    h = cluster
    await h.create(DEPLOYMENTS, training_deployment("batch", pods=4))
    await h.until(lambda: running(h, "batch", 4), within=30, what="the batch Deployment running")
    first_run = {p.uid for p in running(h, "batch", 4)}

    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=2))
    await h.until(lambda: h.of(Preempted), within=30, what="a preemption")
    await h.until(lambda: running(h, "serve", 2), within=30, what="the inference pods running")
    # Its old pods were evicted; the replacements wait gated (nothing suspended a Deployment).
    await h.until(
        lambda: not first_run & {p.uid for p in pods_of(h, "batch") if not p.terminating},
        within=30,
        what="the batch pods evicted",
    )
    await h.kube.delete(DEPLOYMENTS, "serve", namespace=NAMESPACE, propagation="Background")
    await h.until(lambda: running(h, "batch", 4), within=40, what="the batch Deployment back")
    assert len(decisions_about(h, Admitted, "batch")) == 2
