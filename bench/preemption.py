"""Benchmark of the victim search on a full cluster.

    python bench/preemption.py [--json] [--out FILE] [--seed 8] [--repeat 25]

Times :func:`tidegate.policy.victims.select_victims`, the call the preemption service and
``tidegate preempt`` make, for a 32-pod gang that requires one rack, on 2,048 eight-GPU nodes
fully used by 700 training gangs of mixed priority (seeded). Prints ``victim_search_ms`` (p50,
p99) and the victims; writes bench/results/preemption.json unless ``--out`` says otherwise.
Measurements, never assertions.
"""

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from tidegate.model import (
    NodeName,
    PodSetSpec,
    QueueConfig,
    TopologyRequest,
    WorkloadKey,
    WorkloadState,
)
from tidegate.placement import CapacityView, NodeCapacity
from tidegate.policy.victims import RunningGang, RunningPod, VictimChoice, select_victims

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
CARD = "NVIDIA-H200"
GPUS_PER_NODE = 8
NODE_ALLOCATABLE = {"cpu": 128_000, "memory": 1024 * 2**30, "nvidia.com/gpu": 8, "pods": 110}
HALF_NODE_POD = {"cpu": 48_000, "memory": 384 * 2**30, "nvidia.com/gpu": 4}
PRIORITIES = (20_000, 40_000, 60_000)


def build_cluster(
    *, nodes: int, rack_size: int, racks_per_block: int, gangs: int, seed: int
) -> tuple[CapacityView, list[RunningGang], dict[str, QueueConfig]]:
    """A cluster whose every GPU is held by one of ``gangs`` training gangs.

    Gangs take consecutive half nodes (4 GPUs each), so most sit inside one rack and some
    straddle two, like a real scheduler's packing; sizes vary from half a node to five nodes
    around the average that fills the cluster.
    """
    rng = random.Random(seed)
    names = [f"node-{i:05d}" for i in range(nodes)]
    halves = nodes * 2
    # Gang sizes between 1 and 5 nodes (2..10 half nodes), adjusted to fill every half exactly.
    sizes = [rng.randint(2, 10) for _ in range(gangs)]
    while sum(sizes) != halves:
        g = rng.randrange(gangs)
        if sum(sizes) > halves and sizes[g] > 1:
            sizes[g] -= 1
        elif sum(sizes) < halves:
            sizes[g] += 1
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    running: list[RunningGang] = []
    used: dict[str, dict[str, int]] = {name: {} for name in names}
    for g in range(gangs):
        pods = []
        for half in range(bounds[g], bounds[g + 1]):
            node = names[half // 2]
            pods.append(RunningPod(node=NodeName(node), requests=dict(HALF_NODE_POD)))
            for resource, amount in {**HALF_NODE_POD, "pods": 1}.items():
                used[node][resource] = used[node].get(resource, 0) + amount
        queue = "research" if rng.random() < 0.05 else rng.choice(["offline-a", "offline-b"])
        running.append(
            RunningGang(
                key=WorkloadKey(f"train/job-{g:04d}"),
                queue=queue,
                service_type="training",
                priority=rng.choices(PRIORITIES, weights=(5, 3, 2))[0],
                preemptable=rng.random() < 0.9,
                on_preemption="abort" if rng.random() < 0.2 else "restart",
                pods=tuple(pods),
                cards={CARD: GPUS_PER_NODE // 2 * len(pods)},
                running_seconds=rng.randrange(60, 7 * 24 * 3600),
            )
        )
    view = CapacityView(
        LEVELS,
        (
            NodeCapacity(
                name=name,
                labels={
                    LEVELS[0]: f"block-{i // (rack_size * racks_per_block)}",
                    LEVELS[1]: f"rack-{i // rack_size}",
                    LEVELS[2]: name,
                    "nvidia.com/gpu.product": CARD,
                },
                allocatable=dict(NODE_ALLOCATABLE),
                used=used[name],
            )
            for i, name in enumerate(names)
        ),
    )
    queues = {
        "online": QueueConfig(
            name="online", priority=80_000, reclaimable=False, card_quota={CARD: 1024}
        ),
        "offline-a": QueueConfig(name="offline-a", priority=20_000, reclaimable=True),
        "offline-b": QueueConfig(name="offline-b", priority=20_000, reclaimable=True),
        "research": QueueConfig(name="research", priority=20_000, reclaimable=False),
    }
    return view, running, queues


def incoming_gang(pods: int) -> WorkloadState:
    """The inference gang: ``pods`` pods of 4 GPUs that must share one rack."""
    return WorkloadState(
        namespace="serving",
        name="llm",
        uid="llm-uid",
        owner_kind="Deployment",
        queue="online",
        priority=80_000,
        service_type="inference",
        podsets=[
            PodSetSpec(
                name="llm",
                count=pods,
                requests=dict(HALF_NODE_POD),
                topology=TopologyRequest(required=LEVELS[1]),
                card_name=CARD,
            )
        ],
    )


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a summary or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2048)
    parser.add_argument("--rack-size", type=int, default=32)
    parser.add_argument("--racks-per-block", type=int, default=16)
    parser.add_argument("--gangs", type=int, default=700)
    parser.add_argument("--pods", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "preemption.json"
    )
    args = parser.parse_args(argv)

    view, running, queues = build_cluster(
        nodes=args.nodes,
        rack_size=args.rack_size,
        racks_per_block=args.racks_per_block,
        gangs=args.gangs,
        seed=args.seed,
    )
    preemptor = incoming_gang(args.pods)
    samples: list[float] = []
    choice: VictimChoice | None = None
    for _ in range(args.repeat + 1):
        started = time.perf_counter()
        choice = select_victims(preemptor, view=view, running=running, queues=queues)
        samples.append((time.perf_counter() - started) * 1000)
    samples = samples[1:]  # the first run warms caches (domain layout, selector masks)
    assert choice is not None
    ms = {
        "p50": round(statistics.median(samples), 2),
        "p99": round(percentile(samples, 99), 2),
        "min": round(min(samples), 2),
        "max": round(max(samples), 2),
    }
    figures = {
        "victim_search_ms": ms,
        "victims": len(choice.victims),
        "victim_keys": list(choice.victims),
        "admitted": choice.admitted,
        "top_priority": choice.top_priority,
        "gpu_seconds_lost": choice.gpu_seconds,
        "gpus_evicted": choice.gpus,
        "exact": choice.exact,
        "reason": choice.reason,
        "setup": {
            "nodes": args.nodes,
            "rack_size": args.rack_size,
            "gangs": args.gangs,
            "pods": args.pods,
            "repeat": args.repeat,
            "seed": args.seed,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"victim search on {args.nodes} nodes, {args.gangs} gangs, {args.pods}-pod rack gang: "
            f"p50 {ms['p50']} ms, p99 {ms['p99']} ms over {args.repeat} runs"
        )
        print(
            f"victims: {len(choice.victims)} (top priority {choice.top_priority}, "
            f"{choice.gpus} GPUs, {choice.gpu_seconds} GPU-s lost, exact={choice.exact})"
        )
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
