"""The overlay: admission never double-books, however decisions and capacity reports interleave.

The property test plays a small world: admission decides from its view (reported free minus
overlay), a topology-cache applies decisions in sequence order and queues capacity reports per
(topology, node), and the reports are delivered in any interleaving, in order per subject,
sometimes only the latest one (a last-value stream lets a slow follower skip). After every
admission the workloads admitted and not released must fit every node.
"""

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.model import NodeName
from tidegate.policy.overlay import Overlay

N1, N2, N3 = NodeName("n1"), NodeName("n2"), NodeName("n3")
TOPOLOGIES = {"t1": [N1, N2, N3], "t2": [N2, N3]}
ALLOCATABLE = 10


def test_pending_until_the_node_reports_the_sequence() -> None:
    overlay = Overlay()
    overlay.add(1, {N1: {"cpu": 4}, N2: {"cpu": 1}})
    overlay.add(2, {N1: {"cpu": 2}})
    assert overlay.pending("t1", N1) == {"cpu": 6}
    assert overlay.report("t1", N1, 1) == {"cpu": 2}
    assert overlay.pending("t1", N2) == {"cpu": 1}
    assert overlay.report("t1", N1, 5) == {}
    assert overlay.nodes() == [N2]


def test_a_node_in_two_topologies_waits_for_both_reports() -> None:
    overlay = Overlay()
    overlay.report("t1", N2, 0)
    overlay.report("t2", N2, 0)
    overlay.add(3, {N2: {"cpu": 4}})
    assert overlay.report("t1", N2, 3) == {}
    assert overlay.pending("t2", N2) == {"cpu": 4}
    assert len(overlay) == 1
    overlay.report("t2", N2, 3)
    assert len(overlay) == 0


def test_forgetting_a_topology_releases_what_only_it_held_back() -> None:
    overlay = Overlay()
    overlay.report("t1", N2, 0)
    overlay.report("t2", N2, 0)
    overlay.add(1, {N2: {"cpu": 4}})
    overlay.report("t1", N2, 1)
    overlay.forget("t2", N2)
    assert len(overlay) == 0


def test_expire_drops_only_old_entries_below_the_watermark() -> None:
    overlay = Overlay()
    overlay.add(1, {N1: {"cpu": 1}}, at=10.0)
    overlay.add(2, {N1: {"cpu": 1}}, at=10.0)
    overlay.add(3, {N2: {"cpu": 1}}, at=50.0)
    assert overlay.expire(watermark=2, before=20.0) == [N1]
    assert overlay.expire(watermark=3, before=20.0) == []
    assert overlay.nodes() == [N2]


def test_a_decision_already_reported_everywhere_adds_nothing() -> None:
    overlay = Overlay()
    overlay.report("t1", N1, 7)
    overlay.add(7, {N1: {"cpu": 1}, N2: {"cpu": 1}})
    assert overlay.nodes() == [N2]


def test_reports_never_move_backwards() -> None:
    overlay = Overlay()
    overlay.add(4, {N1: {"cpu": 1}})
    overlay.report("t1", N1, 4)
    overlay.add(5, {N1: {"cpu": 2}})
    assert overlay.report("t1", N1, 3) == {"cpu": 2}


@dataclass
class World:
    """Admission (view + overlay), a topology-cache, and the reports in flight between them."""

    overlay: Overlay = field(default_factory=Overlay)
    sequence: int = 0
    log: list[tuple[int, str, NodeName, int]] = field(default_factory=list)
    """Decisions in sequence order: (sequence, admit|release, node, amount)."""
    live: dict[int, tuple[NodeName, int]] = field(default_factory=dict)
    """Admitted and not released (by admission's own account): sequence → (node, amount)."""
    cache_applied: int = 0
    cache_used: dict[NodeName, int] = field(default_factory=dict)
    in_flight: dict[tuple[str, NodeName], list[tuple[int, int]]] = field(default_factory=dict)
    reported_free: dict[tuple[str, NodeName], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Admission starts from a replayed view: a node it has no report of is not placeable.
        for topology, nodes in TOPOLOGIES.items():
            for node in nodes:
                self.reported_free[(topology, node)] = ALLOCATABLE
                self.overlay.report(topology, node, 0)

    def view_free(self, topology: str, node: NodeName) -> int:
        reported = self.reported_free[(topology, node)]
        return reported - self.overlay.pending(topology, node).get("cpu", 0)

    def admit(self, topology: str, node: NodeName, amount: int) -> None:
        if node not in TOPOLOGIES[topology] or amount > self.view_free(topology, node):
            return
        held = sum(a for n, a in self.live.values() if n == node)
        assert held + amount <= ALLOCATABLE, f"double-booked {node}: {held} + {amount}"
        self.sequence += 1
        self.overlay.add(self.sequence, {node: {"cpu": amount}})
        self.log.append((self.sequence, "admit", node, amount))
        self.live[self.sequence] = (node, amount)

    def release(self, pick: int) -> None:
        if not self.live:
            return
        admitted = sorted(self.live)[pick % len(self.live)]
        node, amount = self.live.pop(admitted)
        self.sequence += 1
        self.log.append((self.sequence, "release", node, amount))

    def cache_apply(self) -> None:
        pending = [d for d in self.log if d[0] > self.cache_applied]
        if not pending:
            return
        sequence, kind, node, amount = pending[0]
        delta = amount if kind == "admit" else -amount
        self.cache_used[node] = self.cache_used.get(node, 0) + delta
        self.cache_applied = sequence
        self.publish(node)

    def publish(self, node: NodeName) -> None:
        free = ALLOCATABLE - self.cache_used.get(node, 0)
        for topology, nodes in TOPOLOGIES.items():
            if node in nodes:
                queue = self.in_flight.setdefault((topology, node), [])
                queue.append((free, self.cache_applied))

    def deliver(self, pick: int, latest_only: bool) -> None:
        subjects = sorted(k for k, v in self.in_flight.items() if v)
        if not subjects:
            return
        subject = subjects[pick % len(subjects)]
        queue = self.in_flight[subject]
        free, applied = queue[-1] if latest_only else queue[0]
        del queue[: len(queue) if latest_only else 1]
        self.reported_free[subject] = free
        self.overlay.report(subject[0], subject[1], applied)


action = st.one_of(
    st.tuples(
        st.just("admit"),
        st.sampled_from(sorted(TOPOLOGIES)),
        st.sampled_from([N1, N2, N3]),
        st.integers(1, 6),
    ),
    st.tuples(st.just("release"), st.integers(0, 20)),
    st.tuples(st.just("apply")),
    st.tuples(st.just("republish"), st.sampled_from([N1, N2, N3])),
    st.tuples(st.just("deliver"), st.integers(0, 20), st.booleans()),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(action, max_size=60))
def test_decisions_and_capacity_updates_in_any_order_never_double_book(
    actions: list[tuple[object, ...]],
) -> None:
    world = World()
    for step in actions:
        match step:
            case ("admit", str(topology), str(node), int(amount)):
                world.admit(topology, NodeName(node), amount)
            case ("release", int(pick)):
                world.release(pick)
            case ("apply",):
                world.cache_apply()
            case ("republish", str(node)):
                world.publish(NodeName(node))
            case ("deliver", int(pick), bool(latest_only)):
                world.deliver(pick, latest_only)
    # Once everything is applied and delivered the overlay is empty and the view is the truth.
    while world.cache_applied < world.sequence:
        world.cache_apply()
    for node in (N1, N2, N3):
        world.publish(node)
    while any(world.in_flight.values()):
        world.deliver(0, latest_only=True)
    assert len(world.overlay) == 0
    for topology, nodes in TOPOLOGIES.items():
        for node in nodes:
            held = sum(a for n, a in world.live.values() if n == node)
            assert world.view_free(topology, node) == ALLOCATABLE - held
