"""Slot assignment: rank order, expectations, never more than assigned, lost domains; which
pods hold a slot and which an eviction removes."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.model import DomainCount
from tidegate.model.names import ADMISSION_GATE
from tidegate.policy.common import evictable, holds_capacity
from tidegate.policy.slots import (
    Member,
    assigned,
    domain_of,
    failed_domains,
    members,
    must_evict,
    plan_podset,
    selector_for,
    spare_slots,
    stranded,
    stuck_slots,
    unschedulable_wait,
)
from tidegate.testing.messages import Messages

LEVELS = ["block", "rack", "host"]
msg = Messages(
    namespace="ns",
    levels=LEVELS,
    defaults={
        "pod": {"podset": "main", "phase": "Pending", "requests": {}},
        "admitted": {"podset": "main", "uid": "w"},
    },
)
"""Pods p<i> (uid u<i>, rank i) of podset "main" of ns/w; hosts in block b1."""


def gated(index: int, *, rank: int | None = None) -> Member:
    """A gated pod named p<index>."""
    return Member(uid=f"u{index}", name=f"p{index}", rank=rank, created_at=float(index))


def released(index: int, host: str, *, holds_slot: bool = True) -> Member:
    """A released pod in ``host`` (e.g. "r1/h1")."""
    rack, name = host.split("/")
    return Member(
        uid=f"u{index}",
        name=f"p{index}",
        gated=False,
        node_selector={"block": "b1", "rack": rack, "host": name},
        holds_slot=holds_slot,
    )


def hosts(plan_releases: list[object]) -> dict[str, str]:
    """Pod name → "rack/host" of each release."""
    out = {}
    for release in plan_releases:
        domain = release.domain  # type: ignore[attr-defined]
        out[release.name] = f"{domain[1]}/{domain[2]}"  # type: ignore[attr-defined]
    return out


def test_ranks_fill_domains_in_assignment_order() -> None:
    plan = plan_podset(
        msg.assignment([(("b1", "r1", "h1"), 2), (("b1", "r1", "h2"), 2), (("b1", "r2", "h3"), 2)]),
        [gated(i, rank=r) for i, r in enumerate([5, 0, 3, 1, 4, 2])],
    )
    by_rank = {f"p{i}": r for i, r in enumerate([5, 0, 3, 1, 4, 2])}
    placed = {by_rank[name]: host for name, host in hosts(plan.releases).items()}
    assert placed == {0: "r1/h1", 1: "r1/h1", 2: "r1/h2", 3: "r1/h2", 4: "r2/h3", 5: "r2/h3"}
    assert plan.waiting == 0
    assert plan.occupied == {("b1", "r1", "h1"): 2, ("b1", "r1", "h2"): 2, ("b1", "r2", "h3"): 2}


def test_a_rank_whose_domain_is_full_goes_to_the_nearest_domain_with_room() -> None:
    # h1 is full already (two released pods), so rank 1 goes to h2, the next slots.
    plan = plan_podset(
        msg.assignment([(("b1", "r1", "h1"), 2), (("b1", "r1", "h2"), 2), (("b1", "r2", "h3"), 2)]),
        [released(10, "r1/h1"), released(11, "r1/h1"), gated(1, rank=1), gated(5, rank=5)],
    )
    assert hosts(plan.releases) == {"p1": "r1/h2", "p5": "r2/h3"}


def test_unranked_pods_fill_the_first_domains_with_room() -> None:
    plan = plan_podset(
        msg.assignment([(("b1", "r1", "h1"), 1), (("b1", "r1", "h2"), 2)]),
        [gated(3), gated(1), gated(2), gated(4)],
    )
    assert hosts(plan.releases) == {"p1": "r1/h1", "p2": "r1/h2", "p3": "r1/h2"}
    assert plan.waiting == 1


def test_releases_in_flight_count_until_seen_and_are_not_released_twice() -> None:
    target = msg.assignment([(("b1", "r1", "h1"), 1), (("b1", "r1", "h2"), 1)])
    first = plan_podset(target, [gated(1, rank=0), gated(2, rank=1)])
    expected = {r.uid: r.domain for r in first.releases}
    # The same events again (nothing seen on the bus yet): nothing new to release.
    again = plan_podset(
        target, [gated(1, rank=0), gated(2, rank=1), gated(3, rank=0)], expected=expected
    )
    assert again.releases == []
    assert again.waiting == 1


def test_finished_or_failed_node_pods_free_their_slot_for_a_replacement() -> None:
    target = msg.assignment([(("b1", "r1", "h1"), 2)])
    plan = plan_podset(
        target,
        [released(1, "r1/h1"), released(2, "r1/h1", holds_slot=False), gated(3, rank=1)],
    )
    assert hosts(plan.releases) == {"p3": "r1/h1"}


def test_lost_domains_hand_out_nothing() -> None:
    target = msg.assignment([(("b1", "r1", "h1"), 1), (("b1", "r1", "h2"), 1)])
    plan = plan_podset(target, [gated(1, rank=0), gated(2, rank=1)], lost={("b1", "r1", "h1")})
    assert hosts(plan.releases) == {"p1": "r1/h2"}
    assert plan.waiting == 1


def test_released_pods_outside_the_assignment_do_not_count() -> None:
    plan = plan_podset(msg.assignment([(("b1", "r1", "h1"), 1)]), [released(1, "r9/h9"), gated(2)])
    assert hosts(plan.releases) == {"p2": "r1/h1"}


def test_selectors_and_domains() -> None:
    target = msg.assignment([(("b1", "r1", "h1"), 2), (("b1", "r1", "h1"), 1)])
    assert assigned(target) == {("b1", "r1", "h1"): 3}
    assert selector_for(LEVELS, ("b1", "r2")) == {"block": "b1", "rack": "r2"}
    domains = [("b1", "r1", "h1"), ("b1", "r1", "h2")]
    assert domain_of(LEVELS, {"block": "b1", "rack": "r1", "host": "h2", "x": "y"}, domains) == (
        "b1",
        "r1",
        "h2",
    )
    assert domain_of(LEVELS, {"block": "b1", "rack": "r1"}, domains) is None
    lost = failed_domains(
        msg.assignment([(("b1", "r1", "h1"), 2), (("b1", "r1", "h2"), 1)]), lambda d: d[2] != "h2"
    )
    assert lost == [DomainCount(values=["b1", "r1", "h2"], count=1)]


@settings(max_examples=150, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=4),
    pods=st.lists(
        st.tuples(st.booleans(), st.integers(min_value=-1, max_value=12), st.integers(0, 4)),
        max_size=16,
    ),
    order=st.randoms(use_true_random=False),
)
def test_never_more_than_assigned_whatever_the_order(
    counts: list[int], pods: list[tuple[bool, int, int]], order: object
) -> None:
    """Released pods (some outside the assignment), gated pods with and without ranks, in any
    order, planned repeatedly with expectations: no domain ever exceeds its count, and every
    gated pod is released while there is room."""
    target = msg.assignment([(("b1", "r1", f"h{i}"), c) for i, c in enumerate(counts)])
    members: list[Member] = []
    for index, (is_gated, rank, host) in enumerate(pods):
        if is_gated:
            members.append(gated(index, rank=rank if rank >= 0 else None))
        else:
            members.append(released(index, f"r1/h{host}"))
    order.shuffle(members)  # type: ignore[attr-defined]
    expected: dict[str, tuple[str, ...]] = {}
    for _ in range(2):
        plan = plan_podset(target, members, expected=expected)
        expected.update({r.uid: r.domain for r in plan.releases})
    capacity = assigned(target)
    taken = dict.fromkeys(capacity, 0)
    for member in members:
        domain = (
            expected.get(member.uid)
            if member.gated
            else domain_of(LEVELS, member.node_selector, capacity)
        )
        if domain is not None:
            taken[domain] += 1
    for domain, count in capacity.items():
        already = sum(
            1
            for m in members
            if not m.gated and domain_of(LEVELS, m.node_selector, capacity) == domain
        )
        assert taken[domain] <= max(count, already)
    room = sum(max(capacity[d] - taken[d], 0) for d in capacity)
    unreleased = sum(1 for m in members if m.gated and m.uid not in expected)
    assert room == 0 or unreleased == 0


def test_consecutive_ranks_share_or_neighbour_domains() -> None:
    target = msg.assignment(
        [(("b1", "r1", "h1"), 3), (("b1", "r1", "h2"), 3), (("b1", "r2", "h3"), 2)]
    )
    ranks = list(range(8))
    plan = plan_podset(
        target, [gated(i, rank=r) for i, r in zip(itertools.count(), reversed(ranks))]
    )
    order = list(assigned(target))
    index = {f"p{i}": r for i, r in zip(itertools.count(), reversed(ranks))}
    position = {index[r.name]: order.index(r.domain) for r in plan.releases}
    for rank in ranks[:-1]:
        assert position[rank + 1] - position[rank] in (0, 1)


def test_a_shrunk_podset_gives_back_only_slots_no_pod_holds_newest_first() -> None:
    target = msg.assignment(
        [(("b1", "r1", "h1"), 2), (("b1", "r1", "h2"), 2), (("b1", "r2", "h3"), 2)]
    )
    members = [
        released(0, "r1/h1"),
        released(1, "r1/h2"),
        released(2, "r2/h3", holds_slot=False),  # terminating: its slot is free
        gated(3),  # a surge pod: it takes a free slot before anything is given back
    ]
    plan = plan_podset(target, members)
    assert len(plan.releases) == 1
    spare = spare_slots(target, plan.occupied, surplus=3)
    assert [(d.values[2], d.count) for d in spare] == [("h3", 2), ("h2", 1)]
    assert spare_slots(target, plan.occupied, surplus=1) == [
        DomainCount(values=["b1", "r2", "h3"], count=1)
    ]
    # Slots of failed domains are left to replacement; nothing surplus, nothing given back.
    assert spare_slots(target, plan.occupied, surplus=3, lost={("b1", "r2", "h3")}) == [
        DomainCount(values=["b1", "r1", "h2"], count=1)
    ]
    assert spare_slots(target, plan.occupied, surplus=0) == []


def test_members_hold_a_slot_while_active_and_on_a_ready_node() -> None:
    pods = [
        msg.pod(
            "p1",
            "n1",
            uid="u1",
            rank=1,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
        ),
        msg.pod(
            "p2",
            "n1",
            uid="u2",
            rank=2,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Succeeded",
        ),
        msg.pod(
            "p3",
            "n1",
            uid="u3",
            rank=3,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
            terminating=True,
        ),
        msg.pod(
            "p4",
            "down",
            uid="u4",
            rank=4,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
        ),
        msg.pod(
            "p5", uid="u5", rank=5, node_selector={"block": "b1", "rack": "r1", "host": "h1"}
        ),  # released, not bound yet: holds its slot
        msg.pod("p6", uid="u6", rank=6, scheduling_gates=[ADMISSION_GATE]),
        msg.pod(
            "p7", uid="u7", rank=7, scheduling_gates=[ADMISSION_GATE], terminating=True
        ),  # never takes a slot: left out
    ]
    got = members(pods, lambda node: node != "down")
    assert [(m.name, m.gated, m.holds_slot) for m in got] == [
        ("p1", False, True),
        ("p2", False, False),
        ("p3", False, False),
        ("p4", False, False),
        ("p5", False, True),
        ("p6", True, True),
    ]
    # A terminating pod still holds its node's capacity, but not its slot.
    assert holds_capacity(pods[2])
    assert not got[2].holds_slot


def test_an_eviction_removes_the_active_released_pods_released_before_it() -> None:
    pods = [
        msg.pod(
            "p1",
            "n1",
            uid="u1",
            rank=1,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
        ),
        msg.pod(
            "p2",
            "n2",
            uid="u2",
            rank=2,
            node_selector={"block": "b1", "rack": "r1", "host": "h2"},
            phase="Running",
        ),
        msg.pod(
            "p3",
            "n2",
            uid="u3",
            rank=3,
            node_selector={"block": "b1", "rack": "r1", "host": "h2"},
            phase="Failed",
        ),
        msg.pod(
            "p4",
            "n2",
            uid="u4",
            rank=4,
            node_selector={"block": "b1", "rack": "r1", "host": "h2"},
            phase="Running",
            terminating=True,
        ),
        msg.pod("p5", uid="u5", rank=5, scheduling_gates=[ADMISSION_GATE]),
        msg.pod(
            "p6", uid="u6", rank=6, node_selector={"block": "b1", "rack": "r1", "host": "h1"}
        ),  # released, not bound yet
    ]
    evicted = must_evict(pods, sequence=5, released_under={"u1": 4}, admitted=None)
    assert [p.name for p in evicted] == ["p1", "p2", "p6"]
    assert evicted == [p for p in pods if evictable(p)]
    # Released under a newer admission (this process knows): it stays.
    kept = must_evict(
        pods,
        sequence=5,
        released_under={"u1": 6},
        admitted=msg.admitted("w", [(("b1", "r1", "h9"), 1)], sequence=6),
    )
    assert [p.name for p in kept] == ["p2", "p6"]


def test_after_a_restart_a_pod_in_a_slot_of_the_newer_admission_keeps_it() -> None:
    pods = [
        msg.pod(
            "p1",
            "n1",
            uid="u1",
            rank=1,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
        ),
        msg.pod(
            "p2",
            "n2",
            uid="u2",
            rank=2,
            node_selector={"block": "b1", "rack": "r1", "host": "h2"},
            phase="Running",
        ),
    ]
    newer = msg.admitted("w", [(("b1", "r1", "h1"), 1)], sequence=7)
    assert [p.name for p in must_evict(pods, sequence=5, released_under={}, admitted=newer)] == [
        "p2"
    ]
    # An admission no newer than the eviction keeps nothing.
    older = msg.admitted("w", [(("b1", "r1", "h1"), 1)], sequence=5)
    assert [p.name for p in must_evict(pods, sequence=5, released_under={}, admitted=older)] == [
        "p1",
        "p2",
    ]


def ready(node: str | None) -> bool:
    """Every node is ready but "down"."""
    return node != "down"


def test_stuck_slots_count_released_unbound_pods_marked_unschedulable_long_enough() -> None:
    target = msg.assignment(
        [(("b1", "r1", "h1"), 2), (("b1", "r1", "h2"), 2), (("b1", "r1", "h3"), 1)]
    )
    pods = [
        msg.pod(
            "p1",
            "n1",
            uid="u1",
            rank=1,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
        ),
        msg.pod(
            "p2",
            uid="u2",
            rank=2,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            unschedulable_since=100.0,
        ),  # stuck since 100
        msg.pod(
            "p3",
            uid="u3",
            rank=3,
            node_selector={"block": "b1", "rack": "r1", "host": "h2"},
            unschedulable_since=100.0,
        ),
        msg.pod(
            "p4",
            uid="u4",
            rank=4,
            node_selector={"block": "b1", "rack": "r1", "host": "h2"},
            unschedulable_since=190.0,
        ),  # marked, not long enough
        msg.pod(
            "p5", uid="u5", rank=5, node_selector={"block": "b1", "rack": "r1", "host": "h3"}
        ),  # released, not tried yet
        msg.pod(
            "p6", uid="u6", rank=6, scheduling_gates=[ADMISSION_GATE], unschedulable_since=50.0
        ),  # gated pods are never stuck
        msg.pod(
            "p7",
            uid="u7",
            rank=7,
            node_selector={"block": "b1", "rack": "r1", "host": "h3"},
            unschedulable_since=50.0,
            terminating=True,
        ),
    ]
    assert stuck_slots(target, pods, ready, before=150.0) == [
        DomainCount(values=["b1", "r1", "h1"], count=1),
        DomainCount(values=["b1", "r1", "h2"], count=1),
    ]
    assert stuck_slots(target, pods, ready, before=99.0) == []
    assert stuck_slots(target, pods, ready, before=200.0)[1].count == 2


def test_a_stuck_pod_beyond_its_domains_slots_is_stranded_not_stuck() -> None:
    # A replacement moved one of h1's two slots elsewhere: h1 keeps one, held by the bound
    # pod; the stuck pod holds nothing there any more and is the one to evict.
    moved = msg.assignment([(("b1", "r1", "h1"), 1), (("b1", "r1", "h4"), 1)])
    pods = [
        msg.pod(
            "p1",
            "n1",
            uid="u1",
            rank=1,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
        ),
        msg.pod(
            "p2",
            uid="u2",
            rank=2,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            unschedulable_since=100.0,
        ),
    ]
    assert stuck_slots(moved, pods, ready, before=150.0) == []
    assert [p.name for p in stranded(moved, pods, ready)] == ["p2"]
    # Before the move both hold a slot: nothing is stranded, one slot is stuck.
    before_move = msg.assignment([(("b1", "r1", "h1"), 2)])
    assert stranded(before_move, pods, ready) == []
    assert stuck_slots(before_move, pods, ready, before=150.0)[0].count == 1


def test_stranded_pods_are_only_unbound_ones_the_scheduler_refused() -> None:
    target = msg.assignment([(("b1", "r1", "h2"), 1)])
    pods = [
        msg.pod(
            "p1",
            uid="u1",
            rank=1,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            unschedulable_since=30.0,
        ),  # domain no longer assigned
        msg.pod(
            "p2",
            uid="u2",
            rank=2,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            unschedulable_since=20.0,
        ),
        msg.pod(
            "p3", uid="u3", rank=3, node_selector={"block": "b1", "rack": "r1", "host": "h1"}
        ),  # not marked: it may still be placed
        msg.pod(
            "p4",
            "n1",
            uid="u4",
            rank=4,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
        ),  # bound: never evicted here
        msg.pod(
            "p5",
            uid="u5",
            rank=5,
            node_selector={"block": "b1", "rack": "r1", "host": "h2"},
            unschedulable_since=10.0,
        ),  # holds h2's slot
        msg.pod(
            "p6",
            "down",
            uid="u6",
            rank=6,
            node_selector={"block": "b1", "rack": "r1", "host": "h1"},
            phase="Running",
        ),
    ]
    assert [p.name for p in stranded(target, pods, ready)] == ["p2", "p1"]
    # Within a domain, the pods marked longest ago are left without a slot first.
    crowded = msg.assignment([(("b1", "r1", "h1"), 3)])  # the bound pod, the unmarked one, then p1
    assert [p.name for p in stranded(crowded, pods[:4], ready)] == ["p2"]


def test_the_unschedulable_wait_doubles_with_every_move_up_to_an_hour() -> None:
    assert [unschedulable_wait(120, moves) for moves in range(7)] == [
        120,
        240,
        480,
        960,
        1920,
        3600,
        3600,
    ]
    assert unschedulable_wait(120, 10_000) == 3600
    assert unschedulable_wait(7200, 3) == 7200  # a base beyond the cap is kept
    assert unschedulable_wait(0, 3) == 0  # off stays off
    assert unschedulable_wait(1.0, 2, longest=3.0) == 3.0
