"""CapacityAccounting, table by table: usage, reservations, spreads, schedulability, records."""

import msgspec
import pytest

from tidegate.model import (
    Admitted,
    CapacityDomain,
    CapacityNode,
    DomainCount,
    LostAdmission,
    NodeState,
    PodSetSpec,
    PodState,
    Preempted,
    Released,
    Taint,
    Tombstone,
    TopologyAssignment,
    TopologyConfig,
    WorkloadState,
)
from tidegate.placement import DEFAULT_MAX_PODS
from tidegate.placement.accounting import (
    CapacityAccounting,
    DomainKey,
    NodeKey,
    domain_gpus,
    key_of,
    per_pod,
    same_content,
)
from tidegate.testing.messages import Messages

BLOCK, RACK, HOST = "block", "rack", "host"
LEVELS = [BLOCK, RACK, HOST]
GPU = "nvidia.com/gpu"
TOPOLOGY = "default"

msg = Messages(
    levels=LEVELS,
    node_cpu=32_000,
    node_domain=("b1", "r1"),
    defaults={
        "pod": {"workload": "team/train", "podset": "workers"},
        "admitted": {"uid": "w-uid", "sequence": 1, "per_pod": {"cpu": 1000, GPU: 1}},
    },
)
"""Nodes in rack r1 of block b1 by default; pods and admissions of team/train's workers."""


def cluster(*nodes: NodeState) -> CapacityAccounting:
    accounting = CapacityAccounting()
    accounting.apply(TopologyConfig(name=TOPOLOGY, levels=LEVELS))
    for item in nodes:
        accounting.apply(item)
    return accounting


def host(name: str, rack: str = "r1") -> tuple[str, ...]:
    return ("b1", rack, name)


# --------------------------------------------------------------------------- usage


def test_free_is_allocatable_minus_bound_non_terminal_pods() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.pod("ds", "n1", gpus=0, workload=None, podset=None))  # a DaemonSet pod
    accounting.apply(msg.pod("a", "n1", gpus=2))
    accounting.apply(msg.pod("done", "n1", gpus=4, phase="Succeeded"))
    accounting.apply(msg.pod("failed", "n1", gpus=4, phase="Failed"))
    accounting.apply(msg.pod("gated", None, gpus=4))
    accounting.apply(msg.pod("pending-bound", "n1", gpus=1, phase="Pending"))
    assert accounting.used("n1") == {"cpu": 3000, GPU: 3, "pods": 3}
    assert accounting.free("n1") == {"cpu": 29_000, GPU: 5, "pods": DEFAULT_MAX_PODS - 3}


def test_pod_changes_replace_its_usage_and_deletion_returns_it() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.apply(msg.pod("a", "n1", gpus=2))
    accounting.apply(msg.pod("a", "n1", gpus=2))  # the same state again: nothing changes
    assert accounting.used("n1")[GPU] == 2
    accounting.apply(msg.pod("a", "n1", gpus=2, phase="Succeeded"))
    assert accounting.used("n1") == {}
    accounting.apply(msg.pod("b", "n2", gpus=3))
    accounting.apply(Tombstone(object_kind="pod", name="b", namespace="team"))
    assert accounting.used("n2") == {}
    assert accounting.free("n2") == {"cpu": 32_000, GPU: 8, "pods": DEFAULT_MAX_PODS}


def test_usage_on_an_unknown_node_counts_once_it_appears() -> None:
    accounting = cluster()
    accounting.apply(msg.pod("early", "n9", gpus=2))
    accounting.apply(msg.node("n9"))
    assert accounting.free("n9")[GPU] == 6


def test_resources_in_use_but_not_allocatable_show_negative() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(
        PodState(
            namespace="x",
            name="p",
            uid="u",
            node_name="n1",
            phase="Running",
            requests={"example.com/fpga": 1},
        )
    )
    assert accounting.free("n1")["example.com/fpga"] == -1


# --------------------------------------------------------------------------- reservations


def test_reservation_moves_to_usage_as_pods_bind_never_counted_twice() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.apply(
        msg.admitted("team/train", {host("n1"): 2, host("n2"): 1}, per_pod=msg.requests(gpus=2))
    )
    assert accounting.reservation("team/train") == {"n1": 2, "n2": 1}
    assert accounting.free("n1")[GPU] == 4
    accounting.apply(msg.pod("w-0", "n1", gpus=2))
    assert accounting.reservation("team/train") == {"n1": 1, "n2": 1}
    assert accounting.free("n1")[GPU] == 4  # one pod reserved + one pod used
    accounting.apply(msg.pod("w-1", "n1", gpus=2))
    accounting.apply(msg.pod("w-2", "n2", gpus=2))
    assert accounting.reservation("team/train") == {}
    assert accounting.free("n1") == {"cpu": 30_000, GPU: 4, "pods": DEFAULT_MAX_PODS - 2}
    assert accounting.free("n2")[GPU] == 6


def test_bound_before_admitted_is_the_same_as_admitted_before_bound() -> None:
    first = cluster(msg.node("n1"))
    first.apply(msg.admitted("team/train", {host("n1"): 2}, per_pod=msg.requests(gpus=2)))
    first.apply(msg.pod("w-0", "n1", gpus=2))
    second = cluster(msg.node("n1"))
    second.apply(msg.pod("w-0", "n1", gpus=2))
    second.apply(msg.admitted("team/train", {host("n1"): 2}, per_pod=msg.requests(gpus=2)))
    assert (
        first.free("n1")
        == second.free("n1")
        == {
            "cpu": 30_000,
            GPU: 4,
            "pods": DEFAULT_MAX_PODS - 2,
        }
    )
    assert list(first.records()) == list(second.records())


def test_more_pods_bound_than_assigned_is_plain_usage() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 1}))
    for i in range(3):
        accounting.apply(msg.pod(f"w-{i}", "n1", gpus=1))
    assert accounting.reserved("n1") == {}
    assert accounting.free("n1")[GPU] == 5


def test_a_finished_pod_gives_its_place_back_to_the_reservation() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 2}, per_pod=msg.requests(gpus=2)))
    accounting.apply(msg.pod("w-0", "n1", gpus=2))
    accounting.apply(msg.pod("w-1", "n1", gpus=2))
    assert accounting.reserved("n1") == {}
    accounting.apply(msg.pod("w-1", "n1", gpus=2, phase="Failed"))
    assert accounting.reservation("team/train") == {"n1": 1}
    assert accounting.free("n1")[GPU] == 4


def test_release_and_preemption_end_reservations() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.apply(msg.admitted("team/a", {host("n1"): 2}, sequence=1, uid="ua"))
    accounting.apply(msg.admitted("team/b", {host("n2"): 2}, sequence=2, uid="ub"))
    accounting.apply(
        Released(workload="team/a", uid="ua", queue="q", reason="Completed", sequence=3)
    )
    assert accounting.reserved("n1") == {}
    assert accounting.preempt(
        Preempted(preemptor="team/online", preemptor_uid="u", victims=["team/b", "team/none"])
    )
    assert accounting.reserved("n2") == {}
    assert accounting.admitted() == []
    assert accounting.applied_sequence == 3


def test_a_release_must_name_the_admission_it_ends() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 1}, sequence=5, uid="new"))
    stale_uid = Released(workload="team/train", uid="old", queue="q", reason="Deleted", sequence=6)
    assert not accounting.release(stale_uid)
    older = Released(workload="team/train", uid="new", queue="q", reason="Deleted", sequence=4)
    assert not accounting.release(older)
    assert accounting.reservation("team/train") == {"n1": 1}
    unsequenced = Released(workload="team/train", uid="new", queue="q", reason="Evicted")
    assert accounting.release(unsequenced)
    assert accounting.reservation("team/train") == {}


def test_redelivered_or_older_admissions_are_ignored_newer_ones_replace() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 2}, sequence=4))
    accounting.apply(msg.admitted("team/train", {host("n2"): 3}, sequence=3))
    accounting.apply(msg.admitted("team/train", {host("n1"): 2}, sequence=4))
    assert accounting.reservation("team/train") == {"n1": 2}
    accounting.apply(msg.admitted("team/train", {host("n2"): 3}, sequence=7))
    assert accounting.reservation("team/train") == {"n2": 3}
    assert accounting.reserved("n1") == {}
    assert accounting.applied_sequence == 7


def test_bad_assignment_parts_are_reported_and_the_rest_reserved() -> None:
    accounting = cluster(msg.node("n1"))
    decision = Admitted(
        workload="team/train",
        uid="u",
        queue="q",
        sequence=1,
        epoch=1,
        assignments={
            "workers": TopologyAssignment(
                levels=LEVELS,
                domains=[
                    DomainCount(values=list(host("n1")), count=1),
                    DomainCount(values=list(host("n1")), count=-2),
                    DomainCount(values=["b1", "r1", "n1", "extra"], count=1),
                ],
            )
        },
    )
    problems = accounting.apply(decision)
    assert problems == [
        "team/train: assignments.workers.domains[1].count: -2 is negative",
        "team/train: assignments.workers.domains[2].values: 4 values for levels "
        "['block', 'rack', 'host']",
    ]
    assert accounting.reservation("team/train") == {"n1": 1}


def test_requests_come_from_the_workload_when_the_decision_has_none() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 2}, per_pod=None))
    assert accounting.reserved("n1") == {"pods": 2}
    workload = WorkloadState(
        namespace="team",
        name="train",
        uid="w-uid",
        owner_kind="Job",
        podsets=[PodSetSpec(name="workers", count=2, requests={GPU: 3})],
    )
    accounting.apply(workload)
    assert accounting.reserved("n1") == {GPU: 6, "pods": 2}
    # Deleted: its admission holds nothing any more (docs/architecture.md, "The decisions in
    # force"; this test once kept a pods-only reservation for a deleted workload).
    accounting.apply(Tombstone(object_kind="workload", name="train", namespace="team"))
    assert accounting.reserved("n1") == {}


def test_pods_without_a_podset_count_for_a_single_podset_admission() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 2}))
    accounting.apply(msg.pod("w-0", "n1", podset=None))
    assert accounting.reservation("team/train") == {"n1": 1}


def test_pods_of_other_podsets_or_workloads_do_not_release_a_reservation() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 1}))
    accounting.apply(msg.pod("x", "n1", podset="launcher"))
    accounting.apply(msg.pod("y", "n1", workload="team/other"))
    assert accounting.reservation("team/train") == {"n1": 1}


def test_a_reservation_on_a_vanished_node_holds_nothing() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 1}))
    accounting.apply(Tombstone(object_kind="node", name="n1"))
    assert accounting.reservation("team/train") == {}
    accounting.apply(msg.node("n1"))
    assert accounting.reservation("team/train") == {"n1": 1}


# --------------------------------------------------------------------------- spreads


def rack_admission(count: int, *, gpus: int, workload: str = "team/train", sequence: int = 1):
    return msg.admitted(
        workload,
        {("b1", "r1"): count},
        sequence=sequence,
        uid=workload,
        levels=[BLOCK, RACK],
        per_pod=msg.requests(gpus=gpus),
    )


def test_a_rack_reservation_fills_nodes_in_natural_order_by_fit() -> None:
    accounting = cluster(msg.node("n10"), msg.node("n2"), msg.node("n9", "b1", "r2"))
    accounting.apply(msg.pod("ds", "n2", gpus=5, workload=None))
    accounting.apply(rack_admission(4, gpus=2))
    # n2 has 3 GPUs left: one pod; n10 takes the other three.
    assert accounting.reservation("team/train") == {"n10": 3, "n2": 1}


def test_an_overcommitted_rack_deals_the_rest_round_robin() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.apply(rack_admission(11, gpus=2))
    assert accounting.reservation("team/train") == {"n1": 6, "n2": 5}
    assert accounting.free("n1")[GPU] == -4


def test_spreads_follow_decision_order_and_binding() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.apply(rack_admission(2, gpus=4, workload="team/late", sequence=9))
    accounting.apply(rack_admission(2, gpus=4, workload="team/early", sequence=3))
    assert accounting.reservation("team/early") == {"n1": 2}
    assert accounting.reservation("team/late") == {"n2": 2}
    # One of early's pods binds on n2: early holds one on n1, late moves over.
    accounting.apply(msg.pod("e-0", "n2", gpus=4, workload="team/early", podset="workers"))
    assert accounting.reservation("team/early") == {"n1": 1}
    assert accounting.reservation("team/late") == {"n1": 1, "n2": 1}
    assert accounting.free("n1")[GPU] == 0
    assert accounting.free("n2")[GPU] == 0


def test_a_spread_avoids_unschedulable_nodes_and_follows_relabelling() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.apply(rack_admission(2, gpus=4))
    assert accounting.reservation("team/train") == {"n1": 2}
    accounting.apply(msg.node("n1", unschedulable=True))
    assert accounting.reservation("team/train") == {"n2": 2}
    accounting.apply(msg.node("n2", "b1", "r2"))  # n2 leaves the rack; only cordoned n1 is left
    assert accounting.reservation("team/train") == {"n1": 2}


def test_spreads_that_overlap_through_a_wider_domain_are_recomputed_together() -> None:
    accounting = cluster(
        msg.node("n1"), msg.node("n2"), msg.node("n3", "b1", "r2"), msg.node("n4", "b1", "r2")
    )
    accounting.apply(rack_admission(2, gpus=8, workload="team/a", sequence=1))  # n1, n2
    block = msg.admitted(
        "team/b",
        {("b1",): 1},
        sequence=2,
        uid="team/b",
        levels=[BLOCK],
        per_pod=msg.requests(gpus=8),
    )
    accounting.apply(block)
    later = msg.admitted(
        "team/c",
        {("b1", "r2"): 1},
        sequence=3,
        uid="team/c",
        levels=[BLOCK, RACK],
        per_pod=msg.requests(gpus=8),
    )
    accounting.apply(later)
    assert accounting.reservation("team/b") == {"n3": 1}
    assert accounting.reservation("team/c") == {"n4": 1}
    # Rack r1 empties: b moves there, and c, which shares no node with r1, follows through b.
    accounting.apply(Released(workload="team/a", uid="team/a", queue="q", reason="Completed"))
    assert accounting.reservation("team/b") == {"n1": 1}
    assert accounting.reservation("team/c") == {"n3": 1}


def test_a_spread_beside_a_host_reservation_of_another_topology() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.apply(
        msg.admitted(
            "team/host", {host("n1"): 2}, sequence=5, uid="h", per_pod=msg.requests(gpus=4)
        )
    )
    accounting.apply(rack_admission(2, gpus=4, sequence=2))
    assert accounting.reservation("team/train") == {"n2": 2}
    accounting.apply(Released(workload="team/host", uid="h", queue="q", reason="Deleted"))
    assert accounting.reservation("team/train") == {"n1": 2}


# --------------------------------------------------------------------------- schedulability


@pytest.mark.parametrize(
    ("change", "schedulable"),
    [
        ({"ready": False}, False),
        ({"unschedulable": True}, False),
        ({"taints": [Taint(key="node.kubernetes.io/unreachable", effect="NoExecute")]}, False),
        ({"taints": [Taint(key="node.kubernetes.io/memory-pressure", effect="NoSchedule")]}, False),
        (
            {"taints": [Taint(key="node.kubernetes.io/not-ready", effect="PreferNoSchedule")]},
            True,
        ),
        ({"taints": [Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")]}, True),
    ],
)
def test_node_conditions_take_effect_at_once(change: dict[str, object], schedulable: bool) -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.take_changes()
    accounting.apply(msg.node("n1", **change))
    changes = accounting.take_changes()
    assert NodeKey(TOPOLOGY, "n1") in changes.keys
    record = accounting.record(NodeKey(TOPOLOGY, "n1"))
    assert isinstance(record, CapacityNode)
    assert record.schedulable is schedulable
    rack = accounting.record(DomainKey(TOPOLOGY, 1, ("b1", "r1")))
    assert isinstance(rack, CapacityDomain)
    assert rack.nodes == (2 if schedulable else 1)
    assert rack.free[GPU] == (16 if schedulable else 8)


def test_a_node_missing_a_level_label_is_unschedulable_with_a_short_path() -> None:
    accounting = cluster(NodeState(name="odd", labels={BLOCK: "b1"}, allocatable={GPU: 8}))
    record = accounting.record(NodeKey(TOPOLOGY, "odd"))
    assert isinstance(record, CapacityNode)
    assert (record.domain, record.schedulable) == (["b1"], False)
    block = accounting.record(DomainKey(TOPOLOGY, 0, ("b1",)))
    assert isinstance(block, CapacityDomain)
    assert (block.nodes, block.free) == (0, {})


# --------------------------------------------------------------------------- records and changes


def test_one_node_change_touches_its_record_and_its_domains_only() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"), msg.node("n3", "b1", "r2"))
    accounting.take_changes()
    accounting.apply(msg.pod("a", "n1"))
    assert accounting.take_changes().keys == {
        NodeKey(TOPOLOGY, "n1"),
        DomainKey(TOPOLOGY, 0, ("b1",)),
        DomainKey(TOPOLOGY, 1, ("b1", "r1")),
        DomainKey(TOPOLOGY, 2, ("b1", "r1", "n1")),
    }
    assert accounting.take_changes().keys == frozenset()


def test_decisions_touch_their_nodes_and_carry_the_applied_sequence() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"))
    accounting.take_changes()
    accounting.apply(msg.pod("w-0", "n1"))
    accounting.take_changes()
    accounting.apply(msg.admitted("team/train", {host("n1"): 1}, sequence=12))
    changes = accounting.take_changes()
    assert changes.touched == {NodeKey(TOPOLOGY, "n1")}  # touched though its free is unchanged
    record = accounting.record(NodeKey(TOPOLOGY, "n1"))
    assert isinstance(record, CapacityNode)
    assert record.applied_sequence == 12


def test_removed_nodes_and_emptied_domains_have_no_record() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2", "b1", "r2"))
    accounting.take_changes()
    accounting.apply(Tombstone(object_kind="node", name="n2"))
    keys = accounting.take_changes().keys
    assert DomainKey(TOPOLOGY, 1, ("b1", "r2")) in keys
    assert accounting.record(NodeKey(TOPOLOGY, "n2")) is None
    assert accounting.record(DomainKey(TOPOLOGY, 1, ("b1", "r2"))) is None
    assert [key_of(r) for r in accounting.records()] == accounting.keys()


def test_topology_changes_and_removal() -> None:
    accounting = cluster(msg.node("n1"))
    old_keys = set(accounting.keys())
    accounting.take_changes()
    accounting.apply(TopologyConfig(name=TOPOLOGY, levels=[RACK, HOST]))
    keys = accounting.take_changes().keys
    assert old_keys <= keys
    assert accounting.record(DomainKey(TOPOLOGY, 0, ("b1",))) is None
    assert accounting.record(DomainKey(TOPOLOGY, 0, ("r1",))) is not None
    accounting.apply(TopologyConfig(name="other", levels=[BLOCK]))
    assert accounting.topologies() == ["default", "other"]
    accounting.apply(Tombstone(object_kind="topology", name=TOPOLOGY))
    assert accounting.record(NodeKey(TOPOLOGY, "n1")) is None
    assert accounting.topologies() == ["other"]


@pytest.mark.parametrize(
    ("levels", "problem"),
    [
        ([], "topology bad: levels: a topology needs at least one level"),
        ([RACK, RACK], "topology bad: levels: ['rack', 'rack'] repeats a level"),
        ([""], "topology bad: levels: a level must not be empty"),
    ],
)
def test_invalid_topologies_are_reported_and_absent(levels: list[str], problem: str) -> None:
    accounting = cluster(msg.node("n1"))
    assert accounting.apply(TopologyConfig(name="bad", levels=levels)) == [problem]
    assert accounting.topologies() == [TOPOLOGY]


def test_tombstones_without_a_namespace_are_reported() -> None:
    accounting = cluster()
    assert accounting.apply(Tombstone(object_kind="pod", name="p")) == [
        "pod tombstone p: namespace: missing"
    ]


def test_same_content_ignores_the_sequence_and_empty_domains() -> None:
    a = CapacityNode(topology="t", node="n", domain=["x"], allocatable={}, free={})
    assert same_content(a, CapacityNode(**{**_fields(a), "applied_sequence": 9}))
    assert not same_content(a, CapacityNode(**{**_fields(a), "free": {GPU: 1}}))
    empty = CapacityDomain(topology="t", level="l", domain=["x"], free={}, nodes=0)
    assert same_content(empty, None)
    assert same_content(None, None)
    assert not same_content(a, None)
    assert key_of(empty) == DomainKey("t", 0, ("x",))


def test_per_pod_takes_a_pod_slot_and_drops_non_positive_amounts() -> None:
    assert per_pod({GPU: 2, "cpu": 0, "memory": -1}) == {GPU: 2, "pods": 1}
    assert per_pod({"pods": 2}) == {"pods": 2}


def _fields(record: CapacityNode) -> dict[str, object]:
    return {name: getattr(record, name) for name in record.__struct_fields__ if name != "kind"}


def test_a_repeated_preemption_leaves_the_victims_later_admission_alone() -> None:
    """A redelivered ``preempted`` names the admission the victim loses: one naming the
    victim only by key would drop the reservation of its re-admission while its pods come."""
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/b", {host("n1"): 2}, sequence=2, uid="ub"))
    event = Preempted(
        preemptor="team/online",
        preemptor_uid="u",
        victims=["team/b"],
        lost={"team/b": LostAdmission(uid="ub", sequence=2)},
    )
    assert accounting.preempt(event)
    accounting.apply(msg.admitted("team/b", {host("n1"): 2}, sequence=7, uid="ub"))
    assert not accounting.preempt(event)
    assert accounting.reservation("team/b") == {"n1": 2}
    # A replacement of the admission named (moved slots) ends with it.
    accounting.apply(msg.admitted("team/c", {host("n1"): 1}, sequence=8, uid="uc"))
    accounting.apply(
        msgspec.structs.replace(
            msg.admitted("team/c", {host("n1"): 1}, sequence=9, uid="uc"), replaces=8
        )
    )
    named = Preempted(
        preemptor="team/online",
        preemptor_uid="u",
        victims=["team/c"],
        lost={"team/c": LostAdmission(uid="uc", sequence=8)},
    )
    assert accounting.preempt(named)
    assert accounting.reservation("team/c") == {}


def test_an_admission_redelivered_after_it_ended_is_ignored() -> None:
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/b", {host("n1"): 2}, sequence=2, uid="ub"))
    accounting.apply(Released(workload="team/b", uid="ub", queue="q", reason="Evicted", sequence=3))
    accounting.apply(msg.admitted("team/b", {host("n1"): 2}, sequence=2, uid="ub"))
    assert accounting.reservation("team/b") == {}
    accounting.apply(msg.admitted("team/b", {host("n1"): 1}, sequence=4, uid="ub"))
    assert accounting.reservation("team/b") == {"n1": 1}


def test_an_admission_replayed_after_the_decision_that_ended_it_is_ignored() -> None:
    # A restart replays the last decision per subject in stream order: the release (or the
    # preemption) can come before a re-published copy of the admission it ended.
    accounting = cluster(msg.node("n1"))
    accounting.apply(
        Released(workload="team/b", uid="ub", queue="q", reason="Completed", sequence=5)
    )
    accounting.apply(msg.admitted("team/b", {host("n1"): 2}, sequence=4, uid="ub"))
    assert accounting.reservation("team/b") == {}
    accounting.apply(
        Preempted(
            preemptor="team/online",
            preemptor_uid="u",
            victims=["team/c"],
            lost={"team/c": LostAdmission(uid="uc", sequence=6)},
        )
    )
    accounting.apply(msg.admitted("team/c", {host("n1"): 1}, sequence=6, uid="uc"))
    replacing = msgspec.structs.replace(
        msg.admitted("team/c", {host("n1"): 1}, sequence=9, uid="uc"), replaces=6
    )
    accounting.apply(replacing)
    assert accounting.reservation("team/c") == {}
    assert accounting.reserved("n1") == {}
    # A later admission (re-admitted after the release) is reserved as usual.
    accounting.apply(msg.admitted("team/b", {host("n1"): 1}, sequence=10, uid="ub"))
    assert accounting.reservation("team/b") == {"n1": 1}


def test_a_finished_or_deleted_object_reserves_nothing_whatever_the_decisions_say() -> None:
    """Chaos seed 38: a copy of an older ``released`` (Evicted, sequence 3) was stored after
    the newer one (Completed, sequence 7), so a restarted topology-cache replaying the last
    message per subject met the Job's last admission (sequence 5) and no release after it,
    and reserved 16 GPUs for pods that had finished. The workload's own state says it
    finished: that ends its admissions, in either order."""
    finished = WorkloadState(
        namespace="team",
        name="b",
        uid="ub",
        owner_kind="Job",
        created_at=1.0,
        podsets=[],
        finished="Completed",
    )
    stale = Released(workload="team/b", uid="ub", queue="q", reason="Evicted", sequence=3)
    for state_first in (True, False):
        accounting = cluster(msg.node("n1"))
        if state_first:
            accounting.apply(finished)
        accounting.apply(msg.admitted("team/b", {host("n1"): 2}, sequence=5, uid="ub"))
        accounting.apply(stale)
        if not state_first:
            assert accounting.reservation("team/b") == {"n1": 2}  # as the decisions say
            accounting.apply(finished)
        assert accounting.reservation("team/b") == {}
        assert accounting.reserved("n1") == {}
    # Deleted (its tombstone names the object): the same; a new object under the name is not.
    accounting = cluster(msg.node("n1"))
    accounting.apply(msg.admitted("team/b", {host("n1"): 2}, sequence=5, uid="ub"))
    accounting.apply(Tombstone(object_kind="workload", namespace="team", name="b", uid="ub"))
    assert accounting.reservation("team/b") == {}
    accounting.apply(msgspec.structs.replace(finished, uid="ub2", finished=None))
    accounting.apply(msg.admitted("team/b", {host("n1"): 1}, sequence=9, uid="ub2"))
    assert accounting.reservation("team/b") == {"n1": 1}


def test_a_deleted_workload_leaves_no_record_and_its_late_admission_reserves_nothing() -> None:
    """The accounting's record of ended admissions must not grow with every workload name
    ever seen. A deleted workload that holds nothing is forgotten; a copy of its
    admission that comes later still reserves nothing."""
    accounting = cluster(msg.node("n1"))
    for n in range(50):
        name = f"w{n}"
        accounting.apply(msg.admitted(f"team/{name}", {host("n1"): 1}, sequence=n + 1, uid=name))
        accounting.apply(Tombstone(object_kind="workload", namespace="team", name=name, uid=name))
    assert accounting.decisions.recorded() == []
    accounting.apply(msg.admitted("team/w3", {host("n1"): 1}, sequence=4, uid="w3"))
    assert accounting.reserved("n1") == {}


def test_domain_gpus_sum_the_nodes_of_every_domain_above_the_node_by_state() -> None:
    accounting = cluster(msg.node("n1"), msg.node("n2"), msg.node("n9", "b1", "r2"))
    accounting.apply(msg.admitted("team/train", {host("n1"): 2}, per_pod=msg.requests(gpus=2)))
    accounting.apply(msg.pod("w-0", "n1", gpus=2))
    gpus = domain_gpus(accounting)
    states = ("allocatable", "used", "reserved", "free")
    block = [gpus[(TOPOLOGY, BLOCK, "b1", state)] for state in states]
    rack = [gpus[(TOPOLOGY, RACK, "b1/r1", state)] for state in states]
    other_rack = [gpus[(TOPOLOGY, RACK, "b1/r2", state)] for state in states]
    assert (block, rack, other_rack) == ([24, 2, 2, 20], [16, 2, 2, 12], [8, 0, 0, 8])
    assert {level for _, level, _, _ in gpus} == {BLOCK, RACK}  # nothing per node
