"""Benchmark of the placement engine: gang placement time, one node's update, and preferred
placements against the optimum an integer program finds.

    python bench/placement.py --nodes 16384 [--json] [--out FILE] [--repeat 50] [--seed 7]

On a seeded synthetic cluster (blocks of 32 racks of 32 nodes of 8 GPUs, mostly used) it times
``place`` for a block-required gang and a rack-required gang (p50 and p99 over ``--repeat``),
the cost of one node update, and, on small instances, the racks preferred placements use
against the HiGHS optimum (placement_optimum.py). Measurements, never assertions.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tidegate.model import PodSetSpec, TopologyRequest
from tidegate.placement import CapacityView, NodeCapacity, PlacementRequest, place

sys.path.insert(0, str(Path(__file__).resolve().parent))
from placement_optimum import fewest_domains

BLOCK = "example.com/block"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)
RACKS_PER_BLOCK = 32
NODES_PER_RACK = 32
GIB = 2**30
NODE_ALLOCATABLE = {"cpu": 96_000, "memory": 1024 * GIB, "nvidia.com/gpu": 8, "pods": 110}


def synthetic_nodes(count: int, seed: int) -> list[NodeCapacity]:
    """The benchmark's cluster: 60% full, 10% half used, 30% idle, at random (seeded)."""
    rng = random.Random(seed)
    states = ["full"] * round(count * 0.6) + ["half"] * round(count * 0.1)
    states += ["idle"] * (count - len(states))
    rng.shuffle(states)
    nodes = []
    for index in range(count):
        block, rest = divmod(index, RACKS_PER_BLOCK * NODES_PER_RACK)
        rack = rest // NODES_PER_RACK
        name = f"node-{index}"
        if states[index] == "full":
            used = {"cpu": 96_000, "memory": 1024 * GIB, "nvidia.com/gpu": 8, "pods": 8}
        elif states[index] == "half":
            used = {"cpu": 48_000, "memory": 512 * GIB, "nvidia.com/gpu": 4, "pods": 4}
        else:
            used = {"cpu": 1_000, "memory": 2 * GIB, "pods": 2}  # DaemonSets
        nodes.append(
            NodeCapacity(
                name=name,
                labels={BLOCK: f"block-{block}", RACK: f"rack-{rack}", HOST: name},
                allocatable=dict(NODE_ALLOCATABLE),
                used=used,
            )
        )
    return nodes


BLOCK_GANG = PlacementRequest(
    podsets=[
        PodSetSpec(
            name="trainers",
            count=256,
            requests={"cpu": 64_000, "memory": 512 * GIB, "nvidia.com/gpu": 8},
            topology=TopologyRequest(required=BLOCK, preferred=RACK),
        )
    ]
)
RACK_GANG = PlacementRequest(
    podsets=[
        PodSetSpec(
            name="workers",
            count=64,
            requests={"cpu": 4_000, "memory": 32 * GIB, "nvidia.com/gpu": 1},
            topology=TopologyRequest(required=RACK),
        )
    ]
)


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50 / p99 / mean / max of samples in milliseconds."""
    ordered = sorted(samples)
    p99_index = min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[p99_index], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "max_ms": round(ordered[-1], 3),
    }


def time_calls(call: Callable[[], object], repeat: int) -> list[float]:
    """Wall time of ``repeat`` calls, in milliseconds."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e3)
    return samples


def node_update_us(view: CapacityView, seed: int, updates: int = 20_000) -> dict[str, float]:
    """Mean cost of one node's capacity update (set_used, reserve) in microseconds."""
    rng = random.Random(seed)
    names = view.node_names()
    picks = [rng.choice(names) for _ in range(updates)]
    usages = [
        {"cpu": rng.randrange(0, 96_000), "nvidia.com/gpu": rng.randrange(0, 9), "pods": 3}
        for _ in range(updates)
    ]
    started = time.perf_counter()
    for name, used in zip(picks, usages, strict=True):
        view.set_used(name, used)
    set_used = (time.perf_counter() - started) / updates * 1e6
    amount = {"nvidia.com/gpu": 1, "pods": 1}
    started = time.perf_counter()
    for name in picks:
        view.reserve(name, amount)
    reserve = (time.perf_counter() - started) / updates * 1e6
    for name in picks:
        view.unreserve(name, amount)
    return {"set_used_us": round(set_used, 2), "reserve_us": round(reserve, 2)}


def optimum_ratio(instances: int, seed: int) -> dict[str, float | int]:
    """Racks used by preferred-rack placements ÷ the integer program's fewest racks.

    Random small clusters (2-3 blocks × 2-4 racks × 1-4 nodes, 0-8 free GPUs per node) and a
    podset of 1-GPU pods preferred in one rack, sized so it rarely fits in one. Compared with
    two optima: fewest racks anywhere ("global"), and fewest blocks first, then fewest racks
    ("lexicographic": placement's own order of priorities).
    """
    rng = random.Random(seed)
    global_ratios: list[float] = []
    lexicographic_ratios: list[float] = []
    for _ in range(instances):
        nodes: list[NodeCapacity] = []
        room: list[int] = []
        rack_of: list[int] = []
        block_of_rack: dict[int, int] = {}
        rack_ids: dict[tuple[str, str], int] = {}
        for b in range(rng.randint(2, 3)):
            for r in range(rng.randint(2, 4)):
                rack_id = rack_ids.setdefault((f"b{b}", f"r{r}"), len(rack_ids))
                block_of_rack[rack_id] = b
                for h in range(rng.randint(1, 4)):
                    free = rng.randint(0, 8)
                    name = f"b{b}-r{r}-n{h}"
                    nodes.append(
                        NodeCapacity(
                            name=name,
                            labels={BLOCK: f"b{b}", RACK: f"r{r}", HOST: name},
                            allocatable={"nvidia.com/gpu": 8},
                            used={"nvidia.com/gpu": 8 - free},
                        )
                    )
                    room.append(free)
                    rack_of.append(rack_id)
        total = sum(room)
        if total < 2:
            continue
        count = rng.randint(max(1, total // 3), total)
        view = CapacityView(LEVELS, nodes)
        request = PlacementRequest(
            podsets=[
                PodSetSpec(
                    name="p",
                    count=count,
                    requests={"nvidia.com/gpu": 1},
                    topology=TopologyRequest(preferred=RACK),
                )
            ]
        )
        result = place(view, request)
        if not result.fits:
            continue
        racks_used = {tuple(d.values[:2]) for d in result.assignments["p"].domains}
        best_global = fewest_domains(room, rack_of, count)
        best_lexicographic = fewest_domains(room, rack_of, count, block_of_rack)
        if best_global and best_lexicographic:
            global_ratios.append(len(racks_used) / best_global)
            lexicographic_ratios.append(len(racks_used) / best_lexicographic)
    return {
        "instances": len(global_ratios),
        "mean_vs_lexicographic": round(statistics.fmean(lexicographic_ratios), 4),
        "max_vs_lexicographic": round(max(lexicographic_ratios), 4),
        "optimal_share_vs_lexicographic": round(
            sum(r == 1.0 for r in lexicographic_ratios) / len(lexicographic_ratios), 4
        ),
        "mean_vs_global": round(statistics.fmean(global_ratios), 4),
        "max_vs_global": round(max(global_ratios), 4),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print (or write) its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=16_384)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ilp-instances", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    repeat = max(50, args.repeat)

    started = time.perf_counter()
    nodes = synthetic_nodes(args.nodes, args.seed)
    generated = time.perf_counter()
    view = CapacityView(LEVELS, nodes)
    built = time.perf_counter()
    view.structure()
    laid_out = time.perf_counter()

    block_result = place(view, BLOCK_GANG)
    rack_result = place(view, RACK_GANG)
    block = percentiles(time_calls(lambda: place(view, BLOCK_GANG), repeat))
    rack = percentiles(time_calls(lambda: place(view, RACK_GANG), repeat))
    copy_ms = percentiles(time_calls(view.copy, 10))["p50_ms"]
    updates = node_update_us(view, args.seed)
    ratio = optimum_ratio(args.ilp_instances, args.seed)

    figures = {
        "nodes": args.nodes,
        "block_gang": block,
        "rack_gang": rack,
        "node_update_us": updates["set_used_us"],
        "reserve_us": updates["reserve_us"],
        "view_build_s": round(built - generated, 3),
        "layout_build_ms": round((laid_out - built) * 1e3, 3),
        "view_copy_ms": copy_ms,
        "block_gang_fits": block_result.fits,
        "block_gang_racks": len(
            {tuple(d.values[:2]) for d in block_result.assignments["trainers"].domains}
        )
        if block_result.fits
        else None,
        "rack_gang_fits": rack_result.fits,
        "optimum_ratio": ratio,
        "repeat": repeat,
        "seed": args.seed,
        "cpus": len(os.sched_getaffinity(0)),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "generate_s": round(generated - started, 3),
    }
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"placement benchmark: {args.nodes} nodes, {repeat} repetitions, seed {args.seed}")
        print(
            f"  block gang (256 × 8 GPU, required block, preferred rack): "
            f"p50 {block['p50_ms']} ms, p99 {block['p99_ms']} ms "
            f"(fits: {block_result.fits}, racks used: {figures['block_gang_racks']})"
        )
        print(
            f"  rack gang (64 × 1 GPU, required rack): "
            f"p50 {rack['p50_ms']} ms, p99 {rack['p99_ms']} ms (fits: {rack_result.fits})"
        )
        print(
            f"  node update: set_used {updates['set_used_us']} µs, "
            f"reserve {updates['reserve_us']} µs"
        )
        print(
            f"  view build {figures['view_build_s']} s, layout {figures['layout_build_ms']} ms, "
            f"copy {copy_ms} ms"
        )
        print(
            f"  racks used vs optimum over {ratio['instances']} instances: "
            f"lexicographic mean {ratio['mean_vs_lexicographic']} "
            f"max {ratio['max_vs_lexicographic']}; "
            f"global mean {ratio['mean_vs_global']} max {ratio['max_vs_global']}"
        )
        print(f"  load average {figures['load_avg_1m']} on {figures['cpus']} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
