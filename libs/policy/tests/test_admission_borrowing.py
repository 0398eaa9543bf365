"""Admission on a queue tree: borrowing a cohort's idle quota, fair order between the queues
that share it, Invalid trees, and reclaim requests (docs/queues.md, "The queue tree")."""

import msgspec

from tidegate.model import (
    Admitted,
    CapacityNode,
    CohortConfig,
    Pending,
    PodSetSpec,
    Preempted,
    PreemptRequested,
    QueueConfig,
    QueuePreemption,
    Released,
    WorkloadState,
)
from tidegate.model.events import ReclaimPolicy
from tidegate.policy.admission import Admission
from tidegate.policy.queuetree import borrowing_summary

from .test_admission import GPU, bodies, cluster, msg, only, two_racks


def node(name: str, rack: str, *, applied: int = 0) -> CapacityNode:
    """A node of 8 GPUs, all free, in block b1 and ``rack``."""
    return msg.capacity_node(name, "b1", rack, gpus=8, applied=applied)


def workers(count: int, gpus: int) -> PodSetSpec:
    return msg.podset(count=count, gpus=gpus)


def workload(
    name: str, *podsets: PodSetSpec, queue: str, created_at: float = 0.0, priority: int = 0
) -> WorkloadState:
    return msg.workload(name, *podsets, queue=queue, created_at=created_at, priority=priority)


def team(
    name: str,
    nominal: int,
    *,
    priority: int = 0,
    reclaim: ReclaimPolicy = "Never",
    cohort: str = "research",
) -> QueueConfig:
    return QueueConfig(
        name=name,
        priority=priority,
        parent=cohort,
        nominal={GPU: nominal},
        preemption=QueuePreemption(reclaim_within_cohort=reclaim),
    )


def admitted_of(decisions: list[object]) -> dict[str, Admitted]:
    return {b.workload: b for b in decisions if isinstance(b, Admitted)}


def pending_of(decisions: list[object]) -> dict[str, Pending]:
    return {b.workload: b for b in decisions if isinstance(b, Pending)}


def test_a_queue_over_its_nominal_is_admitted_on_what_its_cohort_lends_and_says_so() -> None:
    admission = cluster(*two_racks(), queues=[team("a", 16), team("b", 8)])
    admission.set_workload(workload("b1", workers(2, 8), queue="b"))
    (decided,) = bodies(admission.cycle(now=1.0))
    assert isinstance(decided, Admitted)
    assert (decided.borrowed, decided.borrowed_cards, decided.cohort) == (
        {GPU: 8},
        {},
        "research",
    )
    assert borrowing_summary(decided) == "borrowing 8 GPUs from cohort research"
    # The cohort holds 24: b holds 16 of it, so 16 more do not fit; the message says why.
    admission.set_workload(workload("b2", workers(2, 8), queue="b", created_at=1))
    (waits,) = bodies(admission.cycle(now=2.0))
    assert isinstance(waits, Pending)
    assert waits.reason == "ExceedsQuota"
    assert waits.message == (
        "queue b: nvidia.com/gpu 16 in use + 16 requested > 24 available now (nominal 8; the "
        "rest is what cohort research can lend while others use it)"
    )


def test_within_its_nominal_a_tree_queue_borrows_nothing() -> None:
    admission = cluster(*two_racks(), queues=[team("a", 16), team("b", 8)])
    admission.set_workload(workload("a1", workers(2, 8), queue="a"))
    (decided,) = bodies(admission.cycle(now=1.0))
    assert isinstance(decided, Admitted)
    assert (decided.borrowed, decided.cohort) == ({}, None)
    assert borrowing_summary(decided) is None


def test_a_queue_in_no_tree_is_bounded_by_its_capability_alone_as_before() -> None:
    capped = QueueConfig(name="q", quota={GPU: 8})
    admission = cluster(*two_racks(), queues=[capped, team("a", 16)])
    admission.set_workload(workload("w1", workers(1, 8), queue="q"))
    admission.set_workload(workload("w2", workers(1, 8), queue="q", created_at=1))
    decisions = bodies(admission.cycle(now=1.0))
    assert admitted_of(decisions)["ns/w1"].borrowed == {}
    assert pending_of(decisions)["ns/w2"].message == (
        "queue q: nvidia.com/gpu 8 in use + 8 requested > quota 8"
    )
    assert admission.tree() is not None  # a tree exists beside it, and changes nothing for q


def test_a_nominal_quota_without_a_cohort_cannot_be_exceeded() -> None:
    alone = QueueConfig(name="alone", nominal={GPU: 8})
    admission = cluster(*two_racks(), queues=[alone])
    admission.set_workload(workload("w", workers(2, 8), queue="alone"))
    (waits,) = bodies(admission.cycle(now=1.0))
    assert isinstance(waits, Pending)
    assert waits.reason == "ExceedsQuota"


def test_competing_queues_take_turns_by_share_not_by_queue_priority() -> None:
    # a (priority 100) already holds its nominal 8; its next gang would borrow. b holds
    # nothing. Room for one more gang: the queue order would give it to a; its share is
    # above b's, so b goes first.
    admission = cluster(
        node("n1", "r1"),
        node("n2", "r1"),
        queues=[team("a", 8, priority=100), team("b", 8)],
    )
    admission.set_cohort(CohortConfig(name="research", nominal={GPU: 8}))  # quota for both
    admission.set_workload(workload("a1", workers(1, 8), queue="a"))
    assert list(admitted_of(bodies(admission.cycle(now=1.0)))) == ["ns/a1"]
    admission.set_workload(workload("a2", workers(1, 8), queue="a", created_at=1))
    admission.set_workload(workload("b1", workers(1, 8), queue="b", created_at=2))
    decisions = bodies(admission.cycle(now=2.0))
    assert list(admitted_of(decisions)) == ["ns/b1"]
    assert pending_of(decisions)["ns/a2"].reason == "WaitingForCapacity"


def test_equal_shares_go_by_workload_priority_then_creation_then_key() -> None:
    def first_admitted(*specs: tuple[str, str, int, float]) -> str:
        admission = cluster(node("n1", "r1"), queues=[team("a", 8, priority=100), team("b", 8)])
        for name, queue, priority, created in specs:
            admission.set_workload(
                workload(name, workers(1, 8), queue=queue, priority=priority, created_at=created)
            )
        (admitted,) = admitted_of(bodies(admission.cycle(now=1.0)))
        return admitted

    # Both within nominal (share 0): the higher workload priority wins, whatever the queue's.
    assert first_admitted(("x", "a", 0, 0.0), ("y", "b", 5, 9.0)) == "ns/y"
    # Equal priority: the older.
    assert first_admitted(("x", "a", 0, 5.0), ("y", "b", 0, 1.0)) == "ns/y"
    # Equal everything: the key.
    assert first_admitted(("y", "a", 0, 0.0), ("x", "b", 0, 0.0)) == "ns/x"


def test_a_weight_makes_a_borrowing_queue_yield_less() -> None:
    # Both queues hold their nominal 8 and want 8 more from the cohort's own 8. a's weight 2
    # halves its share: it goes first though b's gang is older.
    cohort = CohortConfig(name="research", nominal={GPU: 8})
    heavy = QueueConfig(name="a", parent="research", nominal={GPU: 8}, fair_weight=2.0)
    admission = cluster(*two_racks(), queues=[heavy, team("b", 8)])
    admission.set_cohort(cohort)
    admission.set_workload(workload("a1", workers(1, 8), queue="a"))
    admission.set_workload(workload("b1", workers(1, 8), queue="b"))
    assert set(admitted_of(bodies(admission.cycle(now=1.0)))) == {"ns/a1", "ns/b1"}
    admission.set_workload(workload("b2", workers(1, 8), queue="b", created_at=1))
    admission.set_workload(workload("a2", workers(1, 8), queue="a", created_at=2))
    decisions = bodies(admission.cycle(now=2.0))
    assert list(admitted_of(decisions)) == ["ns/a2"]
    assert pending_of(decisions)["ns/b2"].reason == "ExceedsQuota"


def test_a_cycle_of_cohorts_makes_its_queues_wait_invalid_and_nothing_else_stops() -> None:
    admission = cluster(*two_racks(), queues=[team("a", 8, cohort="x"), QueueConfig(name="q")])
    admission.set_cohort(CohortConfig(name="x", parent="y"))
    admission.set_cohort(CohortConfig(name="y", parent="x"))
    admission.set_workload(workload("a1", workers(1, 8), queue="a"))
    admission.set_workload(workload("q1", workers(1, 8), queue="q"))
    decisions = bodies(admission.cycle(now=1.0))
    assert list(admitted_of(decisions)) == ["ns/q1"]
    waits = pending_of(decisions)["ns/a1"]
    assert waits.reason == "Invalid"
    assert waits.message.startswith("queue a cannot be used: cohort x is invalid: ")
    assert "cycle" in waits.message
    # The cycle is broken: a is usable again.
    admission.remove_cohort("y")
    admission.set_cohort(CohortConfig(name="x"))
    assert list(admitted_of(bodies(admission.cycle(now=2.0)))) == ["ns/a1"]


def borrowed_scene(reclaim: ReclaimPolicy) -> Admission:
    """b borrows all of a's 16 GPUs (32 in the cohort, 32 on the nodes); a submits 16."""
    admission = cluster(*two_racks(), queues=[team("a", 16, reclaim=reclaim), team("b", 16)])
    admission.set_workload(workload("b-own", workers(2, 8), queue="b"))
    assert list(admitted_of(bodies(admission.cycle(now=1.0)))) == ["ns/b-own"]
    admission.set_workload(workload("b-borrow", workers(2, 8), queue="b", created_at=1))
    (borrowing,) = admitted_of(bodies(admission.cycle(now=2.0))).values()
    assert (borrowing.workload, borrowing.borrowed) == ("ns/b-borrow", {GPU: 16})
    admission.set_workload(workload("a1", workers(2, 8), queue="a", created_at=2))
    return admission


def test_a_lender_below_its_nominal_asks_preemption_to_reclaim_the_borrowed_gang() -> None:
    admission = borrowed_scene("Any")
    plan = admission.plan_reclaim(
        workload("a1", workers(2, 8), queue="a", created_at=2), team("a", 16)
    )
    assert plan is not None
    assert plan.victims == ("ns/b-borrow",)
    decisions = bodies(admission.cycle(now=3.0))
    (asked,) = [b for b in decisions if isinstance(b, PreemptRequested)]
    assert (asked.workload, asked.queue, asked.reclaim) == ("ns/a1", "a", True)
    assert pending_of(decisions)["ns/a1"].reason == "WaitingForPreemption"
    # Asked once while the request is outstanding.
    assert only(admission.cycle(now=4.0), PreemptRequested) == []
    # Preemption evicts the borrowing gang whole: its quota comes back, a1 is admitted on
    # the room nominated for it, within its nominal.
    event = Preempted(
        preemptor="ns/a1",
        preemptor_uid="uid-a1",
        victims=["ns/b-borrow"],
        mode={"ns/b-borrow": "restart"},
        nominated={"n3": {GPU: 8, "cpu": 1000, "pods": 1}, "n4": {GPU: 8, "cpu": 1000, "pods": 1}},
    )
    (released,) = bodies(admission.preempted(event, now=5.0))
    assert isinstance(released, Released)
    assert released.workload == "ns/b-borrow"
    for name in ("n3", "n4"):
        admission.capacity.update(node(name, "r2", applied=released.sequence))
    decisions = bodies(admission.cycle(now=6.0))
    a1 = admitted_of(decisions)["ns/a1"]
    assert (a1.borrowed, a1.nominated_by) == ({}, "ns/a1")
    # The evicted gang waits on quota and never asks to preempt back (b's policy is Never).
    assert pending_of(decisions)["ns/b-borrow"].reason == "ExceedsQuota"
    assert only(admission.cycle(now=7.0), PreemptRequested) == []


def test_quota_reclaimed_for_a_preemptor_is_held_for_it_until_it_is_admitted() -> None:
    # b-borrow is evicted for a1, but its pods still hold n3 and n4: a1 cannot be placed yet.
    # A free node n5 appears. b-small (8 GPUs, b's other queue member) would fit there by
    # borrowing back the quota just reclaimed for a1; it waits instead, and a1 is admitted
    # once its room is free, without a second preemption.
    admission = borrowed_scene("Any")
    assert len(only(admission.cycle(now=3.0), PreemptRequested)) == 1
    event = Preempted(
        preemptor="ns/a1",
        preemptor_uid="uid-a1",
        victims=["ns/b-borrow"],
        mode={"ns/b-borrow": "restart"},
        nominated={"n3": {GPU: 8, "cpu": 1000, "pods": 1}, "n4": {GPU: 8, "cpu": 1000, "pods": 1}},
        reclaimed={"ns/b-borrow": "InCohortReclamation"},
        cohort="research",
    )
    (released,) = bodies(admission.preempted(event, now=5.0))
    assert isinstance(released, Released)
    for name in ("n3", "n4"):  # the victim's pods are still terminating there
        admission.capacity.update(
            msg.capacity_node(name, "b1", "r2", gpus=8, free_gpus=0, applied=released.sequence)
        )
    admission.capacity.update(node("n5", "r3"))
    admission.set_workload(workload("b-small", workers(1, 8), queue="b", created_at=4))
    decisions = bodies(admission.cycle(now=6.0))
    assert admitted_of(decisions) == {}
    assert pending_of(decisions)["ns/b-small"].reason == "ExceedsQuota"
    for name in ("n3", "n4"):
        admission.capacity.update(node(name, "r2", applied=released.sequence))
    decisions = bodies(admission.cycle(now=7.0))
    assert list(admitted_of(decisions)) == ["ns/a1"]
    assert only(admission.cycle(now=8.0), PreemptRequested) == []
    assert only(admission.cycle(now=9.0), Admitted) == []


def test_a_queue_above_its_nominal_but_below_its_fair_share_asks_to_reclaim() -> None:
    # A 32-GPU pool: 8 nominal each, 16 the cohort's own. b holds 24 (16 borrowed), a holds 8
    # (its nominal). a2 would take a to 16, above its nominal but not above b's share: a asks
    # preemption (fair sharing) to take one of b's gangs. Once a holds 16 and b 16, neither
    # asks again.
    admission = cluster(
        *two_racks(), queues=[team("a", 8, reclaim="Any"), team("b", 8, reclaim="Any")]
    )
    admission.set_cohort(CohortConfig(name="research", nominal={GPU: 16}))
    for i in range(3):
        admission.set_workload(workload(f"b{i}", workers(1, 8), queue="b", created_at=i))
    admission.set_workload(workload("a1", workers(1, 8), queue="a", created_at=3))
    first = admitted_of(bodies(admission.cycle(now=1.0)))
    assert len(first) == 4
    (b2_node,) = first["ns/b2"].assignments["workers"].domains
    admission.set_workload(workload("a2", workers(1, 8), queue="a", created_at=4))
    plan = admission.plan_reclaim(
        workload("a2", workers(1, 8), queue="a", created_at=4), team("a", 8, reclaim="Any")
    )
    assert plan is not None
    assert (plan.victims, dict(plan.reasons)) == (("ns/b2",), {"ns/b2": "InCohortFairSharing"})
    (asked,) = only(admission.cycle(now=2.0), PreemptRequested)
    assert isinstance(asked, PreemptRequested)
    assert (asked.workload, asked.reclaim) == ("ns/a2", True)
    # Once b2 is gone and a2 admitted, a's next gang would take a above b: nobody asks.
    (released,) = bodies(
        admission.preempted(
            Preempted(
                preemptor="ns/a2",
                preemptor_uid="uid-a2",
                victims=["ns/b2"],
                mode={"ns/b2": "restart"},
                reclaimed={"ns/b2": "InCohortFairSharing"},
                cohort="research",
            ),
            now=3.0,
        )
    )
    assert isinstance(released, Released)
    _, rack, host = b2_node.values
    admission.capacity.update(node(host, rack, applied=released.sequence))
    assert "ns/a2" in admitted_of(bodies(admission.cycle(now=4.0)))
    admission.set_workload(workload("a3", workers(1, 8), queue="a", created_at=5))
    assert only(admission.cycle(now=5.0) + admission.cycle(now=6.0), PreemptRequested) == []


def test_training_never_reclaims_from_training_unless_its_queue_opts_in() -> None:
    admission = borrowed_scene("Never")
    decisions = bodies(admission.cycle(now=3.0))
    assert [b for b in decisions if isinstance(b, PreemptRequested)] == []
    assert pending_of(decisions)["ns/a1"].reason == "ExceedsQuota"


def test_lower_priority_reclaims_only_from_lower_priority_gangs() -> None:
    admission = borrowed_scene("LowerPriority")
    assert only(admission.cycle(now=3.0), PreemptRequested) == []
    urgent = workload("a2", workers(2, 8), queue="a", created_at=3, priority=10)
    admission.set_workload(urgent)
    (asked,) = only(admission.cycle(now=4.0), PreemptRequested)
    assert isinstance(asked, PreemptRequested)
    assert asked.workload == "ns/a2"
    assert asked.reclaim


def test_the_growth_of_an_admitted_workload_stays_within_what_its_tree_can_give() -> None:
    # a's nominal 8 and b's idle 8: a may hold 16 in all, so of 4 more pods of 4 GPUs only 2.
    admission = cluster(*two_racks(), queues=[team("a", 8), team("b", 8)])
    state = msg.workload("w", msg.podset(count=2, gpus=4), queue="a", service_type="inference")
    admission.set_workload(state)
    assert list(admitted_of(bodies(admission.cycle(now=1.0)))) == ["ns/w"]
    grown = msgspec.structs.replace(state, podsets=[msg.podset(count=6, gpus=4)])
    admission.set_workload(grown)
    decisions = bodies(admission.cycle(now=2.0) + admission.cycle(now=3.0))
    resized = admitted_of(decisions)["ns/w"]
    assert resized.charged[GPU] == 16
    assert pending_of(decisions)["ns/w"].reason == "ExceedsQuota"
    assert "2 more pods of workers: queue a: nvidia.com/gpu 16 in use" in (
        pending_of(decisions)["ns/w"].message
    )


def test_a_resize_reports_what_the_workload_borrows_after_it() -> None:
    # a's nominal 8 and b's idle 8. w holds 8 within a's nominal, grows by 8 (borrowed: the
    # resize borrows 8 from the cohort), then shrinks back to 4: what it gives back is what
    # its queue borrowed first, so it borrows nothing any more.
    admission = cluster(*two_racks(), queues=[team("a", 8), team("b", 8)])
    state = msg.workload("w", msg.podset(count=2, gpus=4), queue="a", service_type="inference")
    admission.set_workload(state)
    first = admitted_of(bodies(admission.cycle(now=1.0)))["ns/w"]
    assert (first.borrowed, first.cohort) == ({}, None)
    admission.set_workload(msgspec.structs.replace(state, podsets=[msg.podset(count=4, gpus=4)]))
    grown = admitted_of(bodies(admission.cycle(now=2.0)))["ns/w"]
    assert grown.resized
    assert (grown.charged[GPU], grown.borrowed, grown.cohort) == (16, {GPU: 8}, "research")
    assert borrowing_summary(grown) == "borrowing 8 GPUs from cohort research"

    admission.set_workload(msgspec.structs.replace(state, podsets=[msg.podset(count=1, gpus=4)]))
    assert admission.cycle(now=3.0) == []  # the shrink follows the pods, not the spec
    (decision,) = admission.replace(
        msg.replace_requested(
            "w",
            {"workers": grown.assignments["workers"].domains},
            admitted_sequence=grown.sequence,
            give_back=True,
        ),
        now=4.0,
    )
    shrunk = decision.body
    assert isinstance(shrunk, Admitted)
    assert (shrunk.charged[GPU], shrunk.borrowed, shrunk.cohort) == (4, {}, None)


def test_a_shrink_of_a_borrowing_workload_gives_back_borrowed_quota_first() -> None:
    # w borrows 8 of its 16; giving back 4 leaves it borrowing 4 (its queue still uses 12 of
    # nominal 8).
    admission = cluster(*two_racks(), queues=[team("a", 8), team("b", 8)])
    state = msg.workload("w", msg.podset(count=4, gpus=4), queue="a", service_type="inference")
    admission.set_workload(state)
    first = admitted_of(bodies(admission.cycle(now=1.0)))["ns/w"]
    assert first.borrowed == {GPU: 8}
    admission.set_workload(msgspec.structs.replace(state, podsets=[msg.podset(count=3, gpus=4)]))
    (decision,) = admission.replace(
        msg.replace_requested(
            "w",
            {"workers": first.assignments["workers"].domains},
            admitted_sequence=first.sequence,
            give_back=True,
        ),
        now=2.0,
    )
    shrunk = decision.body
    assert isinstance(shrunk, Admitted)
    assert (shrunk.charged[GPU], shrunk.borrowed, shrunk.cohort) == (12, {GPU: 4}, "research")
