"""PodDisruptionBudgets mirrored with the managed workloads whose pods they select."""

from typing import Any

from tidegate.kube.read.index import ClusterIndex, StateKey
from tidegate.model import DisruptionBudgetState

KEY = StateKey("pdb", "default", "keep")


TWO_HEALTHY = {"expectedPods": 2, "currentHealthy": 2, "desiredHealthy": 2}
"""A budget's status: two of two pods healthy."""


def published(index: ClusterIndex) -> DisruptionBudgetState:
    message = index.desired(KEY).message
    assert isinstance(message, DisruptionBudgetState), message
    return message


def test_a_budget_counts_the_managed_pods_it_selects_by_workload(k8s: Any) -> None:
    index = ClusterIndex()
    keep = k8s.disruption_budget(
        "keep", {"team": "a"}, min_available=2, status={**TWO_HEALTHY, "disruptionsAllowed": 1}
    )
    index.apply("PodDisruptionBudget", "ADDED", keep)
    assert published(index).workloads == {}
    owner = k8s.owner_ref("Job", "train")
    index.apply("Job", "ADDED", k8s.job("train", parallelism=3))
    applied = index.apply("Pod", "ADDED", k8s.pod("train-0", owner=owner, labels={"team": "a"}))
    assert KEY in applied.affected
    index.apply("Pod", "ADDED", k8s.pod("train-1", owner=owner, labels={"team": "a"}))
    index.apply("Pod", "ADDED", k8s.pod("train-2", owner=owner, labels={"team": "b"}))
    index.apply("Pod", "ADDED", k8s.pod("loose", labels={"team": "a"}, gated=False))
    message = published(index)
    assert message.workloads == {"default/train": 2}  # not the unmanaged pod, not team b
    assert (message.disruptions_allowed, message.desired_healthy) == (1, 2)
    index.apply("Pod", "DELETED", k8s.pod("train-1", owner=owner, labels={"team": "a"}))
    assert published(index).workloads == {"default/train": 1}
    index.apply("PodDisruptionBudget", "DELETED", keep)
    assert index.desired(KEY).message is None


def test_match_expressions(k8s: Any) -> None:
    index = ClusterIndex()
    expressions = [{"key": "team", "operator": "In", "values": ["a", "c"]}]
    keep = k8s.disruption_budget(
        "keep",
        {},
        min_available=2,
        expressions=expressions,
        status={**TWO_HEALTHY, "disruptionsAllowed": 0},
    )
    index.apply("PodDisruptionBudget", "ADDED", keep)
    owner = k8s.owner_ref("Job", "j")
    index.apply("Job", "ADDED", k8s.job("j", parallelism=2))
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=owner, labels={"team": "c"}))
    index.apply("Pod", "ADDED", k8s.pod("j-1", owner=owner))
    assert published(index).workloads == {"default/j": 1}
