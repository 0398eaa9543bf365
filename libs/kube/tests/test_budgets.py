"""PodDisruptionBudgets mirrored with the managed workloads whose pods they select."""

from typing import Any

from tidegate.kube.read.index import ClusterIndex, StateKey
from tidegate.model import DisruptionBudgetState

KEY = StateKey("pdb", "default", "keep")


def budget(selector: dict[str, Any], allowed: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": "default", "uid": "uid-keep"},
        "spec": {"minAvailable": 2, "selector": selector},
        "status": {
            "disruptionsAllowed": allowed,
            "expectedPods": 2,
            "currentHealthy": 2,
            "desiredHealthy": 2,
        },
    }


def published(index: ClusterIndex) -> DisruptionBudgetState:
    message = index.desired(KEY).message
    assert isinstance(message, DisruptionBudgetState), message
    return message


def test_a_budget_counts_the_managed_pods_it_selects_by_workload(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("PodDisruptionBudget", "ADDED", budget({"matchLabels": {"team": "a"}}, 1))
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
    index.apply("PodDisruptionBudget", "DELETED", budget({}))
    assert index.desired(KEY).message is None


def test_match_expressions(k8s: Any) -> None:
    index = ClusterIndex()
    selector = {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "c"]}]}
    index.apply("PodDisruptionBudget", "ADDED", budget(selector))
    owner = k8s.owner_ref("Job", "j")
    index.apply("Job", "ADDED", k8s.job("j", parallelism=2))
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=owner, labels={"team": "c"}))
    index.apply("Pod", "ADDED", k8s.pod("j-1", owner=owner))
    assert published(index).workloads == {"default/j": 1}
