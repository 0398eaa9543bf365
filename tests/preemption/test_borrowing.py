"""Sharing idle GPUs, end to end: every service as a real process on a simulated
cluster of 32 GPUs, two training teams in one cohort.

Team A (nominal 16 GPUs, ``reclaimWithinCohort: Any``) is idle; team B (nominal 16) runs a
gang within its nominal and a second one on A's idle GPUs: admitted as borrowing, recorded in
an Event. When A submits, B's borrowing gang is preempted whole (not the one within its
nominal), A is admitted within its nominal, and B's gang waits on its quota without
preempting back.

The Queues and the Cohort are Kubernetes objects; the watcher publishes them.
"""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.kube import COHORTS, EVENTS, JOBS, QUEUES
from tidegate.model import (
    Admitted,
    CohortConfig,
    Pending,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    subjects,
)

from .conftest import GPU, NAMESPACE, Harness, environment, pod_template
from .test_end_to_end import decisions_about, every_service, pods_of, running


@pytest.fixture
async def cluster(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """The simulated cluster and the bus with every service running as a process."""
    async with environment(tmp_path, nats_url, cluster_id) as h:
        h.plays_topology_cache = False
        async with every_service(h, tmp_path):
            yield h


def team_job(
    name: str, queue: str, *, pods: int = 2, gpus: int = 8, priority_class: str = "low"
) -> dict[str, Any]:
    """An indexed training Job of ``pods`` pods of ``gpus`` GPUs in ``queue``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": {"tidegate.io/queue": queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 100,
            "template": pod_template(queue=queue, priority_class=priority_class, gpus=gpus),
        },
    }


async def create_queues(
    h: Harness, cohort_spec: dict[str, Any], queues: dict[str, dict[str, Any]]
) -> None:
    """Cohort ``research`` with ``cohort_spec`` and one Queue per entry of ``queues`` (its
    spec, in cohort ``research``), as Kubernetes objects; returns once the watcher has
    published them all."""
    cohort = {"apiVersion": "tidegate.io/v1alpha1", "kind": "Cohort"}
    await h.create(COHORTS, {**cohort, "metadata": {"name": "research"}, "spec": cohort_spec}, None)
    for name, spec in queues.items():
        body = {
            "apiVersion": "tidegate.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"cohort": "research", **spec},
        }
        await h.create(QUEUES, body, namespace=None)

    def published() -> bool:
        found = [h.state.get(subjects.queue(h.cluster, n)) for n in queues]
        return isinstance(
            h.state.get(subjects.cohort(h.cluster, "research")), CohortConfig
        ) and all(isinstance(q, QueueConfig) and q.parent == "research" for q in found)

    await h.until(published, within=15, what="the queue tree on the bus")


async def create_tree(h: Harness) -> None:
    """Cohort ``research`` and Queues ``team-a`` (reclaims with ``Any``) and ``team-b``, 16
    GPUs nominal each, as Kubernetes objects the watcher publishes."""
    await create_queues(
        h,
        {},
        {
            name: {"nominalQuota": {GPU: "16"}, "preemption": {"reclaimWithinCohort": reclaim}}
            for name, reclaim in (("team-a", "Any"), ("team-b", "Never"))
        },
    )


async def events_of(h: Harness, reason: str) -> dict[str, str]:
    listed = await h.kube.list_objects(EVENTS, namespace=NAMESPACE)
    return {
        str(e["involvedObject"]["name"]): str(e.get("message"))
        for e in listed.items
        if e.get("reason") == reason
    }


def last_pending_reason(h: Harness, workload: str) -> str | None:
    pending = [p for p in decisions_about(h, Pending, workload) if isinstance(p, Pending)]
    return pending[-1].reason if pending else None


@pytest.mark.slow
async def test_a_team_borrows_idle_gpus_and_gives_them_back_whole_when_the_lender_submits(
    cluster: Harness,
) -> None:
    h = cluster
    await create_tree(h)

    # Team B: 16 GPUs within its nominal, then 16 more on team A's idle GPUs.
    await h.create(JOBS, team_job("b-own", "team-b"))
    await h.until(lambda: running(h, "b-own", 2), within=30, what="b-own running")
    await h.create(JOBS, team_job("b-borrow", "team-b"))
    await h.until(lambda: running(h, "b-borrow", 2), within=30, what="b-borrow running")
    first_run = {p.uid for p in running(h, "b-borrow", 2)}
    (own,) = decisions_about(h, Admitted, "b-own")
    (borrow,) = decisions_about(h, Admitted, "b-borrow")
    assert isinstance(own, Admitted)
    assert isinstance(borrow, Admitted)
    assert (own.borrowed, own.cohort) == ({}, None)
    assert (borrow.queue, borrow.borrowed, borrow.cohort) == ("team-b", {GPU: 16}, "research")
    events = await h.until_async(
        lambda: events_of(h, "Borrowing"), within=15, what="a Borrowing Event"
    )
    assert events == {"b-borrow": "admitted to queue team-b borrowing 16 GPUs from cohort research"}

    # Team A submits: its GPUs come back by preempting B's borrowing gang, whole.
    await h.create(JOBS, team_job("a-job", "team-a"))
    await h.until(lambda: h.of(Preempted), within=30, what="a preemption")
    (preempted,) = h.of(Preempted)
    assert isinstance(preempted, Preempted)
    assert (preempted.preemptor, preempted.victims) == (
        f"{NAMESPACE}/a-job",
        [f"{NAMESPACE}/b-borrow"],
    )
    assert "borrowed quota of cohort research reclaimed for queue team-a" in preempted.message
    assert preempted.reclaimed == {f"{NAMESPACE}/b-borrow": "InCohortReclamation"}
    assert preempted.cohort == "research"
    (asked,) = decisions_about(h, PreemptRequested, "a-job")
    assert isinstance(asked, PreemptRequested)
    assert asked.reclaim
    await h.until(lambda: running(h, "a-job", 2), within=40, what="a-job running")
    admitted_a = [a for a in decisions_about(h, Admitted, "a-job") if isinstance(a, Admitted)]
    assert [(a.borrowed, a.nominated_by) for a in admitted_a] == [({}, f"{NAMESPACE}/a-job")]
    await h.until(
        lambda: not first_run & {p.uid for p in pods_of(h, "b-borrow")},
        within=30,
        what="every pod of the borrowing gang gone",
    )
    released = [
        r.reason for r in decisions_about(h, Released, "b-borrow") if isinstance(r, Released)
    ]
    assert released == ["Evicted"]

    # B's gang waits on its queue's quota and never preempts back; its other gang runs on.
    await h.until(
        lambda: last_pending_reason(h, "b-borrow") == "ExceedsQuota",
        within=30,
        what="b-borrow waiting on quota",
    )
    assert decisions_about(h, PreemptRequested, "b-borrow") == []
    assert len(h.of(Preempted)) == 1
    assert {p.uid for p in running(h, "b-own", 2)} == {p.uid for p in pods_of(h, "b-own")}
    assert len(decisions_about(h, Admitted, "b-own")) == 1
