"""Queue trees: the contract table of borrowing, lending, validation, fair sharing and reclaim.

Each case names where its facts come from: Kueue's own unit tests (pkg/cache
resource_node_test.go and fair_sharing_test.go, pkg/scheduler/preemption preemption_test.go:
the quotas, the admitted workloads, the incoming workload and the expected victims), KAI
Scheduler issues #1934 (reclaim to fair share) and #1750 (reclaim abandoned because of an
unrelated protected queue), and Volcano's reclaim (a queue reclaims its deserved share from
overused reclaimable queues, never below theirs). Quantities: cpu in millicores, GPUs and cards
in devices. Only the facts are taken, translated into tidegate's queue tree.
"""

import random
from collections.abc import Mapping

import pytest

from tidegate.model import CohortConfig, QueueConfig, QueuePreemption, WorkloadKey
from tidegate.model.events import ReclaimPolicy, ServiceType, WithinQueuePolicy
from tidegate.model.replica import QueueTally
from tidegate.policy.queuetree import (
    MAX_SHARE,
    SERVICE_RECLAIM,
    Contender,
    Dim,
    Holder,
    NodeId,
    Preemptor,
    QueueTree,
    ReclaimSettings,
    TreeState,
    check_admission,
    fair_order,
    plan_reclaim,
    report,
    usage_of_tallies,
    weighted_share,
)
from tidegate.policy.quota import QueueUsage, QuotaRequest

GPU = "nvidia.com/gpu"
CPU = "cpu"
H200 = "NVIDIA-H200"
CLASSICAL = ReclaimSettings(fair_sharing=False)


def q(
    name: str,
    parent: str | None = None,
    *,
    nominal: Mapping[str, int] | None = None,
    borrowing: Mapping[str, int] | None = None,
    lending: Mapping[str, int] | None = None,
    cards: Mapping[str, int] | None = None,
    card_borrowing: Mapping[str, int] | None = None,
    weight: float = 1.0,
    reclaim: ReclaimPolicy = "Never",
    within: WithinQueuePolicy = "Never",
    borrow_within: bool = False,
    threshold: int | None = None,
    quota: Mapping[str, int] | None = None,
    reclaimable: bool = True,
    invalid: str | None = None,
) -> QueueConfig:
    return QueueConfig(
        name=name,
        parent=parent,
        nominal=dict(nominal) if nominal is not None else None,
        borrowing_limit=dict(borrowing) if borrowing is not None else None,
        lending_limit=dict(lending) if lending is not None else None,
        card_nominal=dict(cards) if cards is not None else None,
        card_borrowing_limit=dict(card_borrowing) if card_borrowing is not None else None,
        fair_weight=weight,
        quota=dict(quota) if quota is not None else None,
        reclaimable=reclaimable,
        invalid_reason=invalid,
        preemption=QueuePreemption(
            reclaim_within_cohort=reclaim,
            within_cluster_queue=within,
            borrow_within_cohort="LowerPriority" if borrow_within else "Never",
            max_priority_threshold=threshold,
        ),
    )


def cohort(
    name: str,
    parent: str | None = None,
    *,
    nominal: Mapping[str, int] | None = None,
    borrowing: Mapping[str, int] | None = None,
    lending: Mapping[str, int] | None = None,
    quota: Mapping[str, int] | None = None,
    weight: float = 1.0,
) -> CohortConfig:
    return CohortConfig(
        name=name,
        parent=parent,
        nominal=dict(nominal) if nominal is not None else None,
        borrowing_limit=dict(borrowing) if borrowing is not None else None,
        lending_limit=dict(lending) if lending is not None else None,
        quota=dict(quota) if quota is not None else None,
        fair_weight=weight,
    )


def use(**per_queue: Mapping[str, int]) -> dict[str, QueueUsage]:
    return {name: QueueUsage(resources=dict(amounts)) for name, amounts in per_queue.items()}


def need(
    resources: Mapping[str, int] | None = None, cards: Mapping[str, int] | None = None
) -> QuotaRequest:
    return QuotaRequest(resources=dict(resources or {}), cards=dict(cards or {}))


def gang(
    key: str,
    queue: str,
    *,
    cpu: int = 0,
    gpu: int = 0,
    cards: Mapping[str, int] | None = None,
    priority: int = 0,
    admitted_at: float = 0.0,
    created_at: float = 0.0,
    service_type: ServiceType = "training",
    protected: str | None = None,
) -> Holder:
    resources = {name: amount for name, amount in ((CPU, cpu), (GPU, gpu)) if amount}
    return Holder(
        key=WorkloadKey(f"ns/{key}"),
        queue=queue,
        holds=need(resources, cards),
        priority=priority,
        admitted_at=admitted_at,
        created_at=created_at,
        service_type=service_type,
        protected=protected,
    )


def usage_of(holders: list[Holder]) -> dict[str, QueueUsage]:
    out: dict[str, dict[str, int]] = {}
    cards: dict[str, dict[str, int]] = {}
    for holder in holders:
        for name, amount in holder.holds.resources.items():
            out.setdefault(holder.queue, {})[name] = out.get(holder.queue, {}).get(name, 0) + amount
        for name, amount in holder.holds.cards.items():
            cards.setdefault(holder.queue, {})[name] = (
                cards.get(holder.queue, {}).get(name, 0) + amount
            )
    return {
        name: QueueUsage(resources=out.get(name, {}), cards=cards.get(name, {}))
        for name in set(out) | set(cards)
    }


def keys(*names: str) -> tuple[WorkloadKey, ...]:
    return tuple(WorkloadKey(f"ns/{name}") for name in names)


# --------------------------------------------------------------------------- borrowing, lending


def test_lending_limits_add_up_in_the_cohort() -> None:
    # Kueue pkg/cache resource_node_test.go TestCohortLendable: cq1 cpu 8 (lending limit 8) and
    # example.com/gpu 3 (lending limit 3), cq2 cpu 2 (lending limit 2): the cohort can lend
    # 10 cpu and 3 GPUs.
    tree = QueueTree.build(
        [
            q("cq1", "test-cohort", nominal={CPU: 8000, GPU: 3}, lending={CPU: 8000, GPU: 3}),
            q("cq2", "test-cohort", nominal={CPU: 2000}, lending={CPU: 2000}),
        ],
        [],
    )
    state = TreeState(tree, {})
    assert state.subtree_quota[NodeId("cohort", "test-cohort")] == {
        Dim("resource", CPU): 10_000,
        Dim("resource", GPU): 3,
    }


def test_a_queue_over_its_nominal_borrows_its_cohorts_idle_quota() -> None:
    # Kueue ClusterQueue semantics (c1/c2 of preemption_test.go: nominal 6 each, one cohort).
    tree = QueueTree.build(
        [q("c1", "cohort", nominal={CPU: 6000}), q("c2", "cohort", nominal={CPU: 6000})], []
    )
    fit = check_admission(tree, use(c1={CPU: 5000}), "c1", need({CPU: 3000}))
    assert fit.fits
    assert fit.borrowing
    assert fit.borrowed == {Dim("resource", CPU): 2000}
    assert check_admission(tree, use(c1={CPU: 2000}), "c1", need({CPU: 3000})).borrowed == {}


def test_a_borrowing_limit_bounds_what_a_queue_takes_above_nominal() -> None:
    # Kueue c1 of preemption_test.go has nominal 6 and borrowing limit 6; here the limit is 2.
    tree = QueueTree.build(
        [
            q("c1", "cohort", nominal={CPU: 6000}, borrowing={CPU: 2000}),
            q("c2", "cohort", nominal={CPU: 6000}),
        ],
        [],
    )
    assert check_admission(tree, use(c1={CPU: 6000}), "c1", need({CPU: 2000})).fits
    fit = check_admission(tree, use(c1={CPU: 6000}), "c1", need({CPU: 3000}))
    assert (fit.fits, fit.reason, fit.lasting) == (False, "ExceedsQuota", False)
    assert fit.short == {Dim("resource", CPU): 1000}
    assert fit.message == (
        "queue c1: cpu 6 in use + 3 requested > 8 available now (nominal 6; the rest is what "
        "cohort cohort can lend while others use it)"
    )
    lasting = check_admission(tree, {}, "c1", need({CPU: 9000}))
    assert lasting.lasting
    assert lasting.message == (
        "queue c1: cpu 9 requested > 8 its tree can ever give it (nominal 6; queue c1 "
        "borrowing limit 2)"
    )


def test_a_lending_limit_keeps_the_rest_of_a_lenders_nominal_for_it() -> None:
    # Kueue preemption_test.go "cohort-lend": lend1 cpu 6 with lending limit 4, lend2 cpu 6
    # with lending limit 2: lend2 keeps 4 for itself, lend1 keeps 2.
    tree = QueueTree.build(
        [
            q("lend1", "cohort-lend", nominal={CPU: 6000}, lending={CPU: 4000}),
            q("lend2", "cohort-lend", nominal={CPU: 6000}, lending={CPU: 2000}),
        ],
        [],
    )
    # lend1 may take its 6 and lend2's 2 lendable, never lend2's guaranteed 4.
    assert check_admission(tree, {}, "lend1", need({CPU: 8000})).fits
    fit = check_admission(tree, {}, "lend1", need({CPU: 9000}))
    assert fit.lasting
    assert fit.short == {Dim("resource", CPU): 1000}
    # While lend1 borrows all it can, lend2 still gets its guaranteed 4 at once.
    assert check_admission(tree, use(lend1={CPU: 8000}), "lend2", need({CPU: 4000})).fits
    assert not check_admission(tree, use(lend1={CPU: 8000}), "lend2", need({CPU: 5000})).fits


def test_cohorts_nest_and_their_limits_bound_the_whole_subtree() -> None:
    # Kueue KEP-79 hierarchical cohorts: a cohort's own nominal joins the pool, its borrowing
    # limit bounds what its subtree takes from its parent.
    tree = QueueTree.build(
        [
            q("team-a", "research", nominal={GPU: 4}),
            q("team-b", "research", nominal={GPU: 4}),
            q("serving", "org", nominal={GPU: 8}),
        ],
        [cohort("org", nominal={GPU: 8}), cohort("research", "org", borrowing={GPU: 6})],
    )
    # research holds 8 of its own and may borrow 6 of org's 16 others: team-a up to 14.
    assert check_admission(tree, {}, "team-a", need({GPU: 14})).fits
    fit = check_admission(tree, {}, "team-a", need({GPU: 15}))
    assert fit.lasting
    assert "cohort research borrowing limit 6" in (fit.message or "")
    # serving uses its 8 and org's 8: research can lend nothing beyond its own 8.
    state = use(serving={GPU: 16})
    assert check_admission(tree, state, "team-a", need({GPU: 8})).fits
    assert not check_admission(tree, state, "team-a", need({GPU: 9})).fits


def test_a_cohort_capability_is_a_hard_ceiling_on_its_subtree() -> None:
    tree = QueueTree.build(
        [q("a", "research", nominal={GPU: 8}), q("b", "research", nominal={GPU: 8})],
        [cohort("research", quota={GPU: 10})],
    )
    fit = check_admission(tree, use(a={GPU: 6}), "b", need({GPU: 6}))
    assert (fit.fits, fit.reason) == (False, "ExceedsQuota")
    assert fit.message == "cohort research: nvidia.com/gpu 6 in use + 6 requested > quota 10"
    assert check_admission(tree, use(a={GPU: 6}), "b", need({GPU: 4})).fits


def test_a_queue_capability_stays_its_ceiling_whatever_it_could_borrow() -> None:
    tree = QueueTree.build(
        [q("a", "c", nominal={GPU: 4}, quota={GPU: 6}), q("b", "c", nominal={GPU: 8})], []
    )
    fit = check_admission(tree, use(a={GPU: 4}), "a", need({GPU: 4}))
    assert fit.message == "queue a: nvidia.com/gpu 4 in use + 4 requested > quota 6"
    assert check_admission(tree, use(a={GPU: 4}), "a", need({GPU: 2})).borrowed == {
        Dim("resource", GPU): 2
    }


def test_card_quotas_borrow_per_card_model() -> None:
    # Volcano's tidal design counts GPUs per card model (volcano.sh/card.quota); Kueue's
    # flavors play that part: quota per flavor, borrowed per flavor.
    tree = QueueTree.build(
        [q("a", "c", cards={H200: 4}), q("b", "c", cards={H200: 4, "NVIDIA-A100": 2})], []
    )
    cards = {"a": QueueUsage(cards={H200: 4})}
    fit = check_admission(tree, cards, "a", need(cards={H200: 3}))
    assert fit.fits
    assert fit.borrowed == {Dim("card", H200): 3}
    fit = check_admission(tree, cards, "a", need(cards={H200: 5}))
    assert (fit.reason, fit.short) == ("CardQuotaExceeded", {Dim("card", H200): 1})
    assert check_admission(tree, cards, "a", need(cards={"NVIDIA-A100": 2})).fits


def test_what_no_node_of_the_tree_names_is_not_shared_and_not_limited() -> None:
    tree = QueueTree.build([q("a", "c", nominal={GPU: 1}), q("b", "c")], [])
    assert check_admission(tree, {}, "a", need({CPU: 10**9, "memory": 2**50})).fits
    # A queue that names nothing still borrows what its tree shares: nominal 0.
    assert check_admission(tree, {}, "b", need({GPU: 1})).borrowed == {Dim("resource", GPU): 1}


def test_a_queue_in_no_cohort_cannot_exceed_its_nominal() -> None:
    # Kueue fair_sharing_test.go "no cohort": a ClusterQueue without a cohort has nothing to
    # borrow from.
    tree = QueueTree.build([q("standalone", nominal={CPU: 6000})], [])
    fit = check_admission(tree, use(standalone={CPU: 5000}), "standalone", need({CPU: 2000}))
    assert (fit.fits, fit.lasting) == (False, False)
    assert (
        fit.message == "queue standalone: cpu 5 in use + 2 requested > 6 available now (nominal 6)"
    )
    assert check_admission(tree, {}, "standalone", need({CPU: 7000})).lasting


def test_a_shortfall_waiting_never_cures_is_the_one_reported() -> None:
    tree = QueueTree.build([q("a", "c", nominal={GPU: 2}, quota={CPU: 4000}), q("b", "c")], [])
    fit = check_admission(tree, use(a={CPU: 3000}), "a", need({CPU: 2000, GPU: 3}))
    assert fit.lasting
    assert (
        fit.message
        == "queue a: nvidia.com/gpu 3 requested > 2 its tree can ever give it (nominal 2)"
    )
    assert fit.short == {Dim("resource", CPU): 1000, Dim("resource", GPU): 1}


def test_the_report_shows_quota_usage_borrowed_lendable_and_share_per_node() -> None:
    tree = QueueTree.build(
        [q("a", "c", nominal={GPU: 4}), q("b", "c", nominal={GPU: 4}, lending={GPU: 1})],
        [cohort("c", quota={GPU: 8})],
    )
    rows = {row.id: row for row in report(tree, use(a={GPU: 6}, b={GPU: 1}))}
    gpu = Dim("resource", GPU)
    assert list(rows) == [NodeId("cohort", "c"), NodeId("queue", "a"), NodeId("queue", "b")]
    a, b, c = rows[NodeId("queue", "a")], rows[NodeId("queue", "b")], rows[NodeId("cohort", "c")]
    assert (a.depth, a.nominal, a.usage, a.borrowed, a.lendable) == (
        1,
        {gpu: 4},
        {gpu: 6},
        {gpu: 2},
        {},
    )
    # b keeps 3 of its 4 (lending limit 1) and uses 1 of those: it can lend its 1.
    assert (b.usage, b.borrowed, b.lendable) == ({gpu: 1}, {}, {gpu: 1})
    assert (a.share, a.dominant) == (2 * 1000 // 5, gpu)  # 2 borrowed of the 5 the cohort pools
    assert (c.quota, c.usage, c.blocked) == ({gpu: 5}, {gpu: 7}, None)


def test_usage_comes_from_the_replicas_queue_tallies() -> None:
    tallies = {"a": QueueTally(admitted=2, usage={GPU: 6}, cards={H200: 6})}
    assert usage_of_tallies(tallies) == {"a": QueueUsage(resources={GPU: 6}, cards={H200: 6})}


# --------------------------------------------------------------------------- validation


def test_a_cycle_makes_its_cohorts_invalid_and_their_queues_wait_nothing_else_stops() -> None:
    tree = QueueTree.build(
        [q("stuck", "x", nominal={GPU: 4}), q("fine", "z", nominal={GPU: 4})],
        [cohort("x", "y"), cohort("y", "x"), cohort("z")],
    )
    assert tree.invalid() == {
        NodeId("cohort", "x"): "parent chain x → y → x is a cycle",
        NodeId("cohort", "y"): "parent chain x → y → x is a cycle",
    }
    fit = check_admission(tree, {}, "stuck", need({GPU: 1}))
    assert (fit.reason, fit.message) == (
        "Invalid",
        "cohort x is invalid: parent chain x → y → x is a cycle",
    )
    assert check_admission(tree, {}, "fine", need({GPU: 4})).fits


def test_a_negative_amount_makes_that_queue_invalid_and_its_siblings_go_on() -> None:
    tree = QueueTree.build([q("bad", "c", nominal={GPU: -1}), q("good", "c", nominal={GPU: 4})], [])
    fit = check_admission(tree, {}, "bad", need({GPU: 1}))
    assert (fit.reason, fit.message) == (
        "Invalid",
        "queue bad is invalid: nominal[nvidia.com/gpu]: -1 is negative",
    )
    assert check_admission(tree, {}, "good", need({GPU: 4})).fits


def test_an_invalid_queue_lends_nothing_and_its_admitted_work_still_counts_in_ceilings() -> None:
    tree = QueueTree.build(
        [
            q(
                "bad",
                "c",
                nominal={GPU: 4},
                invalid="Queue bad: spec.nominalQuota.x: 'y' is not a quantity",
            ),
            q("good", "c", nominal={GPU: 4}),
        ],
        [cohort("c", quota={GPU: 6})],
    )
    assert tree.blocked(NodeId("queue", "bad")) == (
        "queue bad is invalid: Queue bad: spec.nominalQuota.x: 'y' is not a quantity"
    )
    assert not check_admission(tree, {}, "good", need({GPU: 5})).fits  # bad's 4 is not lent
    fit = check_admission(tree, use(bad={GPU: 3}), "good", need({GPU: 4}))
    assert fit.message == "cohort c: nvidia.com/gpu 3 in use + 4 requested > quota 6"


def test_a_child_whose_nominal_exceeds_what_its_parent_can_hold_is_invalid() -> None:
    # Volcano hierarchical queues: a child's deserved/guarantee cannot exceed its parent's;
    # KAI: a child's quota comes out of its parent's.
    tree = QueueTree.build(
        [q("big", "org", nominal={GPU: 16}), q("small", "org", nominal={GPU: 4})],
        [cohort("org", quota={GPU: 8})],
    )
    assert tree.invalid() == {
        NodeId("queue", "big"): (
            "nominal nvidia.com/gpu 16 exceeds what cohort org can ever hold: capability 8 of "
            "cohort org"
        )
    }
    assert tree.warnings[NodeId("cohort", "org")] == [
        "its children's nominal nvidia.com/gpu 20 exceeds capability 8 of cohort org: not "
        "every guarantee can be met at once"
    ]
    assert check_admission(tree, {}, "small", need({GPU: 4})).fits


def test_a_parent_no_cohort_defines_is_an_empty_cohort_at_the_root() -> None:
    # Kueue: a cohort named by ClusterQueues exists implicitly, with no quota of its own.
    tree = QueueTree.build(
        [q("a", "ghost", nominal={GPU: 2}), q("b", "ghost", nominal={GPU: 2})], []
    )
    assert tree.nodes[NodeId("cohort", "ghost")].config is None
    assert check_admission(tree, {}, "a", need({GPU: 4})).fits
    assert check_admission(tree, {}, "nowhere", need({GPU: 1})).reason == "QueueNotFound"


# --------------------------------------------------------------------------- fair sharing

DRS_CASES = {
    # Kueue pkg/cache fair_sharing_test.go TestDominantResourceShare; the lending queue has
    # cpu 8 and GPU 5 unless the case says otherwise. Expected values are Kueue's.
    "usage below nominal": ({CPU: 1000, GPU: 2}, {}, 1.0, (0, None)),
    "usage above nominal": ({CPU: 3000, GPU: 7}, {}, 1.0, (200, GPU)),  # (7-5)*1000/10
    "one resource above nominal": ({CPU: 3000, GPU: 3}, {}, 1.0, (100, CPU)),  # (3-2)*1000/10
    "usage with workload above nominal": (
        {CPU: 1000, GPU: 2},
        {CPU: 4000, GPU: 4},
        1.0,
        (300, CPU),  # (1+4-2)*1000/10
    ),
    "above nominal with integer weight": ({GPU: 7}, {}, 2.0, (100, GPU)),  # ((7-5)*1000/10)/2
    "above nominal with decimal weight": ({GPU: 7}, {}, 0.5, (400, GPU)),
    "above nominal with zero weight": ({GPU: 7}, {}, 0.0, (MAX_SHARE, None)),
}


@pytest.mark.parametrize("case", sorted(DRS_CASES))
def test_weighted_dominant_resource_share_matches_kueue(case: str) -> None:
    used, extra, weight, (share, dominant) = DRS_CASES[case]
    tree = QueueTree.build(
        [
            q("cq", "test-cohort", nominal={CPU: 2000, GPU: 5}, weight=weight),
            q("lending-cq", "test-cohort", nominal={CPU: 8000, GPU: 5}),
        ],
        [],
    )
    state = TreeState(tree, use(cq=used))
    extra_dims = {Dim("resource", name): amount for name, amount in extra.items()}
    got = weighted_share(state, NodeId("queue", "cq"), extra_dims)
    assert got == (share, Dim("resource", dominant) if dominant else None)


def test_a_resource_nothing_lends_is_left_out_of_the_share() -> None:
    # Kueue fair_sharing_test.go "A resource with zero lendable": GPUs have lending limit 0
    # everywhere, so only cpu counts: (1+4-2)*1000/10.
    tree = QueueTree.build(
        [
            q("cq", "c", nominal={CPU: 2000, GPU: 2}, lending={GPU: 0}),
            q("lending-cq", "c", nominal={CPU: 8000, GPU: 64}, lending={GPU: 0}),
        ],
        [],
    )
    state = TreeState(tree, use(cq={CPU: 1000, GPU: 1}))
    extra = {Dim("resource", CPU): 4000, Dim("resource", GPU): 4}
    assert weighted_share(state, NodeId("queue", "cq"), extra) == (300, Dim("resource", CPU))


def test_a_queue_in_no_cohort_has_share_zero() -> None:
    # Kueue fair_sharing_test.go "no cohort".
    tree = QueueTree.build([q("cq", nominal={CPU: 2000})], [])
    assert weighted_share(TreeState(tree, use(cq={CPU: 9000})), NodeId("queue", "cq")) == (0, None)


def contender(
    queue: str, name: str, gpu: int = 1, priority: int = 0, created: float = 0.0
) -> Contender:
    return Contender(
        queue=queue,
        key=WorkloadKey(f"ns/{name}"),
        priority=priority,
        created_at=created,
        request=need({GPU: gpu}),
    )


def test_the_queue_with_the_lower_weighted_share_goes_first() -> None:
    tree = QueueTree.build([q("a", "c", nominal={GPU: 4}), q("b", "c", nominal={GPU: 4})], [])
    usage = use(a={GPU: 6}, b={GPU: 4})
    order = fair_order(tree, usage, [contender("a", "a1", priority=9), contender("b", "b1")])
    assert [c.queue for c in order] == ["b", "a"]  # b: 1/8 borrowed, a: 3/8


def test_a_higher_weight_earns_a_larger_part_of_what_is_lent() -> None:
    tree = QueueTree.build(
        [q("a", "c", nominal={GPU: 4}, weight=4.0), q("b", "c", nominal={GPU: 4})], []
    )
    usage = use(a={GPU: 6}, b={GPU: 4})
    assert [
        c.queue for c in fair_order(tree, usage, [contender("b", "b1"), contender("a", "a1")])
    ] == ["a", "b"]


def test_equal_shares_fall_back_to_priority_then_fifo_then_key() -> None:
    # kueue#6763: random tie-breaks caused extra preemptions; ties here are total.
    tree = QueueTree.build([q("a", "c", nominal={GPU: 4}), q("b", "c", nominal={GPU: 4})], [])
    heads = [
        contender("a", "late", created=5.0),
        contender("b", "high", priority=3, created=9.0),
        contender("b", "early", created=1.0),
        contender("a", "same-b", created=5.0),
    ]
    expected = ["high", "early", "late", "same-b"]
    for seed in range(5):
        shuffled = list(heads)
        random.Random(seed).shuffle(shuffled)
        assert [c.key.split("/")[1] for c in fair_order(tree, {}, shuffled)] == expected


def test_competing_cohorts_are_compared_at_the_level_where_they_meet() -> None:
    # Kueue's fair-sharing tournament over hierarchical cohorts (kueue#3779: shares must be
    # compared between siblings, not leaf against leaf across the tree).
    tree = QueueTree.build(
        [
            q("a1", "left", nominal={GPU: 4}),
            q("a2", "left", nominal={GPU: 4}),
            q("b1", "right", nominal={GPU: 8}),
        ],
        [cohort("root"), cohort("left", "root"), cohort("right", "root")],
    )
    # a2 borrows a1's idle 4, so left as a whole is at its quota: a1's gang would make left
    # borrow from right, b1's borrows nothing. Leaf against leaf both shares are 0 and the key
    # would put a1 first.
    usage = use(a2={GPU: 8}, b1={GPU: 0})
    order = fair_order(tree, usage, [contender("a1", "x"), contender("b1", "y")])
    assert [c.queue for c in order] == ["b1", "a1"]


# --------------------------------------------------------------------------- reclaim (Kueue)


def kueue_cohort() -> QueueTree:
    # Kueue preemption_test.go defaultClusterQueues: c1 (cpu 6, borrowing limit 6,
    # withinClusterQueue LowerPriority, reclaimWithinCohort LowerPriority) and c2 (cpu 6,
    # borrowing limit 6, withinClusterQueue Never, reclaimWithinCohort Any) in "cohort";
    # lend1 (cpu 6, lending limit 4) and lend2 (cpu 6, lending limit 2), both LowerPriority.
    return QueueTree.build(
        [
            q(
                "c1",
                "cohort",
                nominal={CPU: 6000},
                borrowing={CPU: 6000},
                within="LowerPriority",
                reclaim="LowerPriority",
            ),
            q(
                "c2",
                "cohort",
                nominal={CPU: 6000},
                borrowing={CPU: 6000},
                within="Never",
                reclaim="Any",
            ),
            q(
                "lend1",
                "cohort-lend",
                nominal={CPU: 6000},
                lending={CPU: 4000},
                within="LowerPriority",
                reclaim="LowerPriority",
            ),
            q(
                "lend2",
                "cohort-lend",
                nominal={CPU: 6000},
                lending={CPU: 2000},
                within="LowerPriority",
                reclaim="LowerPriority",
            ),
            q("standalone", nominal={CPU: 6000}, within="LowerOrNewerEqualPriority"),
        ],
        [],
    )


def shared_cohort() -> QueueTree:
    # Kueue preemption_test.go "with_shared_cq": a_standard, b_standard, a_best_effort (cpu 1,
    # borrowing limit 12), b_best_effort (cpu 0, borrowing limit 13), shared (cpu 10); the
    # first four have borrowWithinCohort LowerPriority with maxPriorityThreshold 0.
    return QueueTree.build(
        [
            q(
                "a_standard",
                "with_shared_cq",
                nominal={CPU: 1000},
                borrowing={CPU: 12000},
                reclaim="LowerPriority",
                borrow_within=True,
                threshold=0,
            ),
            q(
                "b_standard",
                "with_shared_cq",
                nominal={CPU: 1000},
                borrowing={CPU: 12000},
                within="LowerPriority",
                reclaim="Any",
                borrow_within=True,
                threshold=0,
            ),
            q(
                "a_best_effort",
                "with_shared_cq",
                nominal={CPU: 1000},
                borrowing={CPU: 12000},
                reclaim="LowerPriority",
                borrow_within=True,
                threshold=0,
            ),
            q(
                "b_best_effort",
                "with_shared_cq",
                nominal={CPU: 0},
                borrowing={CPU: 13000},
                reclaim="LowerPriority",
                borrow_within=True,
                threshold=0,
            ),
            q("shared", "with_shared_cq", nominal={CPU: 10000}),
        ],
        [],
    )


KUEUE_RECLAIM = {
    # name: (tree, admitted gangs, incoming (queue, cpu, priority), expected victims, reasons)
    "reclaim quota from borrower": (
        kueue_cohort,
        [
            gang("c1-low", "c1", cpu=3000, priority=-1),
            gang("c2-mid", "c2", cpu=3000),
            gang("c2-high", "c2", cpu=6000, priority=1),
        ],
        ("c1", 3000, 1),
        {"c2-mid": "InCohortReclamation"},
    ),
    "not enough workloads borrowing": (
        kueue_cohort,
        [
            gang("c1-high", "c1", cpu=4000, priority=1),
            gang("c2-low-1", "c2", cpu=4000, priority=-1),
            gang("c2-low-2", "c2", cpu=4000, priority=-1),
        ],
        ("c1", 4000, 1),
        {},
    ),
    "preempting locally and borrowing same resource in cohort": (
        kueue_cohort,
        [
            gang("c1-med", "c1", cpu=4000),
            gang("c1-low", "c1", cpu=4000, priority=-1),
            gang("c2-low-1", "c2", cpu=4000, priority=-1),
        ],
        ("c1", 4000, 1),
        {"c1-low": "InClusterQueue"},
    ),
    "do not reclaim borrowed quota from same priority for LowerPriority": (
        kueue_cohort,
        [gang("c1", "c1", cpu=2000), gang("c2-1", "c2", cpu=4000), gang("c2-2", "c2", cpu=4000)],
        ("c1", 4000, 0),
        {},
    ),
    "reclaim borrowed quota from same priority for Any": (
        kueue_cohort,
        [
            gang("c1-1", "c1", cpu=4000),
            gang("c1-2", "c1", cpu=4000, priority=1),
            gang("c2", "c2", cpu=2000),
        ],
        ("c2", 4000, 0),
        {"c1-1": "InCohortReclamation"},
    ),
    "preempt from all ClusterQueues in cohort": (
        kueue_cohort,
        [
            gang("c1-low", "c1", cpu=3000, priority=-1),
            gang("c1-mid", "c1", cpu=2000),
            gang("c2-low", "c2", cpu=3000, priority=-1),
            gang("c2-mid", "c2", cpu=4000),
        ],
        ("c1", 4000, 0),
        {"c1-low": "InClusterQueue", "c2-low": "InCohortReclamation"},
    ),
    "reclaim quota from lender": (
        kueue_cohort,
        [
            gang("lend1-low", "lend1", cpu=3000, priority=-1),
            gang("lend2-mid", "lend2", cpu=3000),
            gang("lend2-high", "lend2", cpu=4000, priority=1),
        ],
        ("lend1", 3000, 1),
        {"lend2-mid": "InCohortReclamation"},
    ),
    # Kueue's "can't preempt workloads in ClusterQueue for withinClusterQueue=Never", with c1
    # holding its nominal so that the incoming workload really does not fit.
    "no preemption inside a queue whose withinClusterQueue is Never": (
        kueue_cohort,
        [gang("c2-low", "c2", cpu=3000, priority=-1), gang("c1-full", "c1", cpu=6000, priority=-1)],
        ("c2", 4000, 1),
        {},
    ),
    "BorrowWithinCohort lets a borrower preempt a lower-priority gang of another queue": (
        shared_cohort,
        [
            gang("a_best_effort_low", "a_best_effort", cpu=10000, priority=-1),
            gang("b_best_effort_low", "b_best_effort", cpu=1000, priority=-1),
        ],
        ("a_standard", 10000, 0),
        {"a_best_effort_low": "InCohortReclaimWhileBorrowing"},
    ),
    "BorrowWithinCohort never reaches above maxPriorityThreshold while still borrowing": (
        shared_cohort,
        [gang("b_standard", "b_standard", cpu=10000, priority=1)],
        ("a_standard", 10000, 2),
        {},
    ),
    "above maxPriorityThreshold when the preemptor ends within its nominal": (
        shared_cohort,
        [gang("b_standard", "b_standard", cpu=13000, priority=1)],
        ("a_standard", 1000, 2),
        {"b_standard": "InCohortReclamation"},
    ),
}


@pytest.mark.parametrize("case", sorted(KUEUE_RECLAIM))
def test_reclaim_matches_kueue(case: str) -> None:
    make, holders, (queue, cpu, priority), expected = KUEUE_RECLAIM[case]
    tree = make()
    preemptor = Preemptor(
        key=WorkloadKey("ns/in"), queue=queue, request=need({CPU: cpu}), priority=priority
    )
    plan = plan_reclaim(tree, usage_of(holders), preemptor, holders, CLASSICAL)
    assert not check_admission(tree, usage_of(holders), queue, preemptor.request).fits
    assert set(plan.victims) == set(keys(*expected))
    assert dict(plan.reasons) == {WorkloadKey(f"ns/{k}"): v for k, v in expected.items()}
    assert plan.outcome == ("reclaims" if expected else "cannot")
    if expected:
        assert plan.fit is not None
        assert plan.fit.fits


def test_within_a_queue_the_newer_of_equal_priority_goes_first() -> None:
    # Kueue preemption_test.go "preempt newer workloads with the same priority"
    # (withinClusterQueue LowerOrNewerEqualPriority): wl2 was admitted a second after wl3.
    holders = [
        gang("wl1", "standalone", cpu=2000, priority=2, admitted_at=100.0, created_at=100.0),
        gang("wl2", "standalone", cpu=2000, priority=1, admitted_at=101.0, created_at=100.0),
        gang("wl3", "standalone", cpu=2000, priority=1, admitted_at=100.0, created_at=100.0),
    ]
    preemptor = Preemptor(
        key=WorkloadKey("ns/in"),
        queue="standalone",
        request=need({CPU: 2000}),
        priority=1,
        created_at=85.0,
    )
    plan = plan_reclaim(kueue_cohort(), usage_of(holders), preemptor, holders, CLASSICAL)
    assert plan.victims == keys("wl2")


def test_the_minimal_set_leaves_out_gangs_it_does_not_need() -> None:
    # Kueue preemption_test.go "minimal set excludes low priority": low 1, mid 2, high 3 in a
    # queue of 6; an incoming 2 of priority 1 preempts only mid.
    tree = QueueTree.build([q("standalone", nominal={CPU: 6000}, within="LowerPriority")], [])
    holders = [
        gang("low", "standalone", cpu=1000, priority=-1),
        gang("mid", "standalone", cpu=2000),
        gang("high", "standalone", cpu=3000, priority=1),
    ]
    preemptor = Preemptor(
        key=WorkloadKey("ns/in"), queue="standalone", request=need({CPU: 2000}), priority=1
    )
    assert plan_reclaim(tree, usage_of(holders), preemptor, holders).victims == keys("mid")


# --------------------------------------------------------------------------- reclaim (KAI, Volcano)


def users_tree() -> QueueTree:
    # KAI#1934: users alice and bob (quota Q, weight 1) under "shared" (quota 0 of its own in
    # KAI; here the cluster's remaining 12 GPUs are shared's nominal), one 16-GPU pool. The
    # platform team opts bob into reclaim (reclaimWithinCohort: Any).
    return QueueTree.build(
        [
            q("alice", "shared", nominal={GPU: 2}, reclaim="Any"),
            q("bob", "shared", nominal={GPU: 2}, reclaim="Any"),
        ],
        [cohort("shared", nominal={GPU: 12})],
    )


def reclaim_until_stuck(
    tree: QueueTree, holders: list[Holder], settings: ReclaimSettings
) -> list[Holder]:
    """Bob submits 2-GPU gangs one after another; each is admitted after its reclaim."""
    for step in range(8):
        preemptor = Preemptor(
            key=WorkloadKey(f"ns/bob-{step}"), queue="bob", request=need({GPU: 2})
        )
        plan = plan_reclaim(tree, usage_of(holders), preemptor, holders, settings)
        if plan.outcome == "cannot":
            break
        holders = [h for h in holders if h.key not in plan.victims]
        holders.append(gang(f"bob-{step}", "bob", gpu=2, admitted_at=100.0 + step))
    return holders


def test_reclaim_restores_the_fair_share_not_only_the_guaranteed_quota() -> None:
    # KAI#1934: with alice running the whole cluster and bob idle, bob should get half (its
    # fair share with equal weights), not only its quota Q: fair-share preemption does that.
    alice = [gang(f"alice-{i}", "alice", gpu=2, admitted_at=float(i)) for i in range(8)]
    after = reclaim_until_stuck(users_tree(), alice, ReclaimSettings())
    held = usage_of(after)
    assert (held["alice"].resources[GPU], held["bob"].resources[GPU]) == (8, 8)
    # The youngest of alice's gangs went first.
    assert sorted(h.key for h in after if h.queue == "alice") == list(
        keys(*(f"alice-{i}" for i in range(4)))
    )


def test_without_fair_sharing_reclaim_stops_at_the_guaranteed_quota() -> None:
    # KAI#1934, what the reporter saw: bob reclaims only up to its quota Q and stops.
    alice = [gang(f"alice-{i}", "alice", gpu=2, admitted_at=float(i)) for i in range(8)]
    after = reclaim_until_stuck(users_tree(), alice, CLASSICAL)
    assert usage_of(after)["bob"].resources[GPU] == 2


def test_the_services_plan_reclaim_with_fair_sharing() -> None:
    # The setting the admission and preemption services and `tidegate admit` share: Kueue's
    # fair sharing with its two strategies, in order.
    assert SERVICE_RECLAIM.fair_sharing
    assert SERVICE_RECLAIM.strategies == ("LessThanOrEqualToFinalShare", "LessThanInitialShare")


def test_a_queue_within_its_nominal_is_never_a_fair_share_victim() -> None:
    # a and b are within their nominal, c borrows what a lent: a takes back from c, never from
    # b, even though b's gang alone would free enough and ranks first (lower priority). Kueue
    # takes fair-share victims only from queues that borrow.
    tree = QueueTree.build(
        [
            q("a", "pool", nominal={GPU: 4}, reclaim="Any"),
            q("b", "pool", nominal={GPU: 4}),
            q("c", "pool", nominal={GPU: 0}),
        ],
        [],
    )
    holders = [gang("b-own", "b", gpu=4, priority=-1), gang("c-borrow", "c", gpu=2)]
    preemptor = Preemptor(key=WorkloadKey("ns/a"), queue="a", request=need({GPU: 4}))
    plan = plan_reclaim(tree, usage_of(holders), preemptor, holders, SERVICE_RECLAIM)
    assert plan.victims == keys("c-borrow")
    assert plan.reasons == {WorkloadKey("ns/c-borrow"): "InCohortReclamation"}


def run_cycles(
    tree: QueueTree,
    running: list[Holder],
    pending: dict[str, list[Holder]],
    cycles: int,
) -> tuple[list[Holder], list[int]]:
    """Admission cycles as the services run them: the heads of the queues take turns by
    `fair_order`; a head that does not fit reclaims by `plan_reclaim` under the services'
    settings, its victims go back to the head of their queue (restart mode). Returns what runs
    at the end and the evictions of each cycle."""
    admitted_at = 1000.0
    evictions: list[int] = []
    for _ in range(cycles):
        evicted = 0
        progress = True
        while progress:
            progress = False
            contenders = [
                Contender(queue=name, key=items[0].key, request=items[0].holds)
                for name, items in sorted(pending.items())
                if items
            ]
            for contender in fair_order(tree, usage_of(running), contenders):
                head = pending[contender.queue][0]
                preemptor = Preemptor(key=head.key, queue=head.queue, request=head.holds)
                plan = plan_reclaim(tree, usage_of(running), preemptor, running, SERVICE_RECLAIM)
                if plan.outcome == "cannot":
                    continue
                for victim in [h for h in running if h.key in plan.victims]:
                    running.remove(victim)
                    pending[victim.queue].insert(0, victim)
                    evicted += 1
                admitted_at += 1
                pending[contender.queue].pop(0)
                running.append(Holder(head.key, head.queue, head.holds, admitted_at=admitted_at))
                progress = True
                break
        evictions.append(evicted)
    return running, evictions


@pytest.mark.parametrize(("a_gpus", "b_gpus"), [(2, 2), (4, 2), (2, 4)])
def test_two_queues_at_equal_weight_do_not_evict_each_other_forever(
    a_gpus: int, b_gpus: int
) -> None:
    # Kueue's strategies are built so that two workloads never preempt each other back and
    # forth. a holds the whole 16-GPU pool (nominal 0 each, both opted in); b's backlog
    # arrives. b takes gangs of a until the two hold their fair share, half each, and then
    # nothing moves however many cycles run, a's evicted gangs waiting at its head.
    tree = QueueTree.build(
        [
            q("a", "pool", nominal={GPU: 0}, reclaim="Any"),
            q("b", "pool", nominal={GPU: 0}, reclaim="Any"),
        ],
        [cohort("pool", nominal={GPU: 16})],
    )
    running = [gang(f"a-{i}", "a", gpu=a_gpus, admitted_at=float(i)) for i in range(16 // a_gpus)]
    pending = {"a": [], "b": [gang(f"b-{i}", "b", gpu=b_gpus) for i in range(16 // b_gpus)]}
    running, evictions = run_cycles(tree, running, pending, cycles=20)
    held = usage_of(running)
    assert (held["a"].resources[GPU], held["b"].resources[GPU]) == (8, 8)
    assert sum(evictions) == 8 // a_gpus  # only what b's fair share needs
    assert evictions[1:] == [0] * 19  # and then never again
    assert len(pending["a"]) == 8 // a_gpus


def test_an_unrelated_protected_queue_never_stops_a_valid_reclaim() -> None:
    # KAI#1750: reclaimer-queue (under its quota) must reclaim from its over-quota sibling
    # batch-queue although a lower-priority protected-queue, under its quota and so not
    # reclaimable, exists too (7 GPUs in all).
    tree = QueueTree.build(
        [
            q("reclaimer-queue", "org-parent", nominal={GPU: 4}, reclaim="Any"),
            q("batch-queue", "org-parent", nominal={GPU: 0}),
            q("protected-queue", "org", nominal={GPU: 3}),
        ],
        [cohort("org"), cohort("org-parent", "org")],
    )
    holders = [
        gang("protected", "protected-queue", gpu=2, priority=-5, admitted_at=9.0),
        gang("batch-old", "batch-queue", gpu=2, admitted_at=1.0),
        gang("batch-new", "batch-queue", gpu=2, admitted_at=2.0),
    ]
    preemptor = Preemptor(
        key=WorkloadKey("ns/starved"), queue="reclaimer-queue", request=need({GPU: 2})
    )
    plan = plan_reclaim(tree, usage_of(holders), preemptor, holders)
    assert plan.victims == keys("batch-new")
    assert plan.reasons == {WorkloadKey("ns/batch-new"): "InCohortReclamation"}


def volcano_tree(reclaimable: bool = True, reclaim: ReclaimPolicy = "Never") -> QueueTree:
    # Volcano capacity plugin: queue deserved 4 each; B is reclaimable unless told otherwise.
    return QueueTree.build(
        [
            q("a", "cluster", nominal={GPU: 4}, reclaim=reclaim),
            q("b", "cluster", nominal={GPU: 4}, reclaimable=reclaimable),
        ],
        [],
    )


B_GANGS = [gang(f"b-{i}", "b", gpu=2, priority=-1, admitted_at=float(i)) for i in range(4)]


def test_inference_reclaims_its_deserved_share_from_an_overused_training_queue() -> None:
    # Volcano reclaim: a queue below its deserved share takes it back from overused
    # reclaimable queues and stops at their deserved share; tidal: inference reclaims from
    # training even under the default policies.
    preemptor = Preemptor(
        key=WorkloadKey("ns/serve"), queue="a", request=need({GPU: 4}), service_type="inference"
    )
    plan = plan_reclaim(volcano_tree(), usage_of(B_GANGS), preemptor, B_GANGS)
    assert plan.victims == keys("b-3", "b-2")
    assert all(reason == "InCohortReclamation" for reason in plan.reasons.values())


def test_reclaim_never_takes_more_than_the_lender_lent() -> None:
    # Volcano reclaim never brings an overused queue below its deserved share: a asking for 6
    # (beyond its own 4) cannot take b's deserved 4 by reclaim.
    preemptor = Preemptor(
        key=WorkloadKey("ns/serve"), queue="a", request=need({GPU: 6}), service_type="inference"
    )
    for settings in (CLASSICAL, ReclaimSettings()):
        plan = plan_reclaim(volcano_tree(), usage_of(B_GANGS), preemptor, B_GANGS, settings)
        assert plan.outcome == "cannot"
    # Asking for 5, one of b's gangs beyond what b borrows is not taken either.
    five = Preemptor(
        key=WorkloadKey("ns/serve"), queue="a", request=need({GPU: 5}), service_type="inference"
    )
    assert plan_reclaim(volcano_tree(), usage_of(B_GANGS), five, B_GANGS).outcome == "cannot"


def test_a_queue_that_is_not_reclaimable_keeps_what_it_borrowed() -> None:
    # Volcano queue.spec.reclaimable: false.
    preemptor = Preemptor(
        key=WorkloadKey("ns/serve"), queue="a", request=need({GPU: 4}), service_type="inference"
    )
    plan = plan_reclaim(volcano_tree(reclaimable=False), usage_of(B_GANGS), preemptor, B_GANGS)
    assert plan.outcome == "cannot"
    assert plan.ineligible[WorkloadKey("ns/b-0")] == "queue b is not reclaimable"


def test_training_never_preempts_training_unless_its_queue_opts_in() -> None:
    preemptor = Preemptor(key=WorkloadKey("ns/train"), queue="a", request=need({GPU: 4}))
    plan = plan_reclaim(volcano_tree(), usage_of(B_GANGS), preemptor, B_GANGS)
    assert plan.outcome == "cannot"
    assert "reclaimWithinCohort: Never" in plan.ineligible[WorkloadKey("ns/b-0")]
    opted_in = plan_reclaim(
        volcano_tree(reclaim="LowerPriority"), usage_of(B_GANGS), preemptor, B_GANGS
    )
    assert opted_in.victims == keys("b-3", "b-2")


def test_inference_is_never_a_victim_and_training_never_evicts_it() -> None:
    serving = [gang(f"s-{i}", "b", gpu=2, priority=-1, service_type="inference") for i in range(4)]
    for service_type in ("inference", "training"):
        preemptor = Preemptor(
            key=WorkloadKey("ns/p"),
            queue="a",
            request=need({GPU: 4}),
            priority=9,
            service_type=service_type,
        )
        plan = plan_reclaim(volcano_tree(reclaim="Any"), usage_of(serving), preemptor, serving)
        assert plan.outcome == "cannot"
        assert set(plan.ineligible.values()) == {"inference workloads are never preempted"}


def test_a_gang_its_disruption_budget_protects_is_skipped_and_named() -> None:
    holders = [
        *B_GANGS[:3],
        gang(
            "b-3",
            "b",
            gpu=2,
            priority=-1,
            admitted_at=3.0,
            protected="PodDisruptionBudget ns/pdb allows 0 disruptions now",
        ),
    ]
    preemptor = Preemptor(
        key=WorkloadKey("ns/serve"), queue="a", request=need({GPU: 4}), service_type="inference"
    )
    plan = plan_reclaim(volcano_tree(), usage_of(holders), preemptor, holders)
    assert plan.victims == keys("b-2", "b-1")
    assert plan.ineligible == {
        WorkloadKey("ns/b-3"): "PodDisruptionBudget ns/pdb allows 0 disruptions now"
    }


def test_cards_are_reclaimed_per_card_model() -> None:
    tree = QueueTree.build([q("a", "c", cards={H200: 4}), q("b", "c", cards={H200: 4})], [])
    holders = [
        gang("b-a100", "b", cards={"NVIDIA-A100": 8}, priority=-1, admitted_at=9.0),
        gang("b-h200-old", "b", cards={H200: 4}, priority=-1, admitted_at=1.0),
        gang("b-h200-new", "b", cards={H200: 4}, priority=-1, admitted_at=2.0),
    ]
    preemptor = Preemptor(
        key=WorkloadKey("ns/serve"),
        queue="a",
        request=need(cards={H200: 4}),
        service_type="inference",
    )
    plan = plan_reclaim(tree, usage_of(holders), preemptor, holders)
    assert plan.victims == keys("b-h200-new")
    assert plan.ineligible == {
        WorkloadKey("ns/b-a100"): "holds none of what the preemptor is short of"
    }


def test_the_fewest_gangs_are_taken_then_the_lowest_priority_and_youngest() -> None:
    tree = QueueTree.build(
        [q("a", "c", nominal={GPU: 6}, reclaim="Any"), q("b", "c", nominal={GPU: 0})], []
    )
    holders = [
        gang("small-1", "b", gpu=1, priority=-2, admitted_at=1.0),
        gang("small-2", "b", gpu=1, priority=-2, admitted_at=2.0),
        gang("big-old", "b", gpu=2, admitted_at=3.0),
        gang("big-new", "b", gpu=2, admitted_at=4.0),
    ]
    preemptor = Preemptor(key=WorkloadKey("ns/p"), queue="a", request=need({GPU: 2}))
    for seed in range(4):
        shuffled = list(holders)
        random.Random(seed).shuffle(shuffled)
        plan = plan_reclaim(tree, usage_of(holders), preemptor, shuffled)
        assert plan.victims == keys("big-new")
        assert plan.exact


def test_past_the_search_budget_the_set_is_still_minimal() -> None:
    tree = QueueTree.build([q("a", "c", nominal={GPU: 8}, reclaim="Any"), q("b", "c")], [])
    holders = [gang(f"g-{i}", "b", gpu=1, admitted_at=float(i)) for i in range(8)]
    preemptor = Preemptor(key=WorkloadKey("ns/p"), queue="a", request=need({GPU: 3}))
    plan = plan_reclaim(
        tree, usage_of(holders), preemptor, holders, ReclaimSettings(combination_budget=0)
    )
    assert (plan.outcome, plan.exact) == ("reclaims", False)
    assert plan.victims == keys("g-7", "g-6", "g-5")


def test_a_workload_that_fits_preempts_nobody_and_one_that_never_fits_neither() -> None:
    tree = volcano_tree()
    preemptor = Preemptor(
        key=WorkloadKey("ns/p"), queue="a", request=need({GPU: 2}), service_type="inference"
    )
    assert plan_reclaim(tree, {}, preemptor, B_GANGS).outcome == "fits"
    too_big = Preemptor(
        key=WorkloadKey("ns/p"), queue="a", request=need({GPU: 9}), service_type="inference"
    )
    plan = plan_reclaim(tree, usage_of(B_GANGS), too_big, B_GANGS)
    assert (plan.outcome, plan.victims) == ("cannot", ())
    assert plan.fit is not None
    assert plan.fit.lasting


@pytest.mark.parametrize("seed", range(20))
def test_a_state_changed_in_place_equals_one_built_afresh(seed: int) -> None:
    """``TreeState.with_change`` sums only the changed queues' paths again: on random trees
    (lending limits, an Invalid queue, a queue outside any tree) and random changes it agrees
    with a state built from scratch on the changed usage."""
    rng = random.Random(seed)
    cohorts = [
        cohort("root", nominal={CPU: rng.randint(0, 8)}),
        cohort("left", "root", nominal={CPU: rng.randint(0, 8)}, lending={CPU: rng.randint(0, 4)}),
        cohort("right", "root"),
    ]
    queues = [
        q(
            f"q{i}",
            rng.choice(["root", "left", "right"]),
            nominal={CPU: rng.randint(0, 10), GPU: rng.randint(0, 10)},
            lending={CPU: rng.randint(0, 5)} if rng.random() < 0.5 else None,
            invalid="bad" if i == 5 else None,
        )
        for i in range(6)
    ] + [q("alone", nominal={CPU: 4})]
    tree = QueueTree.build(queues, cohorts)
    usage = {
        f"q{i}": {
            Dim("resource", CPU): rng.randint(0, 12),
            Dim("resource", GPU): rng.randint(0, 12),
        }
        for i in range(6)
    }
    state = TreeState(tree, usage)
    for _ in range(5):
        changes = {
            name: {Dim("resource", rng.choice([CPU, GPU])): rng.randint(-6, 6)}
            for name in rng.sample([*usage, "alone", "nowhere"], k=rng.randint(1, 3))
        }
        changed = state.with_change(changes)
        for name, delta in changes.items():
            amounts = usage.setdefault(name, {})
            for dim, amount in delta.items():
                amounts[dim] = amounts.get(dim, 0) + amount
        fresh = TreeState(tree, usage)
        assert changed.leaf == fresh.leaf
        assert changed.subtree_quota == fresh.subtree_quota
        assert changed.used == fresh.used
        assert changed.total == fresh.total
        assert {n: weighted_share(changed, n) for n in tree.nodes} == {
            n: weighted_share(fresh, n) for n in tree.nodes
        }
        state = changed
