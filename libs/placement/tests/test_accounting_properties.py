"""CapacityAccounting under random churn, against brute force and against a fresh rebuild.

Random sequences of node, pod and decision events (binds before and after admission, pods
finishing, nodes failing and moving racks, re-admissions, releases, preemptions) must leave:

- usage equal to a brute-force sum over bound, non-terminal pods;
- free = allocatable − usage − reservations, reservations computed independently from the
  accounting's own per-workload report (never double counted: each (workload, podset, domain)
  reserves exactly max(0, assigned − bound) pods, on nodes of that domain);
- domain records equal to sums over their schedulable nodes;
- a follower that applies only :meth:`take_changes` deltas holding the full view;
- the view equal to a fresh accounting fed only the final state, in any order (restart).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.model import (
    Admitted,
    CapacityDomain,
    CapacityNode,
    DomainCount,
    NodeState,
    PodState,
    Preempted,
    Released,
    Tombstone,
    TopologyAssignment,
    TopologyConfig,
)
from tidegate.model import resources as res
from tidegate.model.pods import TERMINAL_PHASES
from tidegate.placement.accounting import (
    CapacityAccounting,
    CapacityKey,
    CapacityRecord,
    DomainKey,
    key_of,
    per_pod,
    same_content,
)

BLOCK, RACK, HOST = "block", "rack", "host"
TOPOLOGIES = {"hosts": [BLOCK, RACK, HOST], "racks": [BLOCK, RACK], "blocks": [BLOCK]}
NODES = [f"n{i}" for i in range(5)]
RACKS = ["r1", "r2"]
WORKLOADS = ["team/a", "team/b", "team/c"]
PODSETS = ["workers", "launcher"]
GPU = "nvidia.com/gpu"

node_events = st.builds(
    lambda name, rack, gpus, ready, cordoned: NodeState(
        name=name,
        labels={BLOCK: "b1", RACK: rack, HOST: name},
        allocatable={GPU: gpus, "cpu": 8_000},
        ready=ready,
        unschedulable=cordoned,
    ),
    st.sampled_from(NODES),
    st.sampled_from(RACKS),
    st.integers(0, 8),
    st.booleans(),
    st.booleans(),
)
node_deletions = st.builds(
    lambda name: Tombstone(object_kind="node", name=name), st.sampled_from(NODES)
)
pod_events = st.builds(
    lambda i, node, phase, owner, podset, gpus: PodState(
        namespace="team",
        name=f"p{i}",
        uid=f"u{i}",
        node_name=node,
        phase=phase,
        requests={GPU: gpus, "cpu": 500},
        workload=owner,
        podset=podset if owner else None,
    ),
    st.integers(0, 11),
    st.sampled_from([None, *NODES, *NODES, "gone"]),
    st.sampled_from(["Pending", "Running", "Running", "Running", "Succeeded", "Failed"]),
    st.one_of(st.none(), st.sampled_from(WORKLOADS), st.sampled_from(WORKLOADS)),
    st.one_of(st.none(), st.sampled_from(PODSETS), st.just("workers")),
    st.integers(0, 3),
)
pod_deletions = st.builds(
    lambda i: Tombstone(object_kind="pod", name=f"p{i}", namespace="team"), st.integers(0, 11)
)


@st.composite
def admissions(draw: st.DrawFn) -> tuple[str, str, dict[str, list[tuple[tuple[str, ...], int]]]]:
    """(workload, topology, podset → [(domain values, count)]); sequence added when applied."""
    workload = draw(st.sampled_from(WORKLOADS))
    topology = draw(st.sampled_from(sorted(TOPOLOGIES)))
    podsets = draw(st.lists(st.sampled_from(PODSETS), min_size=1, max_size=2, unique=True))
    assignments: dict[str, list[tuple[tuple[str, ...], int]]] = {}
    for podset in podsets:
        if topology == "hosts":
            domains = st.tuples(st.sampled_from(RACKS), st.sampled_from(NODES)).map(
                lambda rn: ("b1", *rn)
            )
        elif topology == "racks":
            domains = st.sampled_from(RACKS).map(lambda rack: ("b1", rack))
        else:
            domains = st.just(("b1",))
        assignments[podset] = draw(
            st.lists(st.tuples(domains, st.integers(1, 4)), min_size=1, max_size=3)
        )
    return workload, topology, assignments


decision_events = st.one_of(
    admissions(),
    st.tuples(st.just("release"), st.sampled_from(WORKLOADS), st.booleans()),
    st.tuples(st.just("preempt"), st.sampled_from(WORKLOADS)),
)
initial_nodes = st.lists(node_events, min_size=len(NODES), max_size=len(NODES)).map(
    lambda states: [
        NodeState(name=name, labels={**state.labels, HOST: name}, allocatable=state.allocatable)
        for name, state in zip(NODES, states, strict=True)
    ]
)
churn = st.lists(
    st.one_of(
        node_events,
        node_deletions,
        pod_events,
        pod_events,
        pod_events,
        pod_deletions,
        decision_events,
        decision_events,
    ),
    min_size=20,
    max_size=60,
)
events = st.tuples(initial_nodes, churn).map(lambda parts: [*parts[0], *parts[1]])


@dataclass
class World:
    """The final state the events leave, kept naively, and the accounting under test."""

    accounting: CapacityAccounting = field(default_factory=CapacityAccounting)
    nodes: dict[str, NodeState] = field(default_factory=dict)
    pods: dict[str, PodState] = field(default_factory=dict)
    active: dict[str, Admitted] = field(default_factory=dict)
    sequence: int = 0
    mirror: dict[CapacityKey, CapacityRecord] = field(default_factory=dict)

    def feed(self, event: object) -> None:
        match event:
            case NodeState():
                self.nodes[event.name] = event
                self.accounting.apply(event)
            case PodState():
                self.pods[event.name] = event
                self.accounting.apply(event)
            case Tombstone(object_kind="node", name=name):
                self.nodes.pop(name, None)
                self.accounting.apply(event)
            case Tombstone(object_kind="pod", name=name):
                self.pods.pop(name, None)
                self.accounting.apply(event)
            case ("release", str(workload), bool(right_uid)):
                self.sequence += 1
                current = self.active.get(workload)
                uid = current.uid if current and right_uid else "someone-else"
                released = Released(
                    workload=workload,
                    uid=uid,
                    queue="q",
                    reason="Completed",
                    sequence=self.sequence,
                )
                if current is not None and right_uid:
                    del self.active[workload]
                self.accounting.apply(released)
            case ("preempt", str(workload)):
                self.active.pop(workload, None)
                self.accounting.apply(
                    Preempted(preemptor="team/online", preemptor_uid="x", victims=[workload])
                )
            case (str(workload), str(topology), dict(assignments)):
                self.sequence += 1
                decision = Admitted(
                    workload=workload,
                    uid=f"{workload}-{self.sequence}",
                    queue="q",
                    sequence=self.sequence,
                    epoch=1,
                    assignments={
                        podset: TopologyAssignment(
                            levels=TOPOLOGIES[topology],
                            domains=[DomainCount(values=list(v), count=c) for v, c in domains],
                        )
                        for podset, domains in assignments.items()
                    },
                    requests={podset: {GPU: 1 + len(podset) % 3} for podset in assignments},
                )
                self.active[workload] = decision
                assert self.accounting.apply(decision) == []
            case _:
                raise AssertionError(f"unexpected event {event!r}")

    def follow_changes(self) -> None:
        """Apply the accounting's deltas to the mirror, as the service's publisher does."""
        for key in self.accounting.take_changes().keys:
            record = self.accounting.record(key)
            if record is None:
                self.mirror.pop(key, None)
            else:
                self.mirror[key] = record


def start() -> World:
    world = World()
    for name, levels in TOPOLOGIES.items():
        world.accounting.apply(TopologyConfig(name=name, levels=levels))
    return world


def view(accounting: CapacityAccounting) -> dict[CapacityKey, CapacityRecord]:
    return {key_of(record): record for record in accounting.records()}


def assert_same_view(
    got: Mapping[CapacityKey, CapacityRecord], want: Mapping[CapacityKey, CapacityRecord]
) -> None:
    assert sorted(got, key=str) == sorted(want, key=str)
    for key, record in want.items():
        assert same_content(got[key], record), (key, got[key], record)


def bound(pod: PodState) -> bool:
    return pod.node_name is not None and pod.phase not in TERMINAL_PHASES


@settings(max_examples=150, deadline=None)
@given(events, st.randoms(use_true_random=False), st.integers(1, 5))
def test_random_churn_matches_brute_force_and_a_fresh_rebuild(
    history: list[object], rng: object, batch: int
) -> None:
    world = start()
    for i, event in enumerate(history):
        world.feed(event)
        if i % batch == 0:
            check(world, rng)
    check(world, rng)


def check(world: World, rng: object) -> None:
    """Every property of the module docstring, for the world as it is now."""
    world.follow_changes()
    accounting = world.accounting

    # Usage: brute force over the final pods.
    for name in world.nodes:
        expected: dict[str, int] = {}
        for pod in world.pods.values():
            if bound(pod) and pod.node_name == name:
                expected = res.add(expected, per_pod(pod.requests))
        assert accounting.used(name) == res.non_zero(expected)

    # Reservations: exactly max(0, assigned − bound) pods per (workload, podset, domain).
    assert accounting.admitted() == sorted(world.active)
    reserved_by_node: dict[str, dict[str, int]] = {}
    for workload, decision in world.active.items():
        single = len(decision.assignments) == 1
        for podset, assignment in decision.assignments.items():
            placed = accounting.reservation(workload, podset)
            claimed: set[str] = set()
            levels = assignment.levels
            counts: dict[tuple[str, ...], int] = {}
            for domain in assignment.domains:
                counts[tuple(domain.values)] = counts.get(tuple(domain.values), 0) + domain.count
            for values, count in counts.items():
                members = {
                    n
                    for n, state in world.nodes.items()
                    if tuple(state.labels.get(level) for level in levels) == values
                }
                held = sum(
                    1
                    for pod in world.pods.values()
                    if bound(pod)
                    and pod.workload == workload
                    and (pod.podset == podset or (single and pod.podset is None))
                    and pod.node_name in members
                )
                want = max(0, count - held) if members else 0
                mine = {n: placed[n] for n in members if n in placed}
                assert sum(mine.values()) == want, (workload, podset, values)
                amount = per_pod(decision.requests[podset])
                for n, pods in mine.items():
                    reserved_by_node[n] = res.add(
                        reserved_by_node.get(n, {}), res.scale(amount, pods)
                    )
                claimed.update(mine)
            assert set(placed) <= claimed, (workload, podset, placed)
    for name, state in world.nodes.items():
        allocatable = {**state.allocatable}
        allocatable.setdefault("pods", 110)
        want_free = res.subtract(
            res.subtract(allocatable, accounting.used(name)), reserved_by_node.get(name, {})
        )
        got = accounting.free(name)
        assert res.non_zero(got) == res.non_zero(want_free), name
        assert accounting.reserved(name) == res.non_zero(reserved_by_node.get(name, {}))

    # Domain records: sums over schedulable nodes.
    current = view(accounting)
    for key, record in current.items():
        if isinstance(record, CapacityDomain):
            assert isinstance(key, DomainKey)
            inside = [
                r
                for r in current.values()
                if isinstance(r, CapacityNode)
                and r.topology == key.topology
                and tuple(r.domain[: key.level + 1]) == key.path
            ]
            schedulable = [r for r in inside if r.schedulable]
            assert record.nodes == len(schedulable)
            assert record.free == res.non_zero(res.total(r.free for r in schedulable))
            assert inside, key

    # Deltas alone rebuild the view.
    assert_same_view(world.mirror, current)

    # A fresh accounting fed the final state in any order has the same view.
    fresh = CapacityAccounting()
    inputs: list[object] = [
        *world.nodes.values(),
        *world.pods.values(),
        *world.active.values(),
        *(TopologyConfig(name=n, levels=levels) for n, levels in TOPOLOGIES.items()),
    ]
    rng.shuffle(inputs)  # type: ignore[attr-defined]
    for item in inputs:
        fresh.apply(item)  # type: ignore[arg-type]
    assert_same_view(view(fresh), current)
    for name in world.nodes:
        assert fresh.free(name) == accounting.free(name)
