"""ClusterCapacity: the live view and the empty view ("could it ever fit") follow the reports.

Most capacity reports change only what is free; the empty view is then left as it is. These
tests read both views back after every kind of change that does alter the empty one, and check
that the placements it remembers are forgotten by every change of the view they were made on.
"""

import msgspec
import pytest

from tidegate.model import (
    NodeName,
    NodeState,
    PodSetSpec,
    Taint,
    TopologyConfig,
    TopologyRequest,
)
from tidegate.placement import CapacityView, NodeCapacity, PlacementRequest, PlacementResult
from tidegate.policy.capacity import STALE_WRITTEN_AT, ClusterCapacity
from tidegate.testing.messages import Messages

RACK = "tidegate.io/rack"


msg = Messages(levels=[RACK], defaults={"capacity_node": {"topology": "t", "pods": None}})
"""Capacity records of Topology ``t``, whose one level is the rack."""


def nodes(capacity: ClusterCapacity, *, empty: bool) -> dict[str, NodeCapacity]:
    """The nodes of Topology ``t``'s live or empty view, by name."""
    view = capacity.empty_view("t") if empty else capacity.view("t")
    assert view is not None
    return {node.name: node for node in view.nodes()}


def count_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the name of every node written into a view, in order."""
    written: list[str] = []
    upsert = CapacityView.upsert_node

    def counting(view: CapacityView, node: NodeCapacity) -> None:
        written.append(node.name)
        upsert(view, node)

    monkeypatch.setattr(CapacityView, "upsert_node", counting)
    return written


def cluster() -> ClusterCapacity:
    """Topology ``t`` (one level, the rack) with two nodes of 8 GPUs, all free."""
    capacity = ClusterCapacity()
    capacity.set_topology(TopologyConfig(name="t", levels=[RACK]))
    capacity.update(msg.capacity_node("n1", "r1"))
    capacity.update(msg.capacity_node("n2", "r1"))
    return capacity


def test_a_report_of_less_free_changes_the_live_view_not_the_empty_one() -> None:
    capacity = cluster()
    capacity.update(msg.capacity_node("n1", "r1", free_gpus=2))
    assert nodes(capacity, empty=False)["n1"].used == {"nvidia.com/gpu": 6}
    assert nodes(capacity, empty=True)["n1"].used == {}
    assert nodes(capacity, empty=True)["n1"].allocatable["nvidia.com/gpu"] == 8


def test_the_empty_view_follows_allocatable_domain_labels_and_taints() -> None:
    capacity = cluster()
    capacity.update(msg.capacity_node("n1", "r2", gpus=4, free_gpus=4))
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
    capacity.update(msg.capacity_node("n1", "r1"))  # the same content as before it left
    assert set(nodes(capacity, empty=True)) == {"n1", "n2"}


def test_a_topology_removed_and_added_again_is_rebuilt_from_new_reports() -> None:
    capacity = cluster()
    capacity.remove_topology("t")
    assert capacity.empty_view("t") is None
    capacity.set_topology(TopologyConfig(name="t", levels=[RACK]))
    capacity.update(msg.capacity_node("n1", "r1"))
    assert set(nodes(capacity, empty=True)) == {"n1"}
    assert capacity.topologies_of(NodeName("n1")) == ["t"]


def gang(pods: int) -> PlacementRequest:
    """``pods`` pods of 8 GPUs each, all in one rack."""
    podset = PodSetSpec(
        name="workers",
        count=pods,
        requests={"nvidia.com/gpu": 8},
        topology=TopologyRequest(required=RACK),
    )
    return PlacementRequest(podsets=[podset])


def fits(capacity: ClusterCapacity, request: PlacementRequest, *, empty: bool = False) -> bool:
    """Whether ``capacity`` places ``request`` (on the empty view with ``empty``)."""
    answer = capacity.place("t", request, empty=empty)
    assert isinstance(answer, PlacementResult)
    return answer.fits


def test_the_same_request_on_an_unchanged_view_is_answered_from_memory() -> None:
    capacity = cluster()
    first = capacity.place("t", gang(2))
    assert capacity.place("t", gang(2)) is first
    assert capacity.place("t", gang(3), empty=True) is capacity.place("t", gang(3), empty=True)
    assert capacity.place("unknown", gang(1)) is None


def test_every_change_of_the_live_view_forgets_what_was_placed_on_it() -> None:
    capacity = cluster()
    assert fits(capacity, gang(2))
    capacity.take(1, {NodeName("n1"): {"nvidia.com/gpu": 8}}, at=0.0)
    assert not fits(capacity, gang(2))
    capacity.update(msgspec.structs.replace(msg.capacity_node("n1", "r1"), applied_sequence=1))
    assert fits(capacity, gang(2))
    capacity.hold(NodeName("n2"), {"nvidia.com/gpu": 1})
    assert not fits(capacity, gang(2))
    capacity.unhold(NodeName("n2"), {"nvidia.com/gpu": 1})
    assert fits(capacity, gang(2))
    capacity.update(msg.capacity_node("n2", "r1", free_gpus=0))
    assert not fits(capacity, gang(2))
    assert fits(capacity, gang(2), empty=True)  # a report of less free leaves the empty view


def test_every_change_of_the_empty_view_forgets_what_was_placed_on_it() -> None:
    capacity = cluster()
    assert not fits(capacity, gang(3), empty=True)
    capacity.update(msg.capacity_node("n3", "r1"))
    assert fits(capacity, gang(3), empty=True)
    capacity.remove("t", "n3")
    assert not fits(capacity, gang(3), empty=True)
    assert fits(capacity, gang(2), empty=True)
    taint = Taint(key="gpu", value="broken", effect="NoSchedule")
    capacity.set_node(NodeState(name="n1", taints=[taint]))
    assert not fits(capacity, gang(2), empty=True)
    capacity.set_topology(TopologyConfig(name="t", levels=["other"]))
    answer = capacity.place("t", gang(1), empty=True)
    assert isinstance(answer, str)  # a rack no longer among the levels: an invalid request
    assert "other" in answer or RACK in answer


def test_reports_between_two_reads_are_written_into_the_views_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = cluster()
    assert capacity.view("t") is not None  # the set-up's reports are written
    written = count_writes(monkeypatch)
    for free in (7, 6, 5, 4):
        capacity.update(msg.capacity_node("n1", "r1", free_gpus=free))
    assert written == []
    assert nodes(capacity, empty=False)["n1"].used == {"nvidia.com/gpu": 4}
    assert written == ["n1"]  # the live view once; the empty view did not change


def test_a_burst_of_reports_is_written_as_it_comes_so_no_read_pays_for_all_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every node of a large cluster reported at start, then the first read: without the
    bound, that read rewrote all of them (1.2 s at 16,384 nodes, in the first admission)."""
    capacity = cluster()
    assert capacity.view("t") is not None
    written = count_writes(monkeypatch)
    burst = STALE_WRITTEN_AT * 3 + 5
    for index in range(burst):
        capacity.update(msg.capacity_node(f"m{index:05d}", "r1", free_gpus=index % 9))
    # New nodes: each goes into the live and the empty view, all but the last few already.
    assert len(written) == 2 * (burst - 5)
    view = capacity.view("t")
    assert view is not None
    assert len(written) == 2 * burst, "the read wrote only the 5 reported since the last bound"
    assert len(view.node_names()) == burst + 2
    assert nodes(capacity, empty=False)["m00007"].used == {"nvidia.com/gpu": 1}


def test_a_node_that_left_and_came_back_between_two_reads_is_in_the_views() -> None:
    capacity = cluster()
    capacity.update(msg.capacity_node("n1", "r1", free_gpus=3))
    capacity.remove("t", "n1")
    assert set(nodes(capacity, empty=False)) == {"n2"}
    capacity.update(msg.capacity_node("n2", "r1", free_gpus=1))
    capacity.remove("t", "n2")
    capacity.update(msg.capacity_node("n2", "r1", free_gpus=2))
    assert set(nodes(capacity, empty=False)) == {"n2"}
    assert nodes(capacity, empty=False)["n2"].used == {"nvidia.com/gpu": 6}
    assert set(nodes(capacity, empty=True)) == {"n2"}
