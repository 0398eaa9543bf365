"""A plain Job moved off a failed node comes back at once and does not fail.

The Job controller counts every evicted pod as a failure: with the default ``backoffLimit`` of
6, an 8-pod gang evicted whole after a node failure would fail for good, and short of that its
replacements would wait out the pod failure backoff (10 s doubling per failure, up to 10 minutes).
The simulator's Job controller now does the same (``tidegate.sim.jobfailure``), so these tests
fail when tidegate evicts such a gang pod by pod. tidegate re-queues a Job by suspending it
(``tidegate.io/requeued``): the pods its controller deletes on suspend are no failures.

Only the pods Kubernetes itself deletes with a deleted node (pod GC) still count — the
controller backs off 10 s for one, 20 s for two — while a NotReady node's pods are deleted by
the suspension before the taint manager's toleration ends, and cost nothing.
"""

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.kube import JOBS, NODES
from tidegate.model import Admitted, Released
from tidegate.sim import SimSettings

from .conftest import QUEUE_LABEL, Env, environment, k8s, start_pipeline

RACK = "tidegate.io/rack"


@pytest.fixture
async def pipeline(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Env]:
    """2 racks of 4 nodes of 8 GPUs, time 100× faster (the Job backoff is wall clock, as in
    Kubernetes), every service but preemption, queue ``q``."""
    settings = SimSettings(nodes="1x2x4x8gpu", time_scale=0.01)
    async with environment(tmp_path, nats_url, cluster_id, settings) as env:
        await start_pipeline(env, replace_retry_seconds=5.0, batch_window_seconds=0.2)
        yield env


async def running(env: Env, job: str, *, besides: set[str]) -> list[dict[str, Any]] | None:
    """The Job's 8 pods once all run and none is one of ``besides`` (the first run's)."""
    pods = [
        p
        for p in await env.pods(f"job-name={job}")
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    if len(pods) != 8 or {p["metadata"]["uid"] for p in pods} & besides:
        return None
    return pods


async def job_status(env: Env, name: str) -> dict[str, Any]:
    return dict((await env.kube.get(JOBS, name, namespace="team")).get("status") or {})


def failed_condition(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Failed" and c.get("status") == "True"
        for c in status.get("conditions", [])
    )


async def fail_a_node_and_come_back(env: Env, *, delete: bool) -> tuple[float, dict[str, Any]]:
    """Run the Job, fail one node of its rack (no room left there), wait until it runs again
    in the other rack; (seconds from its re-admission to running, its status)."""
    # 8 pods of 4 GPUs that must share a rack: no podFailurePolicy, default backoffLimit
    # (6), not Indexed: the Job a new user writes.
    template = k8s.template(
        labels={QUEUE_LABEL: "q"},
        containers=[k8s.container("1", None, limits=True, image="trainer", gpu="4")],
        restartPolicy="Never",
    )
    plain = k8s.job(
        "plain",
        parallelism=8,
        completions=8,
        labels={QUEUE_LABEL: "q"},
        annotations={"tidegate.io/topology-required": RACK},
        template=template,
    )
    await env.create(JOBS, plain)
    first = await env.until_async(
        lambda: running(env, "plain", besides=set()), within=30, what="8 running"
    )
    (rack,) = {p["spec"]["nodeSelector"][RACK] for p in first}
    node = first[0]["spec"]["nodeName"]
    if delete:
        await env.kube.delete(NODES, node)
    else:
        await env.kube.patch(
            NODES,
            node,
            {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Down"}]}},
            subresource="status",
            patch_type="strategic",
        )
    uids = {p["metadata"]["uid"] for p in first}
    await env.until(
        lambda: [a for a in env.of(Admitted, "team/plain") if a.replaces is None][1:],
        within=30,
        what="the Job re-admitted",
    )
    readmitted = time.monotonic()
    pods = await env.until_async(
        lambda: running(env, "plain", besides=uids), within=60, what="the Job running again"
    )
    took = time.monotonic() - readmitted
    assert {p["spec"]["nodeSelector"][RACK] for p in pods} != {rack}
    assert [r for r in env.of(Released, "team/plain") if r.evict_pods]
    return took, await job_status(env, "plain")


async def test_a_plain_job_moved_off_a_not_ready_node_runs_again_at_once(pipeline: Env) -> None:
    took, status = await fail_a_node_and_come_back(pipeline, delete=False)
    # Suspended, not evicted: its controller deleted the pods itself and counted none.
    assert took < 10, f"{took:.1f} s from re-admission to running"
    assert status.get("failed", 0) == 0
    assert not failed_condition(status)
    job = await pipeline.kube.get(JOBS, "plain", namespace="team")
    assert not job["spec"].get("suspend")
    assert "tidegate.io/requeued" not in (job["metadata"].get("annotations") or {})


async def test_a_plain_job_moved_off_a_deleted_node_pays_only_for_the_pods_lost_with_it(
    pipeline: Env,
) -> None:
    took, status = await fail_a_node_and_come_back(pipeline, delete=True)
    # The node's 2 pods were deleted by pod GC: 2 failures, 20 s of the Job controller's
    # backoff; the other 6 were no failures (evicted, they made 8 > backoffLimit 6: Failed).
    assert status.get("failed") == 2
    assert not failed_condition(status)
    assert took < 30, f"{took:.1f} s from re-admission to running"
