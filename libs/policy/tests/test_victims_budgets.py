"""PodDisruptionBudgets in the victim search: a gang whose whole eviction a budget does not
allow now is skipped, another victim serves the preemptor, and the decision says so."""

import dataclasses

from tidegate.model import WorkloadKey
from tidegate.policy.victims import budget_blocks, preempted_decision, select_victims

from .test_victims import FOUR_NODES, QUEUES, cluster, gang, msg

A = WorkloadKey("default/a")


def test_budget_blocks_when_it_selects_more_pods_than_it_allows() -> None:
    assert budget_blocks(
        A, [msg.disruption_budget("keep-a", {A: 2}, allowed=1)], namespace="default"
    ) == ("PodDisruptionBudget default/keep-a allows 1 disruption now and selects 2 of its pods")
    assert (
        budget_blocks(A, [msg.disruption_budget("keep-a", {A: 2}, allowed=2)], namespace="default")
        is None
    )
    assert (
        budget_blocks(
            A, [msg.disruption_budget("keep-a", {"default/b": 2}, allowed=0)], namespace="default"
        )
        is None
    )
    assert (
        budget_blocks(
            A,
            [msg.disruption_budget("keep-a", {A: 2}, allowed=0, namespace="other")],
            namespace="default",
        )
        is None
    )


def test_a_protected_gang_is_skipped_and_another_victim_serves() -> None:
    # a is the cheaper victim (lower priority) but its budget allows no disruption now.
    a = gang("a", [("n1", 8), ("n2", 8)], priority=20_000)
    b = gang("b", [("n3", 8), ("n4", 8)], priority=30_000)
    free = select_victims(
        msg.workload("serve", msg.podset("serve", 2, gpus=8)),
        view=cluster(FOUR_NODES, [a, b]),
        running=[a, b],
        queues=QUEUES,
    )
    assert free.victims == (A,)

    why = budget_blocks(
        A, [msg.disruption_budget("keep-a", {A: 2}, allowed=0)], namespace="default"
    )
    guarded = dataclasses.replace(a, budget_blocked=why)
    running = [guarded, b]
    choice = select_victims(
        msg.workload("serve", msg.podset("serve", 2, gpus=8)),
        view=cluster(FOUR_NODES, running),
        running=running,
        queues=QUEUES,
    )
    assert choice.outcome == "preempts"
    assert choice.victims == ("default/b",)
    assert choice.budget_skipped == {A: why}
    decision = preempted_decision(msg.workload("serve", msg.podset("serve", 2, gpus=8)), choice)
    assert "skipped for their PodDisruptionBudget: default/a (PodDisruptionBudget" in (
        decision.message
    )


def test_the_preemptor_waits_with_a_reason_when_only_protected_gangs_would_do() -> None:
    why = "PodDisruptionBudget default/keep-a allows 0 disruptions now and selects 2 of its pods"
    a = dataclasses.replace(gang("a", [("n1", 8), ("n2", 8)]), budget_blocked=why)
    b = dataclasses.replace(gang("b", [("n3", 8), ("n4", 8)]), budget_blocked=why)
    running = [a, b]
    choice = select_victims(
        msg.workload("serve", msg.podset("serve", 2, gpus=8)),
        view=cluster(FOUR_NODES, running),
        running=running,
        queues=QUEUES,
    )
    assert choice.outcome == "no-victims"
    assert choice.victims == ()
    assert choice.reason is not None
    assert "2 gangs skipped for their PodDisruptionBudget: default/a (" in choice.reason
