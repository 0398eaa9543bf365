"""Property tests of placement on small random clusters (hypothesis).

Every answer is checked against what must hold whatever the algorithm: no node over capacity,
counts adding up, required levels and slices respected, only usable nodes used, domains in
path order, the same answer whatever order nodes were added in. Whether a single podset fits
is compared with an independent brute-force oracle that counts, node by node with plain
dictionaries, how many pods each node can take. The fewest-racks answer on single-level
topologies is compared with the exact optimum of an integer program (HiGHS).
"""

import importlib.util
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.model import PodSetSpec, TopologyRequest
from tidegate.placement import CapacityView, NodeCapacity, PlacementRequest, place
from tidegate.placement.ordering import natural_key

BLOCK, RACK, HOST = "block", "rack", "host"
LEVELS = (BLOCK, RACK, HOST)
GPU = "nvidia.com/gpu"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeCapacity]:
    nodes: list[NodeCapacity] = []
    for b in range(draw(st.integers(1, 3))):
        # Rack names repeat across blocks, as in real clusters.
        for r in range(draw(st.integers(1, 3))):
            for _ in range(draw(st.integers(1, 3))):
                name = f"n{len(nodes)}"
                gpus = draw(st.integers(0, 4))
                pods = draw(st.sampled_from([None, 2, 3]))
                allocatable = {GPU: gpus, "cpu": 4000}
                if pods is not None:
                    allocatable["pods"] = pods
                labels = {BLOCK: f"b{b}", RACK: f"r{r}", HOST: name}
                if draw(st.integers(0, 9)) == 0:
                    del labels[RACK]
                nodes.append(
                    NodeCapacity(
                        name=name,
                        labels=labels,
                        allocatable=allocatable,
                        used={GPU: draw(st.integers(0, gpus)), "cpu": draw(st.integers(0, 4000))},
                        ready=draw(st.integers(0, 9)) > 0,
                    )
                )
    return nodes


@st.composite
def podsets(draw: st.DrawFn, name: str = "p") -> PodSetSpec:
    required = draw(st.sampled_from([None, BLOCK, RACK, HOST, "auto"]))
    narrower = {None: [None, *LEVELS], "auto": [None, *LEVELS], BLOCK: [None, *LEVELS]}
    narrower[RACK] = [None, RACK, HOST]
    narrower[HOST] = [None, HOST]
    preferred = draw(st.sampled_from(narrower[required]))
    count = draw(st.integers(0, 12))
    slice_size: int | None = None
    slice_required: str | None = None
    if count and draw(st.booleans()):
        slice_size = draw(st.sampled_from([d for d in range(1, count + 1) if count % d == 0]))
        allowed = {None: LEVELS, "auto": LEVELS, BLOCK: LEVELS, RACK: (RACK, HOST)}
        allowed[HOST] = (HOST,)
        if preferred is not None and required in (None, "auto"):
            allowed_levels = LEVELS[LEVELS.index(preferred) :]
        else:
            allowed_levels = allowed[required]
        slice_required = draw(st.sampled_from(allowed_levels))
    return PodSetSpec(
        name=name,
        count=count,
        requests={GPU: draw(st.integers(1, 2)), "cpu": draw(st.sampled_from([0, 500, 1500]))},
        topology=TopologyRequest(
            required=required,
            preferred=preferred,
            slice_size=slice_size,
            slice_required=slice_required,
        ),
    )


# --------------------------------------------------------------------------- the oracle


def usable(node: NodeCapacity) -> bool:
    return node.ready and not node.unschedulable and all(level in node.labels for level in LEVELS)


def pods_on(node: NodeCapacity, requests: Mapping[str, int]) -> int:
    """How many pods fit on ``node``, by adding pods one at a time."""
    if not usable(node):
        return 0
    free = {r: node.allocatable.get(r, 0) - node.used.get(r, 0) for r in node.allocatable}
    free.setdefault("pods", 110 - node.used.get("pods", 0))
    per_pod = {r: a for r, a in requests.items() if a > 0}
    per_pod["pods"] = 1
    count = 0
    while all(free.get(r, 0) >= a * (count + 1) for r, a in per_pod.items()):
        count += 1
    return count


def path(node: NodeCapacity, level: int) -> tuple[str, ...]:
    return tuple(node.labels[name] for name in LEVELS[: level + 1])


def oracle_fits(nodes: Sequence[NodeCapacity], spec: PodSetSpec) -> bool:
    """Whether one domain of the required level (or the cluster) holds every pod, by counts."""
    topology = spec.topology
    room = {n.name: pods_on(n, spec.requests) for n in nodes}
    live = [n for n in nodes if usable(n)]
    size = topology.slice_size or 1
    slice_level = LEVELS.index(topology.slice_required) if topology.slice_required else None

    def units(group: Sequence[NodeCapacity]) -> int:
        if slice_level is None:
            return sum(room[n.name] for n in group)
        per_slice_domain: dict[tuple[str, ...], int] = {}
        for n in group:
            key = path(n, slice_level)
            per_slice_domain[key] = per_slice_domain.get(key, 0) + room[n.name]
        return sum(total // size for total in per_slice_domain.values())

    need = spec.count // size
    if topology.required is None:
        return units(live) >= need
    level = 0 if topology.required == "auto" else LEVELS.index(topology.required)
    domains: dict[tuple[str, ...], list[NodeCapacity]] = {}
    for n in live:
        domains.setdefault(path(n, level), []).append(n)
    return need == 0 or any(units(group) >= need for group in domains.values())


# --------------------------------------------------------------------------- invariants


def check_invariants(
    nodes: Sequence[NodeCapacity], specs: Sequence[PodSetSpec], view: CapacityView
) -> None:
    request = PlacementRequest(podsets=list(specs))
    result = place(view, request)
    by_name = {n.name: n for n in nodes}
    if not result.fits:
        assert result.assignments == {}
        assert result.reason
        return
    taken: dict[str, dict[str, int]] = {}
    for spec in specs:
        counts = result.node_counts[spec.name]
        assert sum(counts.values()) == spec.count
        assignment = result.assignments[spec.name]
        assert list(assignment.levels) == list(LEVELS)
        assert sum(d.count for d in assignment.domains) == spec.count
        assert all(d.count > 0 for d in assignment.domains)
        per_leaf: dict[tuple[str, ...], int] = {}
        for name, count in counts.items():
            assert usable(by_name[name]), name
            leaf = path(by_name[name], 2)
            per_leaf[leaf] = per_leaf.get(leaf, 0) + count
            for resource, amount in {**spec.requests, "pods": 1}.items():
                taken.setdefault(name, {})
                taken[name][resource] = taken[name].get(resource, 0) + amount * count
        assert {tuple(d.values): d.count for d in assignment.domains} == per_leaf
        keys = [tuple(natural_key(v) for v in d.values) for d in assignment.domains]
        assert keys == sorted(keys), "domains are listed in path order"
        topology = spec.topology
        if topology.required not in (None, "auto"):
            level = LEVELS.index(topology.required)
            assert len({path(by_name[n], level) for n in counts}) <= 1
        if topology.required == "auto" and counts:
            assert len({path(by_name[n], 0) for n in counts}) == 1
        if topology.slice_required is not None:
            level = LEVELS.index(topology.slice_required)
            per_slice_domain: dict[tuple[str, ...], int] = {}
            for name, count in counts.items():
                key = path(by_name[name], level)
                per_slice_domain[key] = per_slice_domain.get(key, 0) + count
            assert all(c % (topology.slice_size or 1) == 0 for c in per_slice_domain.values())
    for name, amounts in taken.items():
        node = by_name[name]
        for resource, amount in amounts.items():
            limit = node.allocatable.get(resource, 110 if resource == "pods" else 0)
            assert node.used.get(resource, 0) + amount <= limit, (name, resource)


@SETTINGS
@given(nodes=clusters(), spec=podsets())
def test_single_podset_fits_exactly_when_the_oracle_says_so(
    nodes: list[NodeCapacity], spec: PodSetSpec
) -> None:
    view = CapacityView(LEVELS, nodes)
    result = place(view, PlacementRequest(podsets=[spec]))
    assert result.fits == oracle_fits(nodes, spec), result.reason
    check_invariants(nodes, [spec], view)


@SETTINGS
@given(nodes=clusters(), first=podsets("a"), second=podsets("b"), seed=st.integers(0, 2**16))
def test_gangs_never_overbook_and_keep_their_constraints(
    nodes: list[NodeCapacity], first: PodSetSpec, second: PodSetSpec, seed: int
) -> None:
    view = CapacityView(LEVELS, nodes)
    check_invariants(nodes, [first, second], view)
    shuffled = list(nodes)
    random.Random(seed).shuffle(shuffled)
    request = PlacementRequest(podsets=[first, second])
    assert place(CapacityView(LEVELS, shuffled), request).node_counts == (
        place(view, request).node_counts
    ), "the answer does not depend on the order nodes were added in"


@SETTINGS
@given(nodes=clusters(), leader=podsets("leader"), workers=podsets("workers"))
def test_a_group_shares_one_domain_of_its_narrowest_required_level(
    nodes: list[NodeCapacity], leader: PodSetSpec, workers: PodSetSpec
) -> None:
    members = [msgspec.structs.replace(spec, group="g") for spec in (leader, workers)]
    view = CapacityView(LEVELS, nodes)
    check_invariants(nodes, members, view)
    result = place(view, PlacementRequest(podsets=members))
    required = [
        0 if spec.topology.required == "auto" else LEVELS.index(spec.topology.required)
        for spec in members
        if spec.topology.required is not None
    ]
    if not result.fits or not required:
        return
    by_name = {n.name: n for n in nodes}
    used = {name for counts in result.node_counts.values() for name in counts}
    assert len({path(by_name[name], max(required)) for name in used}) <= 1


# --------------------------------------------------------------------------- the optimum


def _optimum() -> ModuleType:
    location = Path(__file__).resolve().parents[3] / "bench" / "placement_optimum.py"
    spec = importlib.util.spec_from_file_location("placement_optimum", location)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OPTIMUM = _optimum()


@settings(max_examples=40, deadline=None)
@given(
    rooms=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=4), min_size=1, max_size=5),
    share=st.floats(0.1, 1.0),
)
def test_fewest_racks_matches_the_integer_program_on_one_level(
    rooms: list[list[int]], share: float
) -> None:
    nodes: list[NodeCapacity] = []
    room: list[int] = []
    rack_of: list[int] = []
    for r, members in enumerate(rooms):
        for gpus in members:
            name = f"n{len(nodes)}"
            nodes.append(
                NodeCapacity(name=name, labels={RACK: f"r{r}", HOST: name}, allocatable={GPU: gpus})
            )
            room.append(gpus)
            rack_of.append(r)
    count = max(1, round(sum(room) * share))
    view = CapacityView((RACK, HOST), nodes)
    spec = PodSetSpec(
        name="p", count=count, requests={GPU: 1}, topology=TopologyRequest(preferred=RACK)
    )
    result = place(view, PlacementRequest(podsets=[spec]))
    best = OPTIMUM.fewest_domains(room, rack_of, count)
    assert result.fits == (best is not None)
    if best is not None:
        assert len({d.values[0] for d in result.assignments["p"].domains}) == best
