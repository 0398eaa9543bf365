"""When a workload has finished, per owner kind, and that the verdict, once reached, stays
(pods deleted afterwards, a watcher restart) until the owner is re-created."""

from typing import Any

import pytest

from tidegate.kube.read.index import ClusterIndex, StateKey
from tidegate.model import WorkloadState

GROUP = {"scheduling.k8s.io/group-name": "g"}


def wkey(name: str) -> StateKey:
    return StateKey("workload", "default", name)


def finished(index: ClusterIndex, name: str) -> str | None:
    message = index.desired(wkey(name)).message
    assert isinstance(message, WorkloadState), f"{name}: {message!r}"
    return message.finished


def with_conditions(obj: dict[str, Any], *conditions: tuple[str, str]) -> dict[str, Any]:
    """``obj`` with ``status.conditions`` of (type, status) pairs, as a controller writes."""
    status = {"conditions": [{"type": t, "status": s, "reason": "R"} for t, s in conditions]}
    return {**obj, "status": status}


def job_index(k8s: Any, job: dict[str, Any]) -> ClusterIndex:
    index = ClusterIndex()
    index.apply("Job", "ADDED", job)
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=k8s.owner_ref("Job", "j")))
    return index


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ((), None),
        ((("Complete", "True"),), "Completed"),
        ((("Failed", "True"),), "Failed"),
        ((("Complete", "False"), ("Suspended", "True")), None),
        # Kubernetes 1.31+ sets these first, while pods may still be terminating: not yet.
        ((("SuccessCriteriaMet", "True"),), None),
        ((("FailureTarget", "True"),), None),
    ],
)
def test_a_job_finishes_with_its_complete_or_failed_condition(
    k8s: Any, conditions: tuple[tuple[str, str], ...], expected: str | None
) -> None:
    index = job_index(k8s, k8s.job("j"))
    assert finished(index, "j") is None
    index.apply("Job", "MODIFIED", with_conditions(k8s.job("j"), *conditions))
    assert finished(index, "j") == expected


@pytest.mark.parametrize(
    ("condition", "expected"), [("Completed", "Completed"), ("Failed", "Failed")]
)
def test_a_jobset_finishes_with_its_completed_or_failed_condition(
    k8s: Any, condition: str, expected: str
) -> None:
    index = ClusterIndex()
    jobset = k8s.jobset("s", [k8s.replicated_job("w", replicas=1, parallelism=1)])
    index.apply("JobSet", "ADDED", jobset)
    index.apply("Job", "ADDED", k8s.job("s-w-0", owner=k8s.owner_ref("JobSet", "s")))
    index.apply("Pod", "ADDED", k8s.pod("s-w-0-0", owner=k8s.owner_ref("Job", "s-w-0")))
    index.apply("JobSet", "MODIFIED", with_conditions(jobset, ("StartupPolicyCompleted", "True")))
    assert finished(index, "s") is None
    # A child Job finishing is not the JobSet finishing (it may have more jobs, or restart).
    child = with_conditions(
        k8s.job("s-w-0", owner=k8s.owner_ref("JobSet", "s")), ("Complete", "True")
    )
    index.apply("Job", "MODIFIED", child)
    assert finished(index, "s") is None
    index.apply("JobSet", "MODIFIED", with_conditions(jobset, (condition, "True")))
    assert finished(index, "s") == expected


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("Pending", None),
        ("Running", None),
        ("Unknown", None),
        ("Succeeded", "Completed"),
        ("Failed", "Failed"),
    ],
)
def test_a_bare_pod_finishes_with_its_phase(k8s: Any, phase: str, expected: str | None) -> None:
    index = ClusterIndex()
    index.apply("Pod", "ADDED", k8s.pod("p"))
    index.apply("Pod", "MODIFIED", k8s.pod("p", gated=False, nodeName="n1", phase=phase))
    assert finished(index, "p") == expected


def test_deployments_and_replicasets_never_finish(k8s: Any) -> None:
    index = ClusterIndex()
    deployment = k8s.deployment("web", replicas=1)
    index.apply("Deployment", "ADDED", with_conditions(deployment, ("Available", "True")))
    index.apply("ReplicaSet", "ADDED", k8s.replicaset("web-1", deployment="web"))
    index.apply("ReplicaSet", "ADDED", k8s.replicaset("solo", deployment=None))
    for name, rs in (("web-1-a", "web-1"), ("solo-a", "solo")):
        owner = k8s.owner_ref("ReplicaSet", rs, "apps/v1")
        index.apply("Pod", "ADDED", k8s.pod(name, owner=owner))
        index.apply("Pod", "MODIFIED", k8s.pod(name, owner=owner, gated=False, phase="Succeeded"))
    assert finished(index, "web") is None
    assert finished(index, "solo") is None


def test_an_owner_tidegate_cannot_read_never_finishes(k8s: Any) -> None:
    index = ClusterIndex()
    owner = k8s.owner_ref("StatefulSet", "db", "apps/v1")
    index.apply("Pod", "ADDED", k8s.pod("db-0", owner=owner))
    index.apply("Pod", "MODIFIED", k8s.pod("db-0", owner=owner, gated=False, phase="Succeeded"))
    assert finished(index, "db") is None


def group_index(k8s: Any, min_member: int | None, phases: list[str]) -> ClusterIndex:
    index = ClusterIndex()
    index.apply("PodGroup", "ADDED", k8s.podgroup("g", min_member=min_member))
    for i in range(len(phases)):
        index.apply("Pod", "ADDED", k8s.pod(f"g-{i}", labels=GROUP))
    for i, phase in enumerate(phases):
        pod = k8s.pod(f"g-{i}", labels=GROUP, gated=False, nodeName="n1", phase=phase)
        index.apply("Pod", "MODIFIED", pod)
    return index


@pytest.mark.parametrize(
    ("min_member", "phases", "expected"),
    [
        (2, ["Succeeded", "Succeeded", "Running"], None),  # a member still runs
        (2, ["Succeeded", "Succeeded", "Pending"], None),
        (2, ["Succeeded", "Succeeded", "Unknown"], None),
        (2, ["Succeeded", "Succeeded", "Failed"], "Completed"),  # minMember succeeded
        (3, ["Succeeded", "Succeeded", "Failed"], "Failed"),
        (2, ["Failed", "Failed"], "Failed"),
        (None, ["Succeeded", "Succeeded"], "Completed"),  # no minMember: every member
        (None, ["Succeeded", "Failed"], "Failed"),
    ],
)
def test_a_podgroup_finishes_when_no_member_runs_any_more(
    k8s: Any, min_member: int | None, phases: list[str], expected: str | None
) -> None:
    assert finished(group_index(k8s, min_member, phases), "g") == expected


def deleting(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with a deletionTimestamp (evicted, drained, deleted by its controller)."""
    return {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T01:00:00Z"}}


@pytest.mark.parametrize("exit_phase", ["Failed", "Succeeded"])
def test_an_evicted_gang_has_not_finished_and_its_replacements_can_still_run(
    k8s: Any, exit_phase: str
) -> None:
    index = group_index(k8s, 2, ["Running", "Running"])
    # Eviction: the kubelet moves each deleted pod to a terminal phase (Failed, or Succeeded
    # when the container exits 0 on SIGTERM) before the pod is removed.
    for i in range(2):
        pod = k8s.pod(f"g-{i}", labels=GROUP, gated=False, nodeName="n1", phase="Running")
        index.apply("Pod", "MODIFIED", deleting(pod))
        pod = k8s.pod(f"g-{i}", labels=GROUP, gated=False, nodeName="n1", phase=exit_phase)
        index.apply("Pod", "MODIFIED", deleting(pod))
        assert finished(index, "g") is None
    for i in range(2):
        index.apply("Pod", "DELETED", k8s.pod(f"g-{i}", labels=GROUP))
    # The operator re-creates the gang, gated again; later it runs to the end.
    for i in range(2, 4):
        index.apply("Pod", "ADDED", k8s.pod(f"g-{i}", labels=GROUP))
    assert finished(index, "g") is None
    for i in range(2, 4):
        pod = k8s.pod(f"g-{i}", labels=GROUP, gated=False, nodeName="n1", phase="Succeeded")
        index.apply("Pod", "MODIFIED", pod)
    assert finished(index, "g") == "Completed"


def test_a_bare_pod_deleted_while_running_has_not_finished(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("Pod", "ADDED", k8s.pod("p"))
    pod = k8s.pod("p", gated=False, nodeName="n1", phase="Failed")
    index.apply("Pod", "MODIFIED", deleting(pod))
    assert finished(index, "p") is None  # its tombstone follows: a deletion, not a failure


def test_a_finished_podgroup_stays_finished_when_its_pods_are_deleted(k8s: Any) -> None:
    index = group_index(k8s, 2, ["Succeeded", "Succeeded"])
    for i in range(2):
        index.apply("Pod", "DELETED", k8s.pod(f"g-{i}", labels=GROUP))
    # Kept although the evidence is gone, and noted when the pods changed, not only when the
    # workload was next published (here it never was before the pods went).
    assert finished(index, "g") == "Completed"


def test_a_recreated_owner_starts_unfinished(k8s: Any) -> None:
    index = job_index(k8s, with_conditions(k8s.job("j"), ("Complete", "True")))
    assert finished(index, "j") == "Completed"
    index.apply("Job", "DELETED", k8s.job("j"))
    again = k8s.job("j")
    again["metadata"]["uid"] = "uid-j-2"
    index.apply("Job", "ADDED", again)
    pod = k8s.pod("j-0", owner={**k8s.owner_ref("Job", "j"), "uid": "uid-j-2"})
    index.apply("Pod", "MODIFIED", pod)
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert (message.uid, message.finished) == ("uid-j-2", None)


def test_a_seeded_verdict_for_another_uid_is_ignored(k8s: Any) -> None:
    index = ClusterIndex()
    index.seed_managed([("default", "j")])
    index.seed_finished(("default", "j"), uid="uid-old", finished="Failed")
    index.apply("Job", "ADDED", k8s.job("j"))
    assert finished(index, "j") is None
