"""ClusterCapacity: the live view and the empty view ("could it ever fit") follow the reports.

Most capacity reports change only what is free; the empty view is then left as it is. These
tests read both views back after every kind of change that does alter the empty one.
"""

from tidegate.model import CapacityNode, NodeName, NodeState, Taint, TopologyConfig
from tidegate.placement import NodeCapacity
from tidegate.policy.capacity import ClusterCapacity

RACK = "tidegate.io/rack"


def report(node: str, *, gpus: int = 8, free: int = 8, rack: str = "r1") -> CapacityNode:
    """A capacity report of ``node`` in Topology ``t``."""
    return CapacityNode(
        topology="t",
        node=node,
        domain=[rack],
        allocatable={"nvidia.com/gpu": gpus},
        free={"nvidia.com/gpu": free},
    )


def nodes(capacity: ClusterCapacity, *, empty: bool) -> dict[str, NodeCapacity]:
    """The nodes of Topology ``t``'s live or empty view, by name."""
    view = capacity.empty_view("t") if empty else capacity.view("t")
    assert view is not None
    return {node.name: node for node in view.nodes()}


def cluster() -> ClusterCapacity:
    """Topology ``t`` (one level, the rack) with two nodes of 8 GPUs, all free."""
    capacity = ClusterCapacity()
    capacity.set_topology(TopologyConfig(name="t", levels=[RACK]))
    capacity.update(report("n1"))
    capacity.update(report("n2"))
    return capacity


def test_a_report_of_less_free_changes_the_live_view_not_the_empty_one() -> None:
    capacity = cluster()
    capacity.update(report("n1", free=2))
    assert nodes(capacity, empty=False)["n1"].used == {"nvidia.com/gpu": 6}
    assert nodes(capacity, empty=True)["n1"].used == {}
    assert nodes(capacity, empty=True)["n1"].allocatable["nvidia.com/gpu"] == 8


def test_the_empty_view_follows_allocatable_domain_labels_and_taints() -> None:
    capacity = cluster()
    capacity.update(report("n1", gpus=4, free=4, rack="r2"))
    empty = nodes(capacity, empty=True)["n1"]
    assert empty.allocatable["nvidia.com/gpu"] == 4
    assert empty.labels[RACK] == "r2"

    taint = Taint(key="gpu", value="broken", effect="NoSchedule")
    capacity.set_node(NodeState(name="n1", labels={"zone": "a"}, taints=[taint]))
    empty = nodes(capacity, empty=True)["n1"]
    assert empty.labels == {"zone": "a", RACK: "r2"}
    assert empty.taints == (taint,)
    assert nodes(capacity, empty=True)["n2"].taints == ()


def test_a_node_that_left_and_came_back_is_in_the_empty_view_again() -> None:
    capacity = cluster()
    capacity.remove("t", "n1")
    assert set(nodes(capacity, empty=True)) == {"n2"}
    capacity.update(report("n1"))  # the same content as before it left
    assert set(nodes(capacity, empty=True)) == {"n1", "n2"}


def test_a_topology_removed_and_added_again_is_rebuilt_from_new_reports() -> None:
    capacity = cluster()
    capacity.remove_topology("t")
    assert capacity.empty_view("t") is None
    capacity.set_topology(TopologyConfig(name="t", levels=[RACK]))
    capacity.update(report("n1"))
    assert set(nodes(capacity, empty=True)) == {"n1"}
    assert capacity.topologies_of(NodeName("n1")) == ["t"]
