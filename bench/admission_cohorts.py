"""Admission cycles in the state of Kueue's scheduler scenario, in this process.

    python bench/admission_cohorts.py [--scenario tas|baseline | --config generator.yaml]
                                      [--scale 0.3] [--json] [--out FILE]

The pure admission policy (``tidegate.policy.admission.Admission``), no bus and no service, on
the queues and workloads of one of Kueue's generator files (``bench/kueue_scenario.py`` reads the
same files): each ClusterQueue a Queue in its cohort with its nominal quota, borrowing limit and
preemption policies; the topology's nodes; ``--scale`` of each class's workloads. Three cycles
are timed, as the scenario's load makes them: every small workload arrives at once (``arrival``:
the cohorts fill up), then every medium and large one (``reclaim``: the higher priorities ask to
reclaim from the small ones), then one more with nothing changed (``idle``). Figures: each
cycle's seconds and decisions, and seconds per waiting workload. Measurements, never assertions.
"""

import argparse
import os
import sys
import time
from pathlib import Path

from admission_backlog import report
from kueue_scenario import (
    DATA,
    SCENARIOS,
    PlannedJob,
    Scenario,
    load_scenario,
    nodes_document,
    plan,
)

from tidegate.model import (
    CapacityNode,
    CohortConfig,
    PodSetSpec,
    QueueConfig,
    QueuePreemption,
    TopologyConfig,
    TopologyRequest,
    WorkloadState,
)
from tidegate.policy.admission import Admission


def topology_request(job: PlannedJob) -> TopologyRequest:
    """The class's TAS request, as the watcher reads Kueue's annotations."""
    klass = job.klass
    if klass.tas_constraint == "required":
        return TopologyRequest(required=klass.tas_level)
    if klass.tas_constraint == "preferred":
        return TopologyRequest(preferred=klass.tas_level)
    if klass.tas_constraint == "balanced":
        return TopologyRequest(slice_required=klass.tas_level, slice_size=klass.slice_size)
    return TopologyRequest()


def workload(job: PlannedJob, index: int) -> WorkloadState:
    """The scenario's Job as the watcher publishes it (a training Job of one podset)."""
    return WorkloadState(
        namespace="bench",
        name=job.name,
        uid=f"uid-{index}",
        owner_kind="Job",
        queue=job.queue,
        service_type="training",
        priority=job.klass.priority,
        created_at=float(index),
        podsets=[
            PodSetSpec(
                name="main",
                count=job.klass.pods,
                requests={"cpu": job.klass.request_m},
                topology=topology_request(job),
            )
        ],
    )


def admission_for(scenario: Scenario, scale: float) -> tuple[Admission, list[PlannedJob]]:
    """An admission policy with the scenario's nodes and queues, and its Jobs."""
    admission = Admission()
    document, topology = nodes_document(scenario, baseline_nodes=640)
    levels: list[str] = document["levels"]  # type: ignore[assignment]
    name = topology or "default"
    admission.capacity.set_topology(TopologyConfig(name=name, levels=levels))
    cpu_m = int(float(document["defaults"]["allocatable"]["cpu"]) * 1000)  # type: ignore[index]
    for node in document["nodes"]:  # type: ignore[attr-defined]
        labels = node.get("labels", {})
        path = [labels.get(level, node["name"]) for level in levels[:-1]] + [node["name"]]
        admission.capacity.update(
            CapacityNode(
                topology=name,
                node=node["name"],
                domain=path,
                allocatable={"cpu": cpu_m},
                free={"cpu": cpu_m},
            )
        )
    plan_ = plan(scenario, scale=scale)
    for cohort in sorted({q.cohort for q in plan_.queues}):
        admission.set_cohort(CohortConfig(name=cohort))
    for queue in plan_.queues:
        limit = queue.borrowing_limit_m
        admission.set_queue(
            QueueConfig(
                name=queue.name,
                parent=queue.cohort,
                topology=name,
                nominal={"cpu": queue.nominal_m},
                borrowing_limit=None if limit is None else {"cpu": limit},
                quota=None if limit is None else {"cpu": queue.nominal_m + limit},
                preemption=QueuePreemption(
                    reclaim_within_cohort=queue.reclaim_within_cohort,  # type: ignore[arg-type]
                    within_cluster_queue=queue.within_cluster_queue,  # type: ignore[arg-type]
                ),
            )
        )
    return admission, list(plan_.jobs)


def timed_cycle(admission: Admission, now: float) -> tuple[float, int]:
    """One cycle's seconds and decisions."""
    started = time.perf_counter()
    decisions = admission.cycle(now=now)
    return time.perf_counter() - started, len(decisions)


def run(args: argparse.Namespace) -> dict[str, object]:
    """Build the state, time the three cycles; return the figures."""
    scenario = load_scenario(args.config or DATA / args.scenario / "generator.yaml")
    load = os.getloadavg()[0]
    admission, jobs = admission_for(scenario, args.scale)
    small = [j for j in jobs if j.klass.name.startswith("small")]
    rest = [j for j in jobs if not j.klass.name.startswith("small")]
    for index, job in enumerate(small):
        admission.set_workload(workload(job, index))
    arrival, arrival_decisions = timed_cycle(admission, 1.0)
    for index, job in enumerate(rest, start=len(small)):
        admission.set_workload(workload(job, index))
    reclaim, reclaim_decisions = timed_cycle(admission, 2.0)
    waiting = len(admission.waiting())
    idle, idle_decisions = timed_cycle(admission, 3.0)
    return {
        "scenario": args.scenario or str(args.config),
        "scale": args.scale,
        "workloads": len(jobs),
        "queues": len(admission.queues()),
        "arrival_cycle_s": round(arrival, 3),
        "arrival_decisions": arrival_decisions,
        "reclaim_cycle_s": round(reclaim, 3),
        "reclaim_decisions": reclaim_decisions,
        "waiting_after": waiting,
        "idle_cycle_s": round(idle, 3),
        "idle_decisions": idle_decisions,
        "idle_us_per_waiting_workload": round(idle / max(1, waiting) * 1e6, 1),
        "load_average": round(load, 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--scenario", choices=SCENARIOS, help="Kueue's own generator file")
    which.add_argument("--config", type=Path, help="a generator file in Kueue's format")
    parser.add_argument("--scale", type=float, default=0.3, help="fraction of workload counts")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    if args.config is None and args.scenario is None:
        args.scenario = "tas"
    report(run(args), as_json=args.json, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
