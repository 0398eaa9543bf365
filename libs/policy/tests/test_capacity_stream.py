"""PublishedView: what to publish given what the capacity stream holds, and the event ids."""

from tidegate.model import (
    Admitted,
    CapacityDomain,
    CapacityNode,
    DomainCount,
    NodeState,
    Tombstone,
    TopologyAssignment,
    TopologyConfig,
    subjects,
)
from tidegate.placement.accounting import CapacityAccounting, DomainKey, NodeKey
from tidegate.policy.capacity_stream import PublishedView, node_key_of_subject, subject_of

LEVELS = ["block", "host"]
CLUSTER = "c1"


def cluster(*names: str) -> CapacityAccounting:
    accounting = CapacityAccounting()
    accounting.apply(TopologyConfig(name="t", levels=LEVELS))
    for name in names:
        accounting.apply(
            NodeState(name=name, labels={"block": "b1", "host": name}, allocatable={"cpu": 1000})
        )
    return accounting


def publish_all(view: PublishedView, accounting: CapacityAccounting, position: str = "1.1") -> int:
    """Plan every change, pretend all were stored; return how many messages it took."""
    changes = accounting.take_changes()
    batch = view.plan(accounting, changes.keys, touched=changes.touched, position=position, now=1.0)
    for item in batch:
        view.stored(item)
    return len(batch)


def test_first_round_publishes_everything_then_only_changes() -> None:
    accounting = cluster("n1", "n2")
    view = PublishedView(CLUSTER)
    assert publish_all(view, accounting) == 5  # two nodes, one block, two hosts
    assert publish_all(view, accounting) == 0
    accounting.apply(NodeState(name="n1", labels={"block": "b1", "host": "n1"}, ready=False))
    batch = view.plan(accounting, accounting.take_changes().keys, position="2.1", now=2.0)
    assert [item.subject for item in batch] == [
        subjects.capacity_node(CLUSTER, "t", "n1"),
        subjects.capacity_domain(CLUSTER, "t", 0, ["b1"]),
        subjects.capacity_domain(CLUSTER, "t", 1, ["b1", "n1"]),
    ]
    assert batch[0].envelope.event_id == f"topology-cache:2.1:{batch[0].subject}"
    assert batch[0].envelope.source == "topology-cache"


def test_a_vanished_node_gets_a_tombstone_and_its_domain_an_empty_record() -> None:
    accounting = cluster("n1", "n2")
    view = PublishedView(CLUSTER)
    publish_all(view, accounting)
    accounting.apply(Tombstone(object_kind="node", name="n2"))
    changes = accounting.take_changes()
    batch = {item.key: item for item in view.plan(accounting, changes.keys, position="3.1", now=0)}
    assert batch[NodeKey("t", "n2")].envelope.body == Tombstone(object_kind="node", name="n2")
    host = batch[DomainKey("t", 1, ("b1", "n2"))].envelope.body
    assert isinstance(host, CapacityDomain)
    assert (host.nodes, host.free, host.level) == (0, {}, "host")
    for item in batch.values():
        view.stored(item)
    assert view.held(NodeKey("t", "n2")) is None
    assert view.held(DomainKey("t", 1, ("b1", "n2"))) is None
    # Nothing more to say about it afterwards.
    assert view.plan(accounting, batch, position="4.1", now=0) == []


def test_touched_nodes_are_republished_with_the_new_sequence() -> None:
    accounting = cluster("n1", "n2")
    view = PublishedView(CLUSTER)
    publish_all(view, accounting)
    empty = Admitted(
        workload="team/w",
        uid="u",
        queue="q",
        sequence=9,
        epoch=1,
        assignments={"main": TopologyAssignment(levels=LEVELS, domains=[])},
    )
    accounting.apply(empty)
    assert publish_all(view, accounting) == 0  # concerns no node
    assert accounting.applied_sequence == 9
    zero = Admitted(
        workload="team/w",
        uid="u",
        queue="q",
        sequence=10,
        epoch=1,
        assignments={
            "main": TopologyAssignment(
                levels=LEVELS, domains=[DomainCount(values=["b1", "n1"], count=0)]
            )
        },
    )
    accounting.apply(zero)
    assert publish_all(view, accounting) == 0  # a zero count reserves nothing, touches nothing
    assert (
        accounting.apply(
            Admitted(
                workload="team/v",
                uid="v",
                queue="q",
                sequence=11,
                epoch=1,
                assignments={
                    "main": TopologyAssignment(
                        levels=LEVELS, domains=[DomainCount(values=["b1", "n2"], count=1)]
                    )
                },
            )
        )
        == []
    )
    changes = accounting.take_changes()
    batch = view.plan(accounting, changes.keys, touched=changes.touched, position="5.2", now=0)
    node = next(item.envelope.body for item in batch if item.key == NodeKey("t", "n2"))
    assert isinstance(node, CapacityNode)
    assert (node.applied_sequence, node.free["pods"]) == (11, 109)


def test_replayed_records_are_not_published_again() -> None:
    accounting = cluster("n1")
    first = PublishedView(CLUSTER)
    publish_all(first, accounting)
    stored = list(accounting.records())
    restarted = PublishedView(CLUSTER)
    for record in stored:
        key = NodeKey("t", "n1") if isinstance(record, CapacityNode) else None
        subject = subject_of(CLUSTER, key) if key else "ignored"
        assert restarted.replayed(subject, record)
    assert len(restarted) == 3
    again = CapacityAccounting()
    for body in (
        TopologyConfig(name="t", levels=LEVELS),
        NodeState(name="n1", labels={"block": "b1", "host": "n1"}, allocatable={"cpu": 1000}),
    ):
        again.apply(body)
    again.take_changes()
    assert restarted.plan(again, again.keys(), position="1.0", now=0) == []
    # A tombstone read back forgets the node; other kinds are not capacity records.
    node_subject = subjects.capacity_node(CLUSTER, "t", "n1")
    assert restarted.replayed(node_subject, Tombstone(object_kind="node", name="n1"))
    assert restarted.held(NodeKey("t", "n1")) is None
    assert not restarted.replayed(
        "tg.c1.capacity.t.domain.0.b1", Tombstone(object_kind="node", name="x")
    )
    assert not restarted.replayed(node_subject, TopologyConfig(name="t", levels=LEVELS))


def test_subjects_round_trip_with_escaped_names() -> None:
    key = NodeKey("my.topology", "ip-10-0-0-1.ec2.internal")
    assert node_key_of_subject(subject_of(CLUSTER, key)) == key
    assert node_key_of_subject("tg.c1.node.n1") is None
    assert subject_of(CLUSTER, DomainKey("t", 1, ("b.1", "r 2"))) == (
        "tg.c1.capacity.t.domain.1.b%2E1.r%202"
    )
