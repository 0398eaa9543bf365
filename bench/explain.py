"""Benchmark of ``tidegate explain`` and ``tidegate queues`` on a large cluster's bus.

    python bench/explain.py [--json] [--out FILE] [--nodes 16384] [--workloads 10000]
                            [--namespaces 100] [--pods 4] [--repeat 3]

Fills a throwaway nats-server with what the services of such a cluster leave on the bus (node
states and capacity, queues, workload and pod states, decisions), then times, median of
``--repeat``: explain and queues in this process, and ``python -m tidegate.cli explain … --json``
as a user runs it. Measurements, never assertions.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tidegate.bus import BusSettings, Publisher, connect
from tidegate.bus.server import NatsServerProcess
from tidegate.cli.busview import read_view
from tidegate.cli.explain import explain
from tidegate.cli.queues import queue_table
from tidegate.model import (
    Admitted,
    CapacityNode,
    DomainCount,
    Envelope,
    Message,
    NodeState,
    Pending,
    PendingReason,
    PodSetSpec,
    PodState,
    Preempted,
    QueueConfig,
    Released,
    TopologyAssignment,
    WorkloadState,
    subjects,
)

CLUSTER = "bench"
GPU = "nvidia.com/gpu"
LEVELS = ["tidegate.io/block", "tidegate.io/rack", "kubernetes.io/hostname"]
QUEUES = 8


def _envelope(body: Message, n: int) -> Envelope:
    return Envelope(
        event_id=f"bench-{n}", cluster=CLUSTER, source="bench", time=time.time(), body=body
    )


def messages(nodes: int, workloads: int, namespaces: int, pods: int) -> list[tuple[str, Message]]:
    """What the bus of such a cluster holds, as (subject, body)."""
    out: list[tuple[str, Message]] = []
    for i in range(nodes):
        name = f"b{i // 1024}-r{i // 32}-n{i}"
        labels = {LEVELS[0]: f"b{i // 1024}", LEVELS[1]: f"r{i // 32}", LEVELS[2]: name}
        alloc = {"cpu": 128_000, GPU: 8, "pods": 110}
        out.append(
            (subjects.node(CLUSTER, name), NodeState(name=name, labels=labels, allocatable=alloc))
        )
        capacity = CapacityNode(
            topology="default",
            node=name,
            domain=list(labels.values()),
            allocatable=alloc,
            free=alloc,
        )
        out.append((subjects.capacity_node(CLUSTER, "default", name), capacity))
    for q in range(QUEUES):
        config = QueueConfig(name=f"q{q}", priority=q, quota={GPU: 8 * nodes // QUEUES})
        out.append((subjects.queue(CLUSTER, config.name), config))
    sequence = 0
    for w in range(workloads):
        ns, name, uid, queue = f"ns{w % namespaces}", f"w{w}", f"uid-{w}", f"q{w % QUEUES}"
        key = f"{ns}/{name}"
        spec = PodSetSpec(name="main", count=pods, requests={"cpu": 8000, GPU: 8})
        state = WorkloadState(
            namespace=ns,
            name=name,
            uid=uid,
            owner_kind="Job",
            queue=queue,
            priority=w % 7,
            podsets=[spec],
            created_at=float(w),
        )
        out.append((subjects.workload(CLUSTER, ns, name), state))
        admitted = w % 2 == 0
        for p in range(pods):
            node = f"b{(w * pods + p) % nodes // 1024}-r{(w * pods + p) % nodes // 32}-n{(w * pods + p) % nodes}"
            pod = PodState(
                namespace=ns,
                name=f"{name}-{p}",
                uid=f"{uid}-{p}",
                workload=key,
                rank=p,
                node_name=node if admitted else None,
                phase="Running" if admitted else "Pending",
                scheduling_gates=[] if admitted else ["tidegate.io/admission"],
            )
            out.append((subjects.pod(CLUSTER, ns, pod.name), pod))
        sequence += 1
        if admitted:
            domains = [DomainCount(values=["b0", "r0", f"n{p}"], count=1) for p in range(pods)]
            body: Message = Admitted(
                workload=key,
                uid=uid,
                queue=queue,
                sequence=sequence,
                epoch=1,
                assignments={"main": TopologyAssignment(levels=LEVELS, domains=domains)},
                charged={"cpu": 8000 * pods, GPU: 8 * pods},
            )
            out.append((subjects.decision(CLUSTER, "admitted", ns, name), body))
            continue
        if w % 8 == 1:
            victim = Released(
                workload=key, uid=uid, queue=queue, reason="Evicted", sequence=sequence
            )
            out.append((subjects.decision(CLUSTER, "released", ns, name), victim))
            preempted = Preempted(
                preemptor=f"ns0/w{w - 1}", preemptor_uid=f"uid-{w - 1}", victims=[key]
            )
            out.append((subjects.decision(CLUSTER, "preempted", "ns0", f"w{w - 1}"), preempted))
            sequence += 1
        reason: PendingReason = "WaitingForCapacity" if w % 4 == 1 else "ExceedsQuota"
        message = f"main: needs {pods} pods; the cluster fits 0 (limited by {GPU})"
        pending = Pending(
            workload=key, uid=uid, queue=queue, reason=reason, message=message, sequence=sequence
        )
        out.append((subjects.decision(CLUSTER, "pending", ns, name), pending))
    return out


async def fill(url: str, bodies: list[tuple[str, Message]]) -> float:
    """Publish everything; seconds it took."""
    bus = await connect(
        BusSettings(servers=(url,), name="bench-explain", wait_for_server_seconds=10)
    )
    try:
        await bus.ensure_layout(CLUSTER)
        started = time.perf_counter()
        publisher = Publisher(bus)
        for n, (subject, body) in enumerate(bodies):
            await publisher.submit(subject, _envelope(body, n))
        await publisher.flush()
        await publisher.close()
        return time.perf_counter() - started
    finally:
        await bus.drain()


async def timed_explain(url: str, key: str) -> tuple[float, dict[str, Any]]:
    settings = BusSettings(servers=(url,), name="bench-explain", wait_for_server_seconds=10)
    started = time.perf_counter()
    view = await read_view(settings, CLUSTER, pods_of=key.split("/")[0])
    answer = explain(view, key)
    assert answer is not None
    return time.perf_counter() - started, answer


async def timed_queues(url: str) -> tuple[float, int]:
    settings = BusSettings(servers=(url,), name="bench-queues", wait_for_server_seconds=10)
    started = time.perf_counter()
    table = queue_table(await read_view(settings, CLUSTER))
    return time.perf_counter() - started, len(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16384)
    parser.add_argument("--workloads", type=int, default=10000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--pods", type=int, default=4, help="pods per workload")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    bodies = messages(args.nodes, args.workloads, args.namespaces, args.pods)
    key = f"ns{(args.workloads - 3) % args.namespaces}/w{args.workloads - 3}"  # a pending one
    with (
        tempfile.TemporaryDirectory(prefix="bench-explain-") as store,
        NatsServerProcess(store_dir=Path(store), max_file_store_bytes=1 << 40) as nats,
    ):
        fill_seconds = asyncio.run(fill(nats.url, bodies))
        explain_s, queues_s, command_s = [], [], []
        bus = ["--cluster", CLUSTER, "--nats-url", nats.url]
        answer: dict[str, Any] = {}
        for _ in range(args.repeat):
            seconds, answer = asyncio.run(timed_explain(nats.url, key))
            explain_s.append(seconds)
            seconds, rows = asyncio.run(timed_queues(nats.url))
            queues_s.append(seconds)
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "tidegate.cli", "explain", key, "--json", *bus],
                check=True,
                capture_output=True,
            )
            command_s.append(time.perf_counter() - started)
    figures = {
        "nodes": args.nodes,
        "workloads": args.workloads,
        "pods": args.workloads * args.pods,
        "namespaces": args.namespaces,
        "messages_on_the_bus": len(bodies),
        "fill_seconds": round(fill_seconds, 2),
        "explain_seconds": round(statistics.median(explain_s), 3),
        "queues_seconds": round(statistics.median(queues_s), 3),
        "explain_command_seconds": round(statistics.median(command_s), 3),
        "queues_rows": rows,
        "explained": key,
        "explained_state": f"{answer.get('state')} ({answer.get('reason')})",
        "load_average": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"bus of {args.nodes} nodes, {args.workloads} workloads, {figures['pods']} pods"
            f" ({len(bodies)} messages, filled in {fill_seconds:.1f} s)\n"
            f"explain {key}: {figures['explain_seconds']:.3f} s in process,"
            f" {figures['explain_command_seconds']:.3f} s as a command\n"
            f"queues ({rows} queues): {figures['queues_seconds']:.3f} s\n"
            f"load average {figures['load_average']}"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
