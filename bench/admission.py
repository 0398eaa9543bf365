"""Benchmark of the admission service: decisions per second in a burst, and the latency from a
workload's publish to its decision at 100 workloads/s.

    python bench/admission.py [--json] [--out FILE] [--nodes 4096] [--rate 100]
                              [--seconds 10] [--burst 2000] [--seed 7]

Starts a throwaway nats-server and the admission service as its own process, publishes a
topology, one queue and free capacity for ``--nodes`` idle nodes (nothing plays the
topology-cache), then offers ``--rate`` workloads/s for ``--seconds`` and a burst of
``--burst``. Prints ``latency_ms`` and ``burst_decisions_per_s``; measurements, never
assertions. ``BENCH_PYTHON_ARGS="-m cProfile -o FILE"`` runs the service under a profiler.
"""

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tidegate.bus import Publisher, Received, layout
from tidegate.bus.server import NatsServerProcess
from tidegate.model import (
    CapacityNode,
    Envelope,
    Message,
    PodSetSpec,
    QueueConfig,
    TopologyConfig,
    TopologyRequest,
    WorkloadState,
    subjects,
)
from tidegate.testing import connected, following

CLUSTER = "bench"
LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
RACKS_PER_BLOCK = 16
NODES_PER_RACK = 32
GIB = 2**30
NODE = {"cpu": 128_000, "memory": 1024 * GIB, "nvidia.com/gpu": 8, "pods": 110}


@dataclass
class Decisions:
    """First decision per workload key, with the time admission published it."""

    first: dict[str, tuple[float, str]] = field(default_factory=dict)
    total: int = 0

    async def on_decision(self, received: Received) -> None:
        body = received.envelope.body
        key = getattr(body, "workload", None)
        self.total += 1
        if isinstance(key, str) and key not in self.first:
            self.first[key] = (received.envelope.time, type(body).__name__)


def envelope(body: Message, event_id: str) -> Envelope:
    """An envelope as the watcher or the topology-cache would publish it."""
    return Envelope(event_id=event_id, cluster=CLUSTER, source="bench", time=time.time(), body=body)


def nodes(count: int) -> list[CapacityNode]:
    """Free capacity of ``count`` idle nodes."""
    out = []
    for index in range(count):
        block, rest = divmod(index, RACKS_PER_BLOCK * NODES_PER_RACK)
        rack = rest // NODES_PER_RACK
        name = f"node-{index}"
        out.append(
            CapacityNode(
                topology="default",
                node=name,
                domain=[f"b{block}", f"b{block}-r{rack}", name],
                allocatable=dict(NODE),
                free=dict(NODE),
            )
        )
    return out


def rack_mix(rng: random.Random) -> TopologyRequest:
    """A topology request drawn evenly: rack required, rack preferred, or unconstrained."""
    shape = rng.randrange(3)
    if shape == 0:
        return TopologyRequest(required=LEVELS[1])
    if shape == 1:
        return TopologyRequest(preferred=LEVELS[1])
    return TopologyRequest(unconstrained=True)


def synthetic_workload(name: str, rng: random.Random) -> WorkloadState:
    """A gang of 1–64 pods with a mix of GPU use and topology requests."""
    pods = rng.randint(1, 64)
    requests = {"cpu": 1000, "memory": 2 * GIB}
    if rng.random() < 0.25:
        requests["nvidia.com/gpu"] = 1
    podset = PodSetSpec(name="workers", count=pods, requests=requests, topology=rack_mix(rng))
    return WorkloadState(
        namespace="bench",
        name=name,
        uid=f"uid-{name}",
        owner_kind="Job",
        queue="bench",
        service_type="training",
        created_at=time.time(),
        podsets=[podset],
    )


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def wait_for(decisions: Decisions, keys: list[str], within: float) -> None:
    """Wait until every key in ``keys`` has a decision."""
    deadline = time.monotonic() + within
    while any(k not in decisions.first for k in keys):
        if time.monotonic() > deadline:
            missing = sum(k not in decisions.first for k in keys)
            raise TimeoutError(f"{missing} of {len(keys)} workloads got no decision")
        await asyncio.sleep(0.01)


async def run(args: argparse.Namespace) -> dict[str, object]:
    """Run both phases against a fresh nats-server and admission process."""
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as store, NatsServerProcess(store_dir=Path(store)) as nats:
        decisions = Decisions()
        async with (
            connected(nats.url, CLUSTER, wait_for_server_seconds=10) as bus,
            following(
                bus,
                stream=layout.decisions_stream(CLUSTER),
                subjects=[subjects.decision_wildcard(CLUSTER)],
                handler=decisions.on_decision,
                name="bench",
            ) as follower,
        ):
            await follower.replayed.wait()

            setup_started = time.perf_counter()
            async with Publisher(bus) as publisher:
                topology = TopologyConfig(name="default", levels=LEVELS)
                await publisher.submit(
                    subjects.topology(CLUSTER, "default"), envelope(topology, "topology")
                )
                queue = QueueConfig(name="bench")
                await publisher.submit(subjects.queue(CLUSTER, "bench"), envelope(queue, "queue"))
                for report in nodes(args.nodes):
                    subject = subjects.capacity_node(CLUSTER, "default", report.node)
                    await publisher.submit(subject, envelope(report, f"cap-{report.node}"))
            setup_s = time.perf_counter() - setup_started

            env = {
                **os.environ,
                "TIDEGATE_CLUSTER": CLUSTER,
                "TIDEGATE_NATS_URL": nats.url,
                "TIDEGATE_HTTP_PORT": "0",
                "TIDEGATE_LOG_LEVEL": "WARNING",
            }
            command = [
                sys.executable,
                *os.environ.get("BENCH_PYTHON_ARGS", "").split(),
                "-m",
                "tidegate.admission",
            ]
            service = subprocess.Popen([c for c in command if c], env=env)  # noqa: ASYNC220
            try:
                started = time.perf_counter()
                warm = synthetic_workload("warm-up", rng)
                await bus.publish(
                    subjects.workload(CLUSTER, "bench", warm.name), envelope(warm, "warm-up")
                )
                await wait_for(decisions, ["bench/warm-up"], 120)
                startup_s = time.perf_counter() - started

                # Phase 1: offered load, latency per workload.
                published: dict[str, float] = {}
                interval = 1.0 / args.rate
                count = round(args.rate * args.seconds)
                phase_start = time.monotonic()
                for index in range(count):
                    delay = phase_start + index * interval - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    workload = synthetic_workload(f"lat-{index}", rng)
                    subject = subjects.workload(CLUSTER, "bench", workload.name)
                    published[f"bench/{workload.name}"] = time.time()
                    await bus.publish(subject, envelope(workload, workload.name))
                offered = count / (time.monotonic() - phase_start)
                await wait_for(decisions, list(published), 120)
                latencies = [(decisions.first[k][0] - t) * 1e3 for k, t in published.items()]

                # Phase 2: a burst, as fast as the bus takes it.
                burst = [synthetic_workload(f"burst-{i}", rng) for i in range(args.burst)]
                keys = [f"bench/{w.name}" for w in burst]
                burst_start = time.time()
                async with Publisher(bus) as publisher:
                    for workload in burst:
                        subject = subjects.workload(CLUSTER, "bench", workload.name)
                        await publisher.submit(subject, envelope(workload, workload.name))
                await wait_for(decisions, keys, 300)
                burst_end = max(decisions.first[k][0] for k in keys)
                kinds = [decisions.first[k][1] for k in [*published, *keys]]
            finally:
                service.send_signal(signal.SIGTERM)
                try:
                    service.wait(20)
                except subprocess.TimeoutExpired:
                    service.kill()
                    service.wait()

    return {
        "burst_decisions_per_s": round(args.burst / (burst_end - burst_start), 1),
        "latency_ms": {
            "p50": round(percentile(latencies, 0.50), 2),
            "p99": round(percentile(latencies, 0.99), 2),
            "mean": round(statistics.fmean(latencies), 2),
            "max": round(max(latencies), 2),
        },
        "offered_per_s": round(offered, 1),
        "latency_workloads": count,
        "burst_workloads": args.burst,
        "admitted": kinds.count("Admitted"),
        "pending": kinds.count("Pending"),
        "nodes": args.nodes,
        "capacity_publish_s": round(setup_s, 2),
        "service_startup_s": round(startup_s, 2),
        "seed": args.seed,
        "cpus": len(os.sched_getaffinity(0)),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print (or write) its figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--rate", type=float, default=100.0, help="workloads/s in phase 1")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of phase 1")
    parser.add_argument("--burst", type=int, default=2000, help="workloads in phase 2")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    if args.json:
        print(json.dumps(figures))
    else:
        latency = figures["latency_ms"]
        assert isinstance(latency, dict)
        print(f"admission benchmark: {args.nodes} nodes, seed {args.seed}")
        print(
            f"  latency at {figures['offered_per_s']} workloads/s: p50 {latency['p50']} ms, "
            f"p99 {latency['p99']} ms (max {latency['max']} ms)"
        )
        print(
            f"  burst: {figures['burst_decisions_per_s']} decisions/s over a burst of "
            f"{args.burst} workloads on an idle cluster"
        )
        print(f"  admitted {figures['admitted']}, pending {figures['pending']}")
        print(f"  load average {figures['load_avg_1m']} on {figures['cpus']} cpus")
    return 0


if __name__ == "__main__":
    sys.exit(main())
