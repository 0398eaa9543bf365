"""The preemption service's answer to a reclaim request (:mod:`tidegate.policy.reclaim`):
whole gangs that borrow from the preemptor's cohort, PodDisruptionBudgets and the tidal rule
honoured, the room they leave nominated."""

import dataclasses
from collections.abc import Sequence

from tidegate.model import CohortConfig, QueueConfig, QueuePreemption
from tidegate.model.events import ReclaimPolicy
from tidegate.policy.quota import QueueUsage
from tidegate.policy.reclaim import select_reclaim_victims
from tidegate.policy.victims import RunningGang, VictimChoice, preempted_decision

from .test_victims import FOUR_NODES, GPU, cluster, gang, msg

COHORTS = {"research": CohortConfig(name="research")}


def queues(reclaim: ReclaimPolicy = "Any") -> dict[str, QueueConfig]:
    return {
        name: QueueConfig(
            name=name,
            parent="research",
            nominal={GPU: 16},
            preemption=QueuePreemption(reclaim_within_cohort=policy),
        )
        for name, policy in (("team-a", reclaim), ("team-b", "Never"))
    }


def usage(running: Sequence[RunningGang]) -> dict[str, QueueUsage]:
    out: dict[str, QueueUsage] = {}
    for g in running:
        assert g.queue is not None
        held = out.get(g.queue, QueueUsage())
        out[g.queue] = QueueUsage(resources={GPU: held.resources.get(GPU, 0) + g.resources[GPU]})
    return out


def b_gangs() -> list[RunningGang]:
    """team-b: ``own`` (admitted first, within its nominal) and ``borrow`` (16 GPUs lent)."""
    own = dataclasses.replace(
        gang("own", [("n1", 8), ("n2", 8)], queue="team-b"), uid="u-own", admission=1
    )
    borrow = dataclasses.replace(
        gang("borrow", [("n3", 8), ("n4", 8)], queue="team-b"), uid="u-borrow", admission=2
    )
    return [own, borrow]


def choose(running: Sequence[RunningGang], reclaim: ReclaimPolicy = "Any") -> VictimChoice:
    lender = msg.workload(
        "serve",
        msg.podset("serve", 2, gpus=8, card_name=None),
        queue="team-a",
        service_type="training",
        priority=0,
    )
    return select_reclaim_victims(
        lender,
        queue_name="team-a",
        queues=queues(reclaim),
        cohorts=COHORTS,
        running=running,
        admissions={},
        usage=usage(running),
        view=cluster(FOUR_NODES, running),
    )


def test_the_youngest_borrowing_gang_is_preempted_whole_and_its_room_nominated() -> None:
    choice = choose(b_gangs())
    assert choice.outcome == "preempts"
    assert choice.victims == ("default/borrow",)
    assert set(choice.nominated) == {"n3", "n4"}
    body = preempted_decision(msg.workload("serve", queue="team-a"), choice)
    assert body.message.startswith(
        "borrowed quota of cohort research reclaimed for queue team-a: 1 gang preempted for "
        "default/serve: default/borrow (InCohortReclamation)"
    )
    assert body.reclaimed == {"default/borrow": "InCohortReclamation"}
    assert body.cohort == "research"


def test_a_gang_its_budget_protects_is_skipped_and_named() -> None:
    own, borrow = b_gangs()
    protected = dataclasses.replace(borrow, budget_blocked="PDB b allows 0 disruptions")
    choice = choose([own, protected])
    # Taking ``own`` instead also frees 16 GPUs of the cohort's quota: the budget is honoured.
    assert choice.victims == ("default/own",)
    assert choice.budget_skipped == {"default/borrow": "PDB b allows 0 disruptions"}
    both = dataclasses.replace(own, budget_blocked="PDB a allows 0 disruptions")
    blocked = choose([both, protected])
    assert blocked.outcome == "no-victims"
    assert "skipped for their PodDisruptionBudget" in (blocked.reason or "")


def test_training_never_reclaims_from_training_under_never() -> None:
    choice = choose(b_gangs(), reclaim="Never")
    assert choice.outcome == "no-victims"
    assert choice.victims == ()
    assert "reclaimWithinCohort: Never" in str(choice.ineligible)


def test_inference_is_never_a_victim() -> None:
    own, borrow = b_gangs()
    serving = dataclasses.replace(borrow, service_type="inference")
    choice = choose([own, serving])
    assert choice.victims == ("default/own",)
