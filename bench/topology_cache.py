"""Benchmark of the topology-cache's accounting (pure, no NATS): what one change costs.

    python bench/topology_cache.py [--blocks 8] [--racks 32] [--hosts 40] [--pods 40000]
                                   [--gangs 200] [--json] [--out FILE]

On blocks × racks × hosts nodes of 8 GPUs it times, with
:class:`tidegate.placement.accounting.CapacityAccounting`, a build from scratch, churn (changes
per second and records per change) and gangs bound pod by pod at host and at rack level
(events per second). Measurements, never assertions; quick (a few seconds).
"""

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

from tidegate.model import (
    Admitted,
    DomainCount,
    NodeState,
    PodState,
    Released,
    Tombstone,
    TopologyAssignment,
    TopologyConfig,
)
from tidegate.placement.accounting import CapacityAccounting

LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
GPU = "nvidia.com/gpu"


def node(block: int, rack: int, host: int) -> NodeState:
    name = f"b{block}-r{rack}-h{host}"
    return NodeState(
        name=name,
        labels={LEVELS[0]: f"b{block}", LEVELS[1]: f"b{block}-r{rack}", LEVELS[2]: name},
        allocatable={"cpu": 96_000, "memory": 1 << 40, GPU: 8, "pods": 110},
    )


def pod(name: str, node_name: str | None, *, workload: str | None = None) -> PodState:
    return PodState(
        namespace="bench",
        name=name,
        uid=name,
        node_name=node_name,
        phase="Running",
        requests={"cpu": 4000, "memory": 32 << 30, GPU: 1},
        workload=workload,
        podset="workers" if workload else None,
    )


def publish_round(accounting: CapacityAccounting) -> int:
    """What the service does per round: take the changes and build each record."""
    changes = accounting.take_changes()
    for key in changes.keys:
        accounting.record(key)
    return len(changes.keys)


def gang(
    accounting: CapacityAccounting,
    nodes: list[NodeState],
    index: int,
    *,
    rack_level: bool,
    rng: random.Random,
) -> tuple[Admitted, list[str]]:
    """An admitted 16-pod gang on one rack, and the nodes its pods will bind to."""
    start = rng.randrange(0, len(nodes) - 16)
    chosen = nodes[start : start + 16]
    rack = chosen[0].labels[LEVELS[1]]
    chosen = [n for n in chosen if n.labels[LEVELS[1]] == rack]
    counts: dict[tuple[str, ...], int] = {}
    targets: list[str] = []
    for i in range(16):
        target = chosen[i % len(chosen)]
        targets.append(target.name)
        values = tuple(target.labels[level] for level in LEVELS)
        key = values[:2] if rack_level else values
        counts[key] = counts.get(key, 0) + 1
    decision = Admitted(
        workload=f"bench/gang-{index}",
        uid=f"gang-{index}",
        queue="q",
        sequence=index,
        epoch=1,
        assignments={
            "workers": TopologyAssignment(
                levels=LEVELS[:2] if rack_level else LEVELS,
                domains=[DomainCount(values=list(v), count=c) for v, c in counts.items()],
            )
        },
        requests={"workers": {"cpu": 4000, "memory": 32 << 30, GPU: 1}},
    )
    return decision, targets


def gangs(args: argparse.Namespace, nodes: list[NodeState], *, rack_level: bool) -> float:
    """Events per second for admit → bind each pod → release, with ``--gangs`` pending."""
    rng = random.Random(2)
    accounting = CapacityAccounting()
    accounting.apply(TopologyConfig(name="default", levels=LEVELS))
    for item in nodes:
        accounting.apply(item)
    publish_round(accounting)
    pending = []
    for index in range(1, args.gangs + 1):
        decision, targets = gang(accounting, nodes, index, rack_level=rack_level, rng=rng)
        accounting.apply(decision)
        pending.append((decision, targets))
    publish_round(accounting)
    events = 0
    started = time.perf_counter()
    sequence = args.gangs
    for decision, targets in pending:
        for i, target in enumerate(targets):
            accounting.apply(pod(f"{decision.workload}-{i}", target, workload=decision.workload))
            publish_round(accounting)
            events += 1
        sequence += 1
        accounting.apply(
            Released(
                workload=decision.workload,
                uid=decision.uid,
                queue="q",
                reason="Completed",
                sequence=sequence,
            )
        )
        publish_round(accounting)
        events += 1
    return events / (time.perf_counter() - started)


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    nodes = [
        node(b, r, h)
        for b in range(args.blocks)
        for r in range(args.racks)
        for h in range(args.hosts)
    ]
    rng = random.Random(1)

    started = time.perf_counter()
    accounting = CapacityAccounting()
    accounting.apply(TopologyConfig(name="default", levels=LEVELS))
    for item in nodes:
        accounting.apply(item)
    placed: list[str] = []
    for i in range(args.pods):
        name = f"p{i}"
        accounting.apply(pod(name, rng.choice(nodes).name))
        placed.append(name)
    records = publish_round(accounting)
    build_seconds = time.perf_counter() - started

    changes = 0
    keys = 0
    started = time.perf_counter()
    deadline = started + args.seconds
    serial = args.pods
    while time.perf_counter() < deadline:
        for _ in range(100):
            victim = placed.pop(rng.randrange(len(placed)))
            accounting.apply(Tombstone(object_kind="pod", name=victim, namespace="bench"))
            keys += publish_round(accounting)
            name = f"p{serial}"
            serial += 1
            accounting.apply(pod(name, rng.choice(nodes).name))
            placed.append(name)
            keys += publish_round(accounting)
            changes += 2
    churn_seconds = time.perf_counter() - started

    return {
        "nodes": len(nodes),
        "pods": args.pods,
        "levels": len(LEVELS),
        "build_seconds": round(build_seconds, 3),
        "build_records": records,
        "churn_changes_per_s": round(changes / churn_seconds),
        "churn_records_per_change": round(keys / changes, 2),
        "host_gang_events_per_s": round(gangs(args, nodes, rack_level=False)),
        "rack_gang_events_per_s": round(gangs(args, nodes, rack_level=True)),
        "pending_gangs": args.gangs,
        "python": platform.python_version(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--racks", type=int, default=32, help="racks per block")
    parser.add_argument("--hosts", type=int, default=40, help="hosts per rack")
    parser.add_argument("--pods", type=int, default=40_000)
    parser.add_argument("--gangs", type=int, default=200, help="gangs pending at once")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of the churn run")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args)
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
