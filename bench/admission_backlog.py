"""Benchmark of one admission cycle with a long queue waiting on a full cluster whose capacity
keeps changing.

    python bench/admission_backlog.py [--json] [--out FILE] [--nodes 1024] [--waiting 1000]
                                      [--cycles 20] [--seed 1]

The admission policy alone, in this process (no bus, no service): gangs drawn as
``bench/e2e.py`` draws its Jobs fill the cluster, ``--waiting`` more are queued, and before each
of ``--cycles`` timed cycles one GPU is freed so every waiting workload is tried again. Prints
``first_cycle_ms``, ``cycle_ms``, ``per_waiting_workload_us`` and ``distinct_shapes_waiting``;
measurements, never assertions.
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import msgspec
from admission import LEVELS, nodes, rack_mix
from e2e import GPU_CHOICES, draw_pods

from tidegate.model import (
    Admitted,
    PodSetSpec,
    QueueConfig,
    TopologyConfig,
    WorkloadState,
)
from tidegate.policy.admission import Admission


def gang(index: int, rng: random.Random) -> WorkloadState:
    """A training gang of the e2e benchmark's heavy-tail mix."""
    pods = draw_pods(rng, "heavy-tail")
    gpus = rng.choice(GPU_CHOICES)
    podset = PodSetSpec(
        name="main",
        count=pods,
        requests={"cpu": 1000, "nvidia.com/gpu": gpus},
        topology=rack_mix(rng),
    )
    return WorkloadState(
        namespace="bench",
        name=f"job-{index}",
        uid=f"uid-{index}",
        owner_kind="Job",
        queue="bench",
        service_type="training",
        created_at=float(index),
        podsets=[podset],
    )


def run(args: argparse.Namespace) -> dict[str, object]:
    """Fill the cluster, queue the backlog, time the cycles; return the figures."""
    load = os.getloadavg()[0]
    admission = Admission()
    admission.capacity.set_topology(TopologyConfig(name="default", levels=LEVELS))
    admission.set_queue(QueueConfig(name="bench"))
    reports = nodes(args.nodes)
    for report in reports:
        admission.capacity.update(report)
    rng = random.Random(args.seed)
    index = 0
    while True:
        index += 1
        admission.set_workload(gang(index, rng))
        decisions = admission.cycle(now=0.0)
        if not any(isinstance(d.body, Admitted) for d in decisions):
            break
    admitted = len(admission.admitted())
    backlog = [gang(index + n + 1, rng) for n in range(args.waiting)]
    for workload in backlog:
        admission.set_workload(workload)
    started = time.perf_counter()
    admission.cycle(now=0.0)
    first = time.perf_counter() - started
    waiting = len(admission.waiting())

    spent = 0.0
    for cycle in range(args.cycles):
        report = reports[cycle % len(reports)]
        busy = msgspec.structs.replace(report, free={**report.free, "nvidia.com/gpu": 0})
        admission.capacity.update(busy)
        admission.capacity.update(
            msgspec.structs.replace(busy, free={**report.free, "nvidia.com/gpu": 1})
        )
        started = time.perf_counter()
        admission.cycle(now=0.0)
        spent += time.perf_counter() - started
    per_cycle = spent / args.cycles
    shapes = {msgspec.json.encode(w.podsets) for w in backlog}
    return {
        "nodes": args.nodes,
        "admitted_before_backlog": admitted,
        "waiting": waiting,
        "distinct_shapes_waiting": len(shapes),
        "first_cycle_ms": round(first * 1e3, 1),
        "cycle_ms": round(per_cycle * 1e3, 1),
        "per_waiting_workload_us": round(per_cycle / max(1, waiting) * 1e6, 1),
        "cycles": args.cycles,
        "load_average": round(load, 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--waiting", type=int, default=1000, help="workloads queued when full")
    parser.add_argument("--cycles", type=int, default=20, help="timed cycles")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    report(run(args), as_json=args.json, out=args.out)
    return 0


def report(figures: dict[str, object], *, as_json: bool, out: Path | None) -> None:
    """Print ``figures`` (one JSON object, or a line per figure) and write them to ``out``."""
    if as_json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name:>30}: {value}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
