"""CapacityView: free capacity, reservations, per-domain sums, copies, ordering rebuilds."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.model import PodSetSpec, Taint, Toleration, TopologyRequest
from tidegate.placement import (
    DEFAULT_MAX_PODS,
    CapacityView,
    NodeCapacity,
    OverReleaseError,
    PlacementRequest,
    place,
    tolerates,
)

BLOCK, RACK, HOST = "block", "rack", "host"
LEVELS = (BLOCK, RACK, HOST)
GPU = "nvidia.com/gpu"


def gpu_node(name: str, block: str, rack: str, gpus: int = 8, **kwargs: object) -> NodeCapacity:
    return NodeCapacity(
        name=name,
        labels={BLOCK: block, RACK: rack, HOST: name},
        allocatable={GPU: gpus, "cpu": 32_000},
        **kwargs,  # type: ignore[arg-type]
    )


def test_free_is_allocatable_minus_used_minus_reserved() -> None:
    view = CapacityView(LEVELS, [gpu_node("n1", "b1", "r1", used={GPU: 2, "cpu": 1000})])
    assert view.free("n1") == {"pods": DEFAULT_MAX_PODS, GPU: 6, "cpu": 31_000}
    view.reserve("n1", {GPU: 3, "pods": 3})
    assert view.free("n1") == {"pods": DEFAULT_MAX_PODS - 3, GPU: 3, "cpu": 31_000}
    assert view.reserved("n1") == {GPU: 3, "pods": 3}
    view.set_used("n1", {GPU: 4})
    assert view.free("n1")[GPU] == 1
    view.unreserve("n1", {GPU: 3, "pods": 3})
    assert view.reserved("n1") == {}
    assert view.free("n1")[GPU] == 4
    view.upsert_node(gpu_node("n1", "b1", "r1", gpus=16))
    assert view.used("n1") == {}
    assert view.free("n1")[GPU] == 16


def test_reservations_survive_an_upsert_and_go_with_a_removal() -> None:
    view = CapacityView(LEVELS, [gpu_node("n1", "b1", "r1")])
    view.reserve("n1", {GPU: 2})
    view.upsert_node(gpu_node("n1", "b1", "r1", ready=False))
    assert view.reserved("n1") == {GPU: 2}
    assert not view.schedulable("n1")
    view.remove_node("n1")
    view.remove_node("n1")  # idempotent
    assert "n1" not in view
    assert len(view) == 0
    view.upsert_node(gpu_node("n1", "b1", "r1"))
    assert view.reserved("n1") == {}


def test_unknown_node_is_a_key_error() -> None:
    view = CapacityView(LEVELS)
    with pytest.raises(KeyError, match="node 'x' is not in the capacity view"):
        view.free("x")
    with pytest.raises(KeyError):
        view.reserve("x", {GPU: 1})


def test_levels_must_be_distinct_and_present() -> None:
    with pytest.raises(ValueError, match="at least one level"):
        CapacityView([])
    with pytest.raises(ValueError, match="duplicate level"):
        CapacityView([RACK, RACK])


def test_domains_are_paths_and_sums_follow_updates() -> None:
    view = CapacityView(
        LEVELS,
        [gpu_node("a", "b1", "r1"), gpu_node("b", "b2", "r1"), gpu_node("c", "b2", "r1")],
    )
    assert view.domains(RACK) == [("b1", "r1"), ("b2", "r1")]
    assert view.node_domain("b") == ("b2", "r1", "b")
    assert view.domain_free(RACK, ("b2", "r1"))[GPU] == 16
    assert view.domain_node_count(BLOCK, ("b2",)) == 2
    view.set_used("b", {GPU: 8})
    assert view.domain_free(RACK, ("b2", "r1"))[GPU] == 8
    view.upsert_node(gpu_node("c", "b2", "r1", unschedulable=True))
    assert view.domain_free(BLOCK, ("b2",)).get(GPU, 0) == 0
    assert view.domain_node_count(BLOCK, ("b2",)) == 1
    view.upsert_node(gpu_node("c", "b1", "r9"))
    assert view.domains(RACK) == [("b1", "r1"), ("b1", "r9"), ("b2", "r1")]
    assert view.domain_free(BLOCK, ("b1",))[GPU] == 16
    assert view.domain_free(RACK, ("nope",)) == {}


def test_copy_is_independent_in_both_directions() -> None:
    view = CapacityView(LEVELS, [gpu_node("a", "b1", "r1"), gpu_node("b", "b1", "r2")])
    twin = view.copy()
    twin.reserve("a", {GPU: 8})
    twin.upsert_node(gpu_node("new", "b3", "r1"))
    twin.remove_node("b")
    assert view.free("a")[GPU] == 8
    assert sorted(view.node_names()) == ["a", "b"]
    assert sorted(twin.node_names()) == ["a", "new"]
    view.upsert_node(gpu_node("c", "b1", "r1"))
    assert "c" not in twin
    request = PlacementRequest(podsets=[PodSetSpec(name="p", count=2, requests={GPU: 8})])
    assert set(place(view, request).node_counts["p"]) == {"a", "c"}
    assert not place(twin, request).fits


def test_relabelling_a_node_moves_it_in_the_ordering() -> None:
    view = CapacityView(LEVELS, [gpu_node("a", "b1", "r1", 1), gpu_node("b", "b1", "r2", 1)])
    request = PlacementRequest(
        podsets=[
            PodSetSpec(
                name="p", count=2, requests={GPU: 1}, topology=TopologyRequest(required=RACK)
            )
        ]
    )
    assert not place(view, request).fits
    view.upsert_node(gpu_node("b", "b1", "r1", 1))
    assert place(view, request).node_counts == {"p": {"a": 1, "b": 1}}


def test_selector_masks_follow_label_changes() -> None:
    view = CapacityView(LEVELS, [gpu_node("a", "b1", "r1")])
    request = PlacementRequest(
        podsets=[PodSetSpec(name="p", count=1, requests={GPU: 1})],
        node_selector={"pool": "x"},
    )
    assert not place(view, request).fits
    labels = {BLOCK: "b1", RACK: "r1", HOST: "a", "pool": "x"}
    view.upsert_node(NodeCapacity(name="a", labels=labels, allocatable={GPU: 8}))
    assert place(view, request).fits
    view.upsert_node(NodeCapacity(name="a", labels={**labels, "pool": "y"}, allocatable={GPU: 8}))
    assert not place(view, request).fits


def test_toleration_rules() -> None:
    taint = Taint(key="gpu", value="h200", effect="NoSchedule")
    assert tolerates([Toleration(key="gpu", value="h200")], taint)
    assert tolerates([Toleration(key="gpu", operator="Exists", effect="NoSchedule")], taint)
    assert tolerates([Toleration(operator="Exists")], taint)
    assert not tolerates([Toleration(key="gpu", value="a100")], taint)
    assert not tolerates([Toleration(key="gpu", operator="Exists", effect="NoExecute")], taint)
    assert not tolerates([], taint)


def test_nodes_round_trip() -> None:
    node = gpu_node("a", "b1", "r1", used={GPU: 1}, ready=False, unschedulable=True)
    (back,) = CapacityView(LEVELS, [node]).nodes()
    assert back.name == "a"
    assert back.labels == node.labels
    assert back.used == {GPU: 1}
    assert (back.ready, back.unschedulable) == (False, True)


operations = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "remove", "used", "reserve", "unreserve", "copy"]),
        st.integers(0, 5),  # node
        st.integers(0, 2),  # block
        st.integers(0, 8),  # amount
        st.booleans(),  # ready
    ),
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(ops=operations)
def test_domain_sums_always_equal_a_recount(
    ops: list[tuple[str, int, int, int, bool]],
) -> None:
    view = CapacityView(LEVELS)
    for op, index, block, amount, ready in ops:
        name = f"n{index}"
        if op == "upsert":
            view.upsert_node(gpu_node(name, f"b{block}", f"r{index % 2}", amount, ready=ready))
        elif name not in view:
            continue
        elif op == "remove":
            view.remove_node(name)
        elif op == "used":
            view.set_used(name, {GPU: amount, "example.com/new": 1})
        elif op == "reserve":
            view.reserve(name, {GPU: amount})
        elif op == "unreserve":
            view.unreserve(name, {GPU: min(amount, view.reserved(name).get(GPU, 0))})
        else:
            view = view.copy()
    for level_index, level in enumerate(LEVELS):
        expected: dict[tuple[str, ...], int] = {}
        counts: dict[tuple[str, ...], int] = {}
        for name in view.node_names():
            path = view.node_domain(name)
            if path is None or not view.schedulable(name):
                continue
            key = path[: level_index + 1]
            expected[key] = expected.get(key, 0) + view.free(name).get(GPU, 0)
            counts[key] = counts.get(key, 0) + 1
        assert sorted(view.domains(level)) == sorted(counts)
        for key, total in expected.items():
            assert view.domain_free(level, key).get(GPU, 0) == total
            assert view.domain_node_count(level, key) == counts[key]


def test_a_double_release_is_an_error_not_a_silent_clamp() -> None:
    """Giving back more than was reserved raises: clamping at zero would hide the double
    release (another gang's reservation on the node would silently shrink)."""
    view = CapacityView(LEVELS, [gpu_node("n1", "b1", "r1")])
    view.reserve("n1", {GPU: 3, "pods": 3})
    view.unreserve("n1", {GPU: 2, "pods": 2})
    with pytest.raises(OverReleaseError, match=r"n1 .*nvidia.com/gpu: 2 > 1 reserved"):
        view.unreserve("n1", {GPU: 2, "pods": 1})
    assert view.reserved("n1") == {GPU: 1, "pods": 1}, "nothing changed"
    assert view.free("n1")[GPU] == 7
