"""Suspended Jobs and JobSets: queued for tidegate (Kueue's way) or stopped (respected)."""

from typing import Any

import pytest

from tidegate.kube.read.index import ClusterIndex, StateKey
from tidegate.model import WorkloadState
from tidegate.model.names import PREEMPTED_BY_ANNOTATION, REQUEUE_ANNOTATION, RESUME_ANNOTATION

KUEUE = {"kueue.x-k8s.io/queue-name": "research"}


def wkey(name: str) -> StateKey:
    return StateKey("workload", "default", name)


def suspended(job: dict[str, Any], value: bool = True) -> dict[str, Any]:
    job["spec"]["suspend"] = value
    return job


def published(index: ClusterIndex, name: str) -> WorkloadState:
    message = index.desired(wkey(name)).message
    assert isinstance(message, WorkloadState), message
    return message


def test_a_job_created_suspended_with_kueues_queue_label_is_queued_without_pods(k8s: Any) -> None:
    index = ClusterIndex()
    applied = index.apply("Job", "ADDED", suspended(k8s.job("kq", parallelism=4, labels=KUEUE)))
    assert wkey("kq") in applied.affected
    message = published(index, "kq")
    assert (message.suspended, message.resume_on_admission) == (True, True)
    assert (message.queue, message.podsets[0].count) == ("research", 4)


@pytest.mark.parametrize(
    "annotations",
    [{"tidegate.io/queue": "research"}, {"scheduling.volcano.sh/queue-name": "research"}],
)
def test_any_queue_key_on_the_job_queues_it(k8s: Any, annotations: dict[str, str]) -> None:
    index = ClusterIndex()
    index.apply("Job", "ADDED", suspended(k8s.job("q", annotations=annotations)))
    assert published(index, "q").resume_on_admission


def test_a_suspended_job_naming_no_queue_is_not_tidegates_and_not_published(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("Job", "ADDED", suspended(k8s.job("plain")))
    assert index.desired(wkey("plain")).message is None


@pytest.mark.parametrize(
    "annotation",
    [{RESUME_ANNOTATION: "manual"}, {PREEMPTED_BY_ANNOTATION: "default/serve"}],
)
def test_tidegates_own_annotations_hand_resuming_back(k8s: Any, annotation: dict[str, str]) -> None:
    index = ClusterIndex()
    index.apply("Job", "ADDED", suspended(k8s.job("stopped", labels=KUEUE, annotations=annotation)))
    assert index.desired(wkey("stopped")).message is None  # no pods ever gated: not managed


def test_suspending_an_admitted_job_publishes_a_stopped_suspension(k8s: Any) -> None:
    index = ClusterIndex()
    running = k8s.job("run", labels=KUEUE, annotations={RESUME_ANNOTATION: "manual"})
    index.apply("Job", "ADDED", running)
    index.apply("Pod", "ADDED", k8s.pod("run-0", owner=k8s.owner_ref("Job", "run")))
    assert published(index, "run").suspended is False
    again = k8s.job("run", labels=KUEUE, annotations={RESUME_ANNOTATION: "manual"})
    index.apply("Job", "MODIFIED", suspended(again))
    message = published(index, "run")
    assert (message.suspended, message.resume_on_admission) == (True, False)
    index.apply("Job", "MODIFIED", suspended(again, False))
    assert published(index, "run").suspended is False


def test_a_suspended_jobset_is_queued_and_its_child_jobs_are_not_workloads(k8s: Any) -> None:
    index = ClusterIndex()
    jobset = k8s.jobset("js", [k8s.replicated_job("w", replicas=2, parallelism=2)])
    jobset["metadata"]["labels"] = dict(KUEUE)
    jobset["spec"]["suspend"] = True
    index.apply("JobSet", "ADDED", jobset)
    child = suspended(
        k8s.job(
            "js-w-0", labels=KUEUE, owner=k8s.owner_ref("JobSet", "js", "jobset.x-k8s.io/v1alpha2")
        )
    )
    index.apply("Job", "ADDED", child)
    message = published(index, "js")
    assert (message.suspended, message.resume_on_admission, message.podsets[0].count) == (
        True,
        True,
        4,
    )
    assert index.desired(wkey("js-w-0")).message is None


def test_tidegates_requeue_is_queued_even_naming_no_queue(k8s: Any) -> None:
    """A Job tidegate suspended to re-queue it (a restarted victim, a gang evicted after a node
    failure) is tidegate's to unsuspend, whatever queue keys it has."""
    index = ClusterIndex()
    requeued = {REQUEUE_ANNOTATION: "preempted by default/serve"}
    index.apply("Job", "ADDED", suspended(k8s.job("back", annotations=requeued)))
    message = published(index, "back")
    assert (message.suspended, message.resume_on_admission) == (True, True)
    index.apply(
        "Job",
        "MODIFIED",
        suspended(k8s.job("back", annotations={**requeued, PREEMPTED_BY_ANNOTATION: "x/y"})),
    )
    assert not published(index, "back").resume_on_admission


def test_a_stale_resume_mark_landing_after_a_requeue_does_not_hand_the_job_back(k8s: Any) -> None:
    """The ungater's ``resume: manual`` for an earlier admission may land late (its answer lost,
    retried after preemption re-queued the Job; chaos seed 25 left such a Job suspended for
    good): a re-queue removes that mark in its own patch, so with the re-queue marker present
    the mark is stale and the Job stays tidegate's to unsuspend."""
    index = ClusterIndex()
    both = {REQUEUE_ANNOTATION: "preempted by default/serve", RESUME_ANNOTATION: "manual"}
    index.apply("Job", "ADDED", suspended(k8s.job("late", labels=KUEUE, annotations=both)))
    assert published(index, "late").resume_on_admission
