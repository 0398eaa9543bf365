"""Table tests of placement semantics, including the worked examples of the seeds.

Seed 000/003 (Kueue TAS KEP): rack names repeat across blocks, a domain is its full path.
Seed 004 (KAI topology design): the datacenter → zone → rack → node tree with GPU counts.
"""

from collections.abc import Mapping, Sequence

import pytest

from tidegate.model import PodSetSpec, Taint, Toleration, TopologyRequest
from tidegate.placement import (
    PROFILES,
    CapacityView,
    NodeCapacity,
    PlacementError,
    PlacementRequest,
    PlacementResult,
    apply,
    place,
    release,
)

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)
GPU = "nvidia.com/gpu"


def node(
    name: str,
    block: str,
    rack: str,
    gpus: int = 8,
    *,
    used: int = 0,
    cpu: int = 96_000,
    extra: Mapping[str, str] | None = None,
    **kwargs: object,
) -> NodeCapacity:
    labels = {BLOCK: block, RACK: rack, HOST: name, **(extra or {})}
    return NodeCapacity(
        name=name,
        labels=labels,
        allocatable={"cpu": cpu, GPU: gpus, "pods": 110},
        used={GPU: used},
        **kwargs,  # type: ignore[arg-type]
    )


def podset(
    name: str = "workers",
    count: int = 1,
    gpus: int = 1,
    *,
    required: str | None = None,
    preferred: str | None = None,
    **kwargs: object,
) -> PodSetSpec:
    topology = kwargs.pop("topology", None) or TopologyRequest(
        required=required, preferred=preferred
    )
    requests = kwargs.pop("requests", None) or {GPU: gpus}
    return PodSetSpec(name=name, count=count, requests=requests, topology=topology, **kwargs)  # type: ignore[arg-type]


def run(
    view: CapacityView, *podsets: PodSetSpec, profile: str | None = None, **kwargs: object
) -> PlacementResult:
    return place(view, PlacementRequest(podsets=list(podsets), profile=profile, **kwargs))  # type: ignore[arg-type]


def domains(result: PlacementResult, name: str = "workers") -> list[tuple[tuple[str, ...], int]]:
    return [(tuple(d.values), d.count) for d in result.assignments[name].domains]


def racks(result: PlacementResult, name: str = "workers") -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for values, count in domains(result, name):
        key = (values[0], values[1])
        out[key] = out.get(key, 0) + count
    return out


# --------------------------------------------------------------------------- KEP (seeds 000/003)


def kep_view(gpus: Sequence[int] = (1, 1, 1, 1)) -> CapacityView:
    """The KEP's hierarchy table: node-1 and node-3 share the rack name rack-1."""
    table = [
        ("node-1", "block-1", "rack-1"),
        ("node-2", "block-1", "rack-2"),
        ("node-3", "block-2", "rack-1"),
        ("node-4", "block-2", "rack-3"),
    ]
    return CapacityView(
        LEVELS, [node(n, b, r, g) for (n, b, r), g in zip(table, gpus, strict=True)]
    )


def test_kep_racks_with_the_same_name_in_different_blocks_are_different_domains() -> None:
    view = kep_view()
    result = run(view, podset(count=2, required=RACK))
    assert not result.fits
    assert result.reason == (
        "workers: needs 2 pods in one example.com/rack; the best rack fits 1 "
        "(limited by nvidia.com/gpu)"
    )
    assert view.domains(RACK) == [
        ("block-1", "rack-1"),
        ("block-1", "rack-2"),
        ("block-2", "rack-1"),
        ("block-2", "rack-3"),
    ]


def test_kep_require_block_places_in_one_block() -> None:
    result = run(kep_view(), podset(count=2, required=BLOCK))
    assert result.fits
    assert domains(result) == [
        (("block-1", "rack-1", "node-1"), 1),
        (("block-1", "rack-2", "node-2"), 1),
    ]
    assert result.levels_chosen == {"workers": BLOCK}


def test_kep_require_block_that_does_not_fit_keeps_waiting() -> None:
    result = run(kep_view(), podset(count=3, required=BLOCK))
    assert not result.fits
    assert result.assignments == {}
    assert result.reason is not None
    assert "needs 3 pods in one example.com/block; the best block fits 2" in result.reason


def test_kep_prefer_rack_relaxes_across_values() -> None:
    result = run(kep_view(), podset(count=3, preferred=RACK))
    assert result.fits
    assert sum(count for _, count in domains(result)) == 3
    # No block holds 3: spread over as few blocks as possible (two), whole block first.
    assert {values[0] for values, _ in domains(result)} == {"block-1", "block-2"}
    assert result.levels_chosen == {"workers": None}


def test_kep_prefer_rack_that_cannot_fit_anywhere() -> None:
    result = run(kep_view(), podset(count=5, preferred=RACK))
    assert not result.fits
    assert result.reason == "workers: needs 5 pods; the cluster fits 4 (limited by nvidia.com/gpu)"


def test_kep_new_node_makes_admission_possible() -> None:
    view = kep_view()
    assert not run(view, podset(count=2, required=RACK)).fits
    view.upsert_node(node("node-5", "block-2", "rack-1", 1))
    result = run(view, podset(count=2, required=RACK))
    assert result.fits
    assert domains(result) == [
        (("block-2", "rack-1", "node-3"), 1),
        (("block-2", "rack-1", "node-5"), 1),
    ]


# --------------------------------------------------------------------------- KAI (seed 004)

ZONE, KRACK, KNODE = "zone", "rack", "kubernetes.io/hostname"


def kai_view() -> CapacityView:
    """The KAI design's tree: zones A (16 GPUs), B (10), C (6)."""
    tree = {
        ("zone-a", "rack-a1"): [("node-a1", 2), ("node-a2", 2), ("node-a3", 2)],
        ("zone-a", "rack-a2"): [("node-a4", 4)],
        ("zone-a", "rack-a3"): [("node-a5", 2), ("node-a6", 2), ("node-a7", 2)],
        ("zone-b", "rack-b1"): [("node-b1", 4), ("node-b2", 4)],
        ("zone-b", "rack-b2"): [("node-b3", 2)],
        ("zone-c", "rack-c1"): [("node-c1", 2), ("node-c2", 4)],
    }
    nodes = [
        NodeCapacity(
            name=name,
            labels={ZONE: zone, KRACK: rack, KNODE: name},
            allocatable={GPU: gpus},
        )
        for (zone, rack), members in tree.items()
        for name, gpus in members
    ]
    return CapacityView((ZONE, KRACK, KNODE), nodes)


def test_kai_required_zone_prefers_the_zone_needing_fewest_racks() -> None:
    result = run(kai_view(), podset(count=8, required=ZONE))
    assert result.fits
    # Zone A needs two racks for 8 GPUs, zone B one (rack-b1 has 8).
    assert domains(result) == [
        (("zone-b", "rack-b1", "node-b1"), 4),
        (("zone-b", "rack-b1", "node-b2"), 4),
    ]
    assert result.levels_chosen == {"workers": KRACK}


def test_kai_preferred_rack_inside_required_zone_best_fit() -> None:
    result = run(kai_view(), podset(count=10, required=ZONE, preferred=KRACK))
    assert result.fits
    # No rack holds 10. Zones A (16) and B (10) both need two racks: best-fit takes B.
    assert racks(result) == {("zone-b", "rack-b1"): 8, ("zone-b", "rack-b2"): 2}
    assert result.levels_chosen == {"workers": ZONE}


def test_kai_preferred_rack_inside_required_zone_spread() -> None:
    result = run(kai_view(), podset(count=10, required=ZONE, preferred=KRACK), profile="spread")
    assert result.fits
    # Spread takes the roomier zone A: the roomiest rack first (rack-a1, path order breaks
    # the tie with rack-a3), then the rack that holds the other 4 on the fewest nodes.
    assert racks(result) == {("zone-a", "rack-a1"): 6, ("zone-a", "rack-a2"): 4}


def test_kai_required_zone_too_large() -> None:
    result = run(kai_view(), podset(count=20, required=ZONE))
    assert not result.fits
    assert result.reason == (
        "workers: needs 20 pods in one zone; the best zone fits 16 (limited by nvidia.com/gpu)"
    )


def test_kai_unconstrained_uses_fewest_zones() -> None:
    result = run(kai_view(), podset(count=30))
    assert result.fits
    per_zone: dict[str, int] = {}
    for values, count in domains(result):
        per_zone[values[0]] = per_zone.get(values[0], 0) + count
    # 16 + 10 = 26 < 30: three zones are needed. Their racks are pooled and filled largest
    # first (8, 6, 6, 6) and then the tightest that holds the last 4 (rack-a2): five racks.
    assert per_zone == {"zone-a": 16, "zone-b": 8, "zone-c": 6}
    assert len(racks(result)) == 5
    assert result.placed == {"workers": 30}


def test_kai_auto_picks_the_narrowest_level_that_holds_it() -> None:
    for count, level in [(4, KNODE), (6, KRACK), (12, ZONE)]:
        result = run(
            kai_view(),
            podset(count=count, topology=TopologyRequest(required="auto")),
        )
        assert result.fits, count
        assert result.levels_chosen == {"workers": level}, count
    result = run(kai_view(), podset(count=17, topology=TopologyRequest(required="auto")))
    assert not result.fits
    assert result.reason == (
        "workers: needs 17 pods in one domain of any level; the best zone fits 16 "
        "(limited by nvidia.com/gpu)"
    )


def test_kai_preferred_auto_relaxes_instead_of_failing() -> None:
    result = run(kai_view(), podset(count=17, topology=TopologyRequest(preferred="auto")))
    assert result.fits
    assert result.levels_chosen == {"workers": None}


# --------------------------------------------------------------------------- choice and order


def two_racks(gpus_a: int, gpus_b: int) -> CapacityView:
    return CapacityView(
        LEVELS,
        [node(f"a{i}", "b1", "r1", gpus_a) for i in range(2)]
        + [node(f"b{i}", "b1", "r2", gpus_b) for i in range(2)],
    )


def test_best_fit_takes_the_tightest_rack_and_spread_the_roomiest() -> None:
    view = two_racks(8, 4)
    assert set(racks(run(view, podset(count=4, required=RACK)))) == {("b1", "r2")}
    spread = run(view, podset(count=4, required=RACK), profile="spread")
    assert set(racks(spread)) == {("b1", "r1")}


def test_fewest_nodes_comes_before_the_profile() -> None:
    # Both racks hold 6 pods; r1 on one node, r2 only on two: compactness wins over best-fit.
    view = two_racks(8, 4)
    assert set(racks(run(view, podset(count=6, required=RACK)))) == {("b1", "r1")}


def test_ties_are_broken_by_path_in_natural_order() -> None:
    view = CapacityView(LEVELS, [node(f"n{r}", "b1", f"rack-{r}", 4) for r in (10, 2, 1)])
    result = run(view, podset(count=4, required=RACK))
    assert domains(result) == [(("b1", "rack-1", "n1"), 4)]


def test_rank_order_lists_domains_by_path_within_their_parent() -> None:
    nodes = [node(f"n{b}{r}", f"block-{b}", f"rack-{r}", 2) for b in (2, 1) for r in (10, 9, 1)]
    view = CapacityView(LEVELS, nodes)
    result = run(view, podset(count=12))
    assert [values for values, _ in domains(result)] == [
        ("block-1", "rack-1", "n11"),
        ("block-1", "rack-9", "n19"),
        ("block-1", "rack-10", "n110"),
        ("block-2", "rack-1", "n21"),
        ("block-2", "rack-9", "n29"),
        ("block-2", "rack-10", "n210"),
    ]


def test_unconstrained_is_still_compact() -> None:
    view = CapacityView(
        LEVELS,
        [
            node(f"n{b}{r}{h}", f"b{b}", f"r{r}", 8)
            for b in range(2)
            for r in range(2)
            for h in range(2)
        ],
    )
    result = run(view, podset(count=3))
    assert domains(result) == [(("b0", "r0", "n000"), 3)]
    result = run(view, podset(count=20))
    assert racks(result) == {("b0", "r0"): 16, ("b0", "r1"): 4}


def test_preferred_rack_uses_fewest_racks_inside_the_block() -> None:
    nodes = [node(f"x{i}", "b1", "r1", 4) for i in range(3)]  # rack r1: 12
    nodes += [node(f"y{i}", "b1", "r2", 2) for i in range(3)]  # rack r2: 6
    nodes += [node(f"z{i}", "b1", "r3", 1) for i in range(8)]  # rack r3: 8
    view = CapacityView(LEVELS, nodes)
    result = run(view, podset(count=16, preferred=RACK))
    # Largest rack first (12), then the tightest rack that holds the other 4 (r2: 6).
    assert racks(result) == {("b1", "r1"): 12, ("b1", "r2"): 4}
    assert result.levels_chosen == {"workers": BLOCK}


def test_fragmentation_counts_per_node() -> None:
    # 4 free GPUs in the rack, but spread over four nodes: a 2-GPU pod fits on none.
    view = CapacityView(LEVELS, [node(f"n{i}", "b1", "r1", 1) for i in range(4)])
    result = run(view, podset(count=1, gpus=2, required=RACK))
    assert not result.fits
    assert result.reason is not None
    assert "the best rack fits 0" in result.reason


# --------------------------------------------------------------------------- node filters


def test_taints_must_be_tolerated() -> None:
    view = CapacityView(
        LEVELS,
        [
            node("t1", "b1", "r1", taints=(Taint(key="gpu", value="yes", effect="NoSchedule"),)),
            node("p1", "b1", "r1", taints=(Taint(key="x", effect="PreferNoSchedule"),)),
        ],
    )
    result = run(view, podset(count=2, gpus=8))
    assert not result.fits
    tolerant = podset(count=2, gpus=8, tolerations=[Toleration(key="gpu", operator="Exists")])
    assert run(view, tolerant).fits
    wrong_value = podset(count=2, gpus=8, tolerations=[Toleration(key="gpu", value="no")])
    assert not run(view, wrong_value).fits
    everything = podset(count=2, gpus=8, tolerations=[Toleration(operator="Exists")])
    assert run(view, everything).fits


def test_no_node_tolerates_reason_names_a_taint() -> None:
    view = CapacityView(
        LEVELS, [node("t1", "b1", "r1", taints=(Taint(key="gpu", effect="NoExecute"),))]
    )
    result = run(view, podset())
    assert result.reason == (
        "workers: no schedulable node that matches it tolerates its taints "
        "(e.g. t1 has gpu=:NoExecute)"
    )


def test_node_selector_and_request_selector_must_match() -> None:
    view = CapacityView(
        LEVELS,
        [
            node("h200", "b1", "r1", extra={"nvidia.com/gpu.product": "NVIDIA-H200"}),
            node("a100", "b1", "r1", extra={"nvidia.com/gpu.product": "NVIDIA-A100"}),
        ],
    )
    result = run(
        view, podset(count=8, gpus=1), node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"}
    )
    assert result.node_counts == {"workers": {"h200": 8}}
    result = run(view, podset(count=1, node_selector={"nvidia.com/gpu.product": "NVIDIA-B200"}))
    assert result.reason == (
        "workers: no schedulable node has the labels nvidia.com/gpu.product=NVIDIA-B200"
    )
    conflicting = podset(count=1, node_selector={"nvidia.com/gpu.product": "NVIDIA-A100"})
    result = run(view, conflicting, node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"})
    assert result.reason == (
        "workers: its node selector asks for two different values of nvidia.com/gpu.product"
    )


def test_not_ready_cordoned_and_unlabelled_nodes_take_no_part() -> None:
    view = CapacityView(
        LEVELS,
        [
            node("down", "b1", "r1", ready=False),
            node("cordoned", "b1", "r1", unschedulable=True),
            NodeCapacity(name="bare", labels={BLOCK: "b1"}, allocatable={GPU: 8}),
        ],
    )
    result = run(view, podset())
    assert result.reason == (
        "workers: no node can take pods: none is ready, not cordoned and labelled with every "
        "topology level (example.com/block, example.com/rack, kubernetes.io/hostname)"
    )
    view.upsert_node(node("down", "b1", "r1", ready=True))
    assert run(view, podset()).node_counts == {"workers": {"down": 1}}


def test_pods_limit_and_default() -> None:
    view = CapacityView(
        LEVELS,
        [
            NodeCapacity(
                name="small",
                labels={BLOCK: "b", RACK: "r", HOST: "small"},
                allocatable={"cpu": 64_000, "pods": 2},
                used={"pods": 1},
            )
        ],
    )
    result = run(view, podset(count=2, requests={"cpu": 1000}))
    assert result.reason == (
        "workers: needs 2 pods; the cluster fits 1 (limited by the nodes' pod limit)"
    )
    view.upsert_node(
        NodeCapacity(
            name="small",
            labels={BLOCK: "b", RACK: "r", HOST: "small"},
            allocatable={"cpu": 500_000},
        )
    )
    assert view.allocatable("small")["pods"] == 110
    assert not run(view, podset(count=111, requests={"cpu": 1000})).fits
    assert run(view, podset(count=110, requests={"cpu": 1000})).fits


def test_a_resource_no_node_offers() -> None:
    view = two_racks(8, 8)
    result = run(view, podset(requests={"example.com/fpga": 1}))
    assert result.reason == (
        "workers: needs 1 pods; the cluster fits 0 (limited by example.com/fpga: no node offers it)"
    )


def test_overcommitted_node_fits_nothing() -> None:
    view = CapacityView(LEVELS, [node("n", "b", "r", 8, used=10)])
    assert view.free("n")[GPU] == -2
    assert not run(view, podset()).fits


# --------------------------------------------------------------------------- gangs


def test_podsets_consume_capacity_one_after_another() -> None:
    view = two_racks(4, 4)  # two racks of 8 GPUs
    first = podset("a", count=8, required=RACK)
    second = podset("b", count=8, required=RACK)
    result = run(view, first, second)
    assert result.fits
    assert set(racks(result, "a")) != set(racks(result, "b"))
    third = podset("c", count=1)
    result = run(view, first, second, third)
    assert not result.fits
    assert result.assignments == {}
    assert result.reason == (
        "c: needs 1 pods; the cluster fits 0 (limited by nvidia.com/gpu), after placing a, b"
    )


def test_group_places_leader_and_workers_in_one_domain() -> None:
    nodes = [node("small", "b1", "r1", 1, cpu=8_000)]  # best fit for the leader alone
    nodes += [node(f"w{i}", "b1", "r2", 5) for i in range(2)]
    view = CapacityView(LEVELS, nodes)
    leader = podset("leader", count=1, gpus=1, group="g")
    workers = podset("workers", count=8, gpus=1, required=RACK, group="g")
    alone = run(view, podset("leader", count=1, gpus=1))
    assert set(alone.node_counts["leader"]) == {"small"}
    result = run(view, leader, workers)
    assert result.fits
    assert set(racks(result, "leader")) == {("b1", "r2")}
    assert set(racks(result, "workers")) == {("b1", "r2")}


def test_group_tries_the_next_domain_when_members_crowd_each_other_out() -> None:
    # Both racks hold the leader alone and the workers alone; only r2 holds both.
    view = CapacityView(
        LEVELS, [node("a", "b1", "r1", 4), node("b", "b1", "r2", 4), node("c", "b1", "r2", 4)]
    )
    leader = podset("leader", count=1, gpus=4, group="g")
    workers = podset("workers", count=4, gpus=1, required=RACK, group="g")
    result = run(view, leader, workers)
    assert result.fits
    assert set(racks(result, "leader")) == {("b1", "r2")}
    assert set(racks(result, "workers")) == {("b1", "r2")}


def test_group_that_fits_only_apart() -> None:
    view = CapacityView(LEVELS, [node(f"n{r}", "b1", f"r{r}", 4) for r in range(2)])
    leader = podset("leader", count=1, gpus=1, group="g", required=RACK)
    workers = podset("workers", count=4, gpus=1, required=RACK, group="g")
    result = run(view, leader, workers)
    assert not result.fits
    assert result.reason == (
        "group g (leader, workers): no single example.com/rack can hold all of it together"
    )


def test_slices_each_inside_one_rack() -> None:
    nodes = [node(f"a{i}", "b1", "r1", 3) for i in range(2)]  # r1: 6 → one slice of 4
    nodes += [node(f"b{i}", "b1", "r2", 3) for i in range(2)]  # r2: 6 → one slice of 4
    nodes += [node(f"c{i}", "b1", "r3", 2) for i in range(2)]  # r3: 4 → one slice of 4
    view = CapacityView(LEVELS, nodes)
    sliced = TopologyRequest(required=BLOCK, slice_size=4, slice_required=RACK)
    result = run(view, podset(count=12, topology=sliced))
    assert result.fits
    assert racks(result) == {("b1", "r1"): 4, ("b1", "r2"): 4, ("b1", "r3"): 4}
    # 16 pods fit in the block (18 GPUs) but only 3 slices of 4 fit in whole racks.
    result = run(view, podset(count=16, topology=sliced))
    assert not result.fits
    assert result.reason == (
        "workers: needs 4 slices of 4 pods, each in one example.com/rack in one "
        "example.com/block; the best block fits 3 slices "
        "(limited by how free capacity is split across racks)"
    )


def test_slices_rank_order_keeps_each_slice_contiguous() -> None:
    nodes = [node(f"n{r}{h}", "b1", f"r{r}", 2) for r in range(3) for h in range(2)]
    view = CapacityView(LEVELS, nodes)
    result = run(view, podset(count=8, topology=TopologyRequest(slice_size=2, slice_required=RACK)))
    assert result.fits
    running = 0
    for values, count in domains(result):
        assert running // 2 == (running + count - 1) // 2 or count % 2 == 0, values
        running += count


def test_jobset_replicated_jobs_each_in_one_rack() -> None:
    view = CapacityView(LEVELS, [node(f"n{r}", "b1", f"r{r}", 4) for r in range(3)])
    jobs = podset(count=12, required=RACK, pods_per_index_group=4)
    result = run(view, jobs)
    assert result.fits
    assert racks(result) == {("b1", "r0"): 4, ("b1", "r1"): 4, ("b1", "r2"): 4}


def test_min_count_places_as_many_as_fit() -> None:
    view = two_racks(4, 2)
    result = run(view, podset(count=12, min_count=4, required=RACK))
    assert result.fits
    assert result.placed == {"workers": 8}
    result = run(view, podset(count=12, min_count=9, required=RACK))
    assert not result.fits
    assert result.reason is not None
    assert result.reason.startswith("workers: needs at least 9 pods in one example.com/rack")


def test_zero_pods_fit_trivially() -> None:
    result = run(two_racks(1, 1), podset(count=0, required=RACK))
    assert result.fits
    assert result.assignments["workers"].domains == []


def test_place_does_not_change_the_view_and_apply_release_do() -> None:
    view = two_racks(4, 4)
    request = podset(count=8, required=RACK)
    before = {name: view.free(name) for name in view.node_names()}
    result = run(view, request)
    assert {name: view.free(name) for name in view.node_names()} == before
    apply(view, result)
    taken = next(iter(racks(result)))
    assert view.domain_free(RACK, taken).get(GPU, 0) == 0
    assert set(racks(run(view, request))) != {taken}
    assert result.usage() == {
        name: {GPU: count, "pods": count} for name, count in result.node_counts["workers"].items()
    }
    release(view, result)
    assert {name: view.free(name) for name in view.node_names()} == before


# --------------------------------------------------------------------------- invalid requests


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            podset(required="example.com/row"),
            "workers: topology.required: unknown level 'example.com/row' (levels: "
            "example.com/block, example.com/rack, kubernetes.io/hostname, or 'auto')",
        ),
        (
            podset(required=RACK, preferred=BLOCK),
            "workers: topology.preferred: example.com/block is wider than the required level "
            "example.com/rack",
        ),
        (
            podset(
                count=4, topology=TopologyRequest(required=RACK, slice_size=2, slice_required=BLOCK)
            ),
            "workers: topology.slice_required: example.com/block is wider than the podset's "
            "level example.com/rack",
        ),
        (
            podset(count=2, topology=TopologyRequest(slice_size=4, slice_required=RACK)),
            "workers: topology.slice_size: 4 is larger than count 2",
        ),
        (
            podset(count=6, topology=TopologyRequest(slice_size=4, slice_required=RACK)),
            "workers: topology.slice_size: 4 does not divide count 6",
        ),
        (
            podset(count=4, topology=TopologyRequest(slice_size=2)),
            "workers: topology.slice_size: slice_size and slice_required must be given together",
        ),
        (
            podset(count=4, topology=TopologyRequest(slice_size=0, slice_required=RACK)),
            "workers: topology.slice_size: 0 must be positive",
        ),
        (podset(count=-1), "workers: count: -1 is negative"),
        (podset(count=2, min_count=3), "workers: min_count: 3 is not between 0 and count (2)"),
        (podset(requests={"cpu": -1}), "workers: requests.cpu: -1 is negative"),
        (
            podset(topology=TopologyRequest(required=RACK, unconstrained=True)),
            "workers: topology.unconstrained: cannot be combined with a required level",
        ),
    ],
)
def test_invalid_requests_name_the_podset_and_field(spec: PodSetSpec, message: str) -> None:
    with pytest.raises(PlacementError) as caught:
        run(two_racks(8, 8), spec)
    assert str(caught.value) == message
    assert caught.value.podset == "workers"


def test_unknown_profile_and_duplicate_podsets() -> None:
    with pytest.raises(
        PlacementError, match=r"profile: unknown profile 'tight' \(known: best-fit, spread\)"
    ):
        run(two_racks(8, 8), podset(), profile="tight")
    with pytest.raises(PlacementError, match="workers: podset name used twice"):
        run(two_racks(8, 8), podset(), podset())
    assert PROFILES == ("best-fit", "spread")


def test_narrowest_level_need_not_be_the_hostname() -> None:
    nodes = [
        NodeCapacity(name=f"n{i}", labels={BLOCK: "b1", RACK: "r1"}, allocatable={GPU: 3})
        for i in range(3)
    ]
    nodes.append(NodeCapacity(name="m0", labels={BLOCK: "b1", RACK: "r2"}, allocatable={GPU: 8}))
    view = CapacityView((BLOCK, RACK), nodes)
    # Rack r1 has 9 free GPUs but on three nodes: it holds four 2-GPU pods, not more.
    result = run(view, podset(count=4, gpus=2, required=RACK))
    assert result.assignments["workers"].levels == [BLOCK, RACK]
    assert domains(result) == [(("b1", "r2"), 4)]
    result = run(view, podset(count=5, gpus=2, required=RACK), profile="spread")
    assert result.reason == (
        "workers: needs 5 pods in one example.com/rack; the best rack fits 4 "
        "(limited by nvidia.com/gpu)"
    )
    view.set_used("m0", {GPU: 4})
    result = run(view, podset(count=3, gpus=2, required=RACK))
    assert domains(result) == [(("b1", "r1"), 3)]
    assert result.node_counts == {"workers": {"n0": 1, "n1": 1, "n2": 1}}
