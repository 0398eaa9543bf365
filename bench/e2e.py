"""Benchmark of the whole pipeline: from creating a Job to its pods ungated and Running.

    python bench/e2e.py [--json] [--out FILE] [--nodes 1024] [--rate 20] [--duration 60]
                        [--seed 7] [--utilization 0.5] [--sizes heavy-tail|log-uniform]
                        [--nats-servers 1] [--env TIDEGATE_X=V ...]
    python bench/e2e.py --find-max-rate [--rate 20] [--duration 30] ...
    python bench/e2e.py --reservations both [--nodes 256 --rate 2 --duration 60 ...]

Runs tidegate on one machine as in production (:class:`tidegate.cli.stack.LocalStack`: a
nats-server, the five services as processes, the simulated cluster in this process) and
creates a seeded Poisson stream of Jobs at ``--rate`` for ``--duration`` seconds. Prints per-Job
latencies, the offered load, admitted/s and the backlog, decisions lost or duplicated, CPU and
memory per process, CPU and bus messages per Job, each service's restart time, and the schedule
figures (GPUs allocated, big and small Jobs' waits, fragmentation; ``--reservations both``
runs the stream with and without reservations side by side); ``--find-max-rate`` probes for
the highest rate the pipeline keeps up with. The event loop and garbage-collector threshold
follow ``TIDEGATE_EVENT_LOOP`` and ``TIDEGATE_GC_THRESHOLD``. Measurements, never assertions.
"""

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import itertools
import json
import math
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from tidegate.bus import Bus, ConsumerSettings, DurableConsumer, Received, layout
from tidegate.bus.server import NatsServerProcess
from tidegate.cli.demo_run import reservation_env
from tidegate.cli.demo_trace import (
    DeclaredRuntimes,
    QueueEntry,
    WorkloadEntry,
    declared_runtime,
    priority_class_object,
    queue_object,
    workload_object,
)
from tidegate.cli.schedule_figures import (
    Gang,
    Snapshot,
    Timeline,
    nearest_rank,
    schedule_figures,
    side_by_side,
)
from tidegate.cli.stack import SERVICES, LocalStack, StackSettings
from tidegate.kube import JOBS, NAMESPACES, PRIORITY_CLASSES, QUEUES, KubeClient, KubeSettings
from tidegate.kube import PODS as KUBE_PODS
from tidegate.kube import connect as kube_connect
from tidegate.model import Admitted, Pending, Released, WorkloadState, subjects
from tidegate.model.pods import admission_gated
from tidegate.runtime import eventloop
from tidegate.runtime.tool import ToolSettingError, run_tool
from tidegate.sim.kinds import NODES, PODS
from tidegate.sim.topology import BLOCK, HOSTNAME
from tidegate.testing import connected

CLUSTER = "e2ebench"
NAMESPACE = "bench"
QUEUE = "bench"
RACK = "tidegate.io/rack"
NODES_PER_RACK = 32
RACKS_PER_BLOCK = 8
GPUS_PER_NODE = 8
GPU_CHOICES = (1, 2, 4, 8)
MAX_PODS = 256


# ---------------------------------------------------------------------------------------- input


def node_shape(nodes: int) -> str:
    """The simulator's ``BxRxNx8gpu`` for ``nodes`` nodes: racks of 32, blocks of 8 racks."""
    if nodes < NODES_PER_RACK or nodes % NODES_PER_RACK:
        raise SystemExit(f"--nodes must be a multiple of {NODES_PER_RACK}, not {nodes}")
    racks = nodes // NODES_PER_RACK
    if racks <= RACKS_PER_BLOCK:
        return f"1x{racks}x{NODES_PER_RACK}x{GPUS_PER_NODE}gpu"
    if racks % RACKS_PER_BLOCK:
        raise SystemExit(f"--nodes above 256 must be a multiple of 256, not {nodes}")
    return f"{racks // RACKS_PER_BLOCK}x{RACKS_PER_BLOCK}x{NODES_PER_RACK}x{GPUS_PER_NODE}gpu"


@dataclass(frozen=True)
class JobSpec:
    """One Job of the seeded stream."""

    name: str
    at: float
    """Seconds after the start of the run it is created."""
    pods: int
    gpus: int
    """GPUs per pod."""
    topology: str
    """required, preferred or none."""
    duration: float
    """Seconds each pod runs."""
    max_runtime: float | None = None
    """The runtime it declares (``tidegate.io/max-runtime``), if any."""

    def entry(self) -> WorkloadEntry:
        """The Job as the demo's trace machinery builds it."""
        annotations = {}
        if self.topology == "required":
            annotations["tidegate.io/topology-required"] = RACK
        elif self.topology == "preferred":
            annotations["tidegate.io/topology-preferred"] = RACK
        return WorkloadEntry(
            name=self.name,
            queue=QUEUE,
            priority_class="bench",
            pods=self.pods,
            requests={"cpu": "1", "nvidia.com/gpu": self.gpus},
            duration=self.duration,
            annotations=annotations,
            max_runtime=self.max_runtime,
        )


KEPT_UP_SLOPE = 0.1
"""A probe keeps up when its backlog grows by at most this share of the offered rate (the
Poisson arrivals alone move a short probe's slope by a few percent of the rate)."""

MIN_PROBE_RATE = 0.5
"""``--find-max-rate`` halves a failing start rate no lower than this (Jobs/s)."""

SIZE_MIXES = ("heavy-tail", "log-uniform")
"""How the pods per Job are drawn (``--sizes``): ``heavy-tail`` (default) 2**X pods with X
exponential of mean 1 (mean about 3 pods; 1 in 150 Jobs has 32 or more, 1 in 1,100 has 128 or
more), ``log-uniform`` uniform in log2 between 1 and 256 (mean about 46 pods: the first
mix, far beyond what 1,024 nodes serve at 20 Jobs/s, see ``offered_load``)."""


def draw_pods(rng: random.Random, sizes: str) -> int:
    """Pods of one Job, 1-256, by the size mix."""
    if sizes == "log-uniform":
        exponent = rng.uniform(0, math.log2(MAX_PODS + 1))
    else:
        exponent = rng.expovariate(1.0)
    return max(1, min(MAX_PODS, int(2**exponent)))


def job_stream(
    *,
    seed: int,
    rate: float,
    seconds: float,
    nodes: int,
    utilization: float,
    prefix: str,
    sizes: str = SIZE_MIXES[0],
    declare: float = 0.0,
) -> list[JobSpec]:
    """The seeded Jobs of one run: Poisson arrivals at ``rate``, mixed sizes and topologies,
    durations so that about ``utilization`` of the GPUs are busy; with ``declare`` (a factor,
    at least 1) each declares its duration times it, rounded up to 5 s, as its runtime."""
    rule = DeclaredRuntimes(factor=declare, round_up_to=DECLARED_ROUND_UP_TO) if declare else None
    rng = random.Random(seed)
    total_gpus = nodes * GPUS_PER_NODE
    rack_gpus = NODES_PER_RACK * GPUS_PER_NODE
    shapes: list[tuple[int, int, str]] = []
    at = 0.0
    times: list[float] = []
    while True:
        at += rng.expovariate(rate)
        if at >= seconds:
            break
        times.append(at)
        gpus = rng.choice(GPU_CHOICES)
        pods = draw_pods(rng, sizes)
        topology = rng.choice(("required", "preferred", "none"))
        limit = rack_gpus if topology == "required" else max(rack_gpus, total_gpus // 4)
        pods = max(1, min(pods, limit // gpus))
        shapes.append((pods, gpus, topology))
    if not shapes:
        return []
    mean_gpus = statistics.fmean(p * g for p, g, _ in shapes)
    # Little's law: busy GPUs = rate x GPUs per Job x duration.
    mean_duration = max(1.0, utilization * total_gpus / (rate * mean_gpus))
    specs = [
        JobSpec(
            name=f"{prefix}{index:06d}",
            at=at,
            pods=pods,
            gpus=gpus,
            topology=topology,
            duration=round(min(600.0, max(0.5, rng.expovariate(1 / mean_duration))), 2),
        )
        for index, (at, (pods, gpus, topology)) in enumerate(zip(times, shapes, strict=True))
    ]
    if rule is None:
        return specs
    return [
        dataclasses.replace(spec, max_runtime=declared_runtime(spec.duration, rule))
        for spec in specs
    ]


DECLARED_ROUND_UP_TO = 5.0
"""Seconds a Job's declared runtime is rounded up to (``--declare-runtimes``)."""


def offered_load(specs: list[JobSpec], *, seconds: float, nodes: int) -> dict[str, float]:
    """The arithmetic of whether the cluster can hold the offered load: GPU-seconds offered per
    second against the GPUs there are (Little's law; above 1 the Jobs must queue for capacity
    however fast tidegate is), and the pod churn the single-process simulator must carry."""
    if not specs or seconds <= 0:
        return {}
    gpus = nodes * GPUS_PER_NODE
    gpu_seconds = sum(s.pods * s.gpus * s.duration for s in specs)
    return {
        "jobs_per_s": round(len(specs) / seconds, 2),
        "pods_per_s": round(sum(s.pods for s in specs) / seconds, 1),
        "mean_pods_per_job": round(statistics.fmean(s.pods for s in specs), 2),
        "mean_gpus_per_job": round(statistics.fmean(s.pods * s.gpus for s in specs), 2),
        "mean_run_s": round(statistics.fmean(s.duration for s in specs), 2),
        "largest_job_gpus": max(s.pods * s.gpus for s in specs),
        "cluster_gpus": gpus,
        "gpu_demand": round(gpu_seconds / seconds / gpus, 3),
    }


# ------------------------------------------------------------------------------- observation


@dataclass
class JobTimes:
    """What happened to one Job, in monotonic seconds (``created_wall``: the same instant in
    epoch seconds, to compare with the decisions' envelope times)."""

    spec: JobSpec
    created: float = 0.0
    created_wall: float = 0.0
    pods_seen: float | None = None
    """When the simulator's Job controller created its first pod."""
    published: float | None = None
    """Epoch seconds the watcher stamped on the Job's first workload state."""
    ungated: dict[str, float] = field(default_factory=dict)
    """Pod name → when its gate was seen gone."""
    running: dict[str, float] = field(default_factory=dict)

    def all_ungated(self) -> float | None:
        """When the last pod was ungated, once all were."""
        return max(self.ungated.values()) if len(self.ungated) >= self.spec.pods else None

    def all_running(self) -> float | None:
        """When the last pod was Running, once all were."""
        return max(self.running.values()) if len(self.running) >= self.spec.pods else None


@dataclass(frozen=True)
class Seen:
    """One decision of the stream, as the benchmark keeps it."""

    stream_sequence: int
    kind: str
    """admitted, released or pending."""
    uid: str
    sequence: int
    """Admission's decision sequence."""
    replaces: int | None
    reason: str
    time: float
    """Epoch seconds admission stamped on it (its envelope)."""


class Observer:
    """Follows the simulated cluster's pods (synchronously, on every commit in the store: the
    API server's own objects) and the decision stream."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobTimes] = {}
        self.seen: dict[str, list[Seen]] = {}
        """Workload name → its admitted, released and pending decisions, as received."""
        self.decisions = 0
        self._sequences: set[int] = set()
        self.last_change = time.monotonic()
        """When a pod was last ungated or a decision last arrived (the pipeline's progress)."""
        self.held: dict[str, tuple[str, int]] = {}
        """Pod name → (node, GPUs) while it is bound and not finished."""
        self.first_admitted: dict[str, float] = {}
        """Job name → epoch seconds of its first admission."""

    def on_pod(self, event: Any) -> None:
        """A pod changed in the simulator's store."""
        pod = event.obj
        metadata = pod.get("metadata", {})
        if metadata.get("namespace") != NAMESPACE:
            return
        self._hold(event.type, pod)
        job = self.jobs.get(metadata.get("labels", {}).get("app", ""))
        if job is None:
            return
        name = metadata.get("name", "")
        now = time.monotonic()
        if job.pods_seen is None:
            job.pods_seen = now
        gates = pod.get("spec", {}).get("schedulingGates") or []
        if name not in job.ungated and not admission_gated(str(g.get("name")) for g in gates):
            job.ungated[name] = now
            self.last_change = now
        if name not in job.running and pod.get("status", {}).get("phase") in (
            "Running",
            "Succeeded",
        ):
            job.running[name] = now

    def _hold(self, kind: str, pod: dict[str, Any]) -> None:
        """Keep which node holds how many GPUs of this pod (for the schedule figures)."""
        name = pod.get("metadata", {}).get("name", "")
        node = pod.get("spec", {}).get("nodeName")
        if (
            kind == "DELETED"
            or not node
            or pod.get("status", {}).get("phase")
            in (
                "Succeeded",
                "Failed",
            )
        ):
            self.held.pop(name, None)
            return
        gpus = 0
        for container in pod.get("spec", {}).get("containers") or []:
            value = (container.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu")
            gpus += int(value) if value is not None else 0
        self.held[name] = (str(node), gpus)

    async def on_decision(self, received: Received) -> None:
        """A decision on the stream (each stream sequence counted once)."""
        if received.stream_sequence in self._sequences:
            return
        self._sequences.add(received.stream_sequence)
        self.decisions += 1
        body = received.envelope.body
        if not isinstance(body, Admitted | Released | Pending):
            return
        name = body.workload.split("/")[-1]
        if isinstance(body, Admitted) and body.replaces is None:
            self.first_admitted.setdefault(name, received.envelope.time)
        self.seen.setdefault(name, []).append(
            Seen(
                stream_sequence=received.stream_sequence,
                kind=type(body).__name__.lower(),
                uid=body.uid,
                sequence=body.sequence,
                replaces=body.replaces if isinstance(body, Admitted) else None,
                reason=str(getattr(body, "reason", "")),
                time=received.envelope.time,
            )
        )
        self.last_change = time.monotonic()

    async def on_state(self, received: Received) -> None:
        """A workload's state on the state stream: the first one is when the watcher
        published the Job."""
        body = received.envelope.body
        if isinstance(body, WorkloadState) and body.namespace == NAMESPACE:
            job = self.jobs.get(body.name)
            if job is not None and job.published is None:
                job.published = received.envelope.time

    def history(self, name: str) -> list[Seen]:
        """The Job's decisions in stream order."""
        return sorted(self.seen.get(name, []), key=lambda d: d.stream_sequence)

    def admission_in_force(self, name: str) -> bool:
        """Whether the Job's newest admitted/released decision is an admission."""
        last = [d for d in self.history(name) if d.kind in ("admitted", "released")]
        return bool(last) and last[-1].kind == "admitted"

    def duplicated(self, name: str) -> int:
        """Admissions of one uid while an earlier one was in force (no release between, and
        not a replacement of it), and decision sequences seen twice."""
        extra = 0
        in_force: dict[str, int] = {}
        sequences: set[int] = set()
        for d in self.history(name):
            if d.kind == "admitted":
                if d.sequence in sequences:
                    extra += 1
                sequences.add(d.sequence)
                if d.uid in in_force and d.replaces != in_force[d.uid]:
                    extra += 1
                in_force[d.uid] = d.sequence
            elif d.kind == "released":
                in_force.pop(d.uid, None)
        return extra

    def backlog(self) -> int:
        """Jobs created whose pods are not all ungated yet."""
        return sum(1 for j in self.jobs.values() if j.created and j.all_ungated() is None)

    def snapshot(self, gpus: Mapping[str, int]) -> Snapshot:
        """Now (epoch seconds): the free GPUs per node (of ``gpus``, each node's GPUs) and the
        Jobs created but not yet admitted."""
        held: dict[str, int] = {}
        for node, count in self.held.values():
            held[node] = held.get(node, 0) + count
        waiting = tuple(
            name
            for name, job in self.jobs.items()
            if job.created_wall and name not in self.first_admitted
        )
        return Snapshot(
            at=time.time(),
            free={node: total - held.get(node, 0) for node, total in gpus.items()},
            waiting=waiting,
        )


def cluster_nodes(stack: LocalStack) -> tuple[dict[str, dict[str, str]], dict[str, int]]:
    """The simulated nodes' topology paths (block, rack, host) and GPUs."""
    assert stack.sim is not None
    paths: dict[str, dict[str, str]] = {}
    gpus: dict[str, int] = {}
    for node in stack.sim.store.objects(NODES.key):
        name = str(node.get("metadata", {}).get("name"))
        labels = node.get("metadata", {}).get("labels") or {}
        paths[name] = {level: labels[level] for level in (BLOCK, RACK, HOSTNAME) if level in labels}
        gpus[name] = int(node.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu", 0))
    return paths, gpus


def schedule_timeline(
    observer: Observer,
    specs: Sequence[JobSpec],
    nodes: tuple[dict[str, dict[str, str]], dict[str, int]],
    snapshots: Sequence[Snapshot],
    end: float,
) -> Timeline:
    """The run's Jobs, their first admissions and the sampled free GPUs, for
    :func:`tidegate.cli.schedule_figures.schedule_figures` (epoch seconds)."""
    gangs = [
        Gang(
            key=spec.name,
            pods=spec.pods,
            gpus_per_pod=spec.gpus,
            submitted_at=observer.jobs[spec.name].created_wall,
            started_at=observer.first_admitted.get(spec.name),
            required_level=RACK if spec.topology == "required" else None,
        )
        for spec in specs
        if spec.name in observer.jobs and observer.jobs[spec.name].created_wall
    ]
    paths, gpus = nodes
    return Timeline(
        nodes=paths,
        gpus=gpus,
        gangs=gangs,
        snapshots=list(snapshots),
        end=end,
        levels=[
            level for level in (BLOCK, RACK, HOSTNAME) if any(level in p for p in paths.values())
        ],
    )


# --------------------------------------------------------------------------------- processes


def proc_figures(pid: int) -> dict[str, float]:
    """CPU seconds and peak RSS (MiB) of a process, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return {
        "cpu_s": round(cpu, 2),
        "peak_rss_mib": round(peak / 1024, 1),
        "rss_mib": round(rss / 1024, 1),
    }


def nats_members(stack: LocalStack) -> list[NatsServerProcess]:
    """The stack's nats-server, or every server of its NATS cluster."""
    return list(getattr(stack.nats, "members", None) or [stack.nats])


def process_figures(stack: LocalStack) -> dict[str, dict[str, float]]:
    """Every service's, the nats-server(s)' and this process's CPU and memory."""
    out: dict[str, dict[str, float]] = {}
    for name, service in stack.processes.items():
        if service.process is not None and service.running:
            out[name] = proc_figures(service.process.pid)
    members = nats_members(stack)
    for index, member in enumerate(members):
        pid = member.pid
        if pid is not None:
            out[f"nats-server-{index + 1}" if len(members) > 1 else "nats-server"] = proc_figures(
                pid
            )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["harness+simulator"] = {
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }
    return out


BusCounts = dict[str, tuple[int, int, int, int]]
"""Per NATS connection name: messages and bytes it sent to the server(s), and received."""


def bus_counts(stack: LocalStack) -> BusCounts:
    """What every open NATS connection has sent and received so far, by connection name (each
    service names its connection after itself), summed over the servers of a cluster."""
    counts: BusCounts = {}
    for member in nats_members(stack):
        if not member.running:
            continue
        connections = member.monitoring("connz?limit=4096").get("connections")
        for conn in connections if isinstance(connections, list) else []:
            name = str(conn.get("name") or "unnamed")
            sent, received, sent_bytes, received_bytes = counts.get(name, (0, 0, 0, 0))
            counts[name] = (
                sent + int(conn.get("in_msgs", 0)),
                received + int(conn.get("out_msgs", 0)),
                sent_bytes + int(conn.get("in_bytes", 0)),
                received_bytes + int(conn.get("out_bytes", 0)),
            )
    return counts


def bus_per_job(before: BusCounts, after: BusCounts, jobs: int) -> dict[str, dict[str, float]]:
    """Messages (and KiB) each connection sent to NATS and received from it per Job, between
    two :func:`bus_counts`: publishes, acknowledgements and requests out; deliveries, publish
    acknowledgements and replies in. A connection opened in between counts from zero."""
    if jobs <= 0:
        return {}
    out: dict[str, dict[str, float]] = {}
    total = [0, 0, 0, 0]
    for name, now in sorted(after.items()):
        then = before.get(name, (0, 0, 0, 0))
        delta = [max(n - t, 0) for n, t in zip(now, then, strict=True)]
        total = [a + b for a, b in zip(total, delta, strict=True)]
        out[name] = _bus_row(delta, jobs)
    out["all"] = _bus_row(total, jobs)
    return out


def _bus_row(delta: list[int], jobs: int) -> dict[str, float]:
    return {
        "sent": round(delta[0] / jobs, 1),
        "received": round(delta[1] / jobs, 1),
        "sent_kib": round(delta[2] / jobs / 1024, 1),
        "received_kib": round(delta[3] / jobs / 1024, 1),
    }


# ------------------------------------------------------------------------------------- runs


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    """p50, p99 and max of ``values`` in ms, and how many there were."""
    if not values:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return nearest_rank(ordered, q)

    return {
        "count": len(ordered),
        "p50_ms": round(at(0.50) * 1000, 1),
        "p99_ms": round(at(0.99) * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


SLOWEST = 10
"""How many of the slowest Jobs the figures break down stage by stage."""


STAGES = (
    "created_to_pods_ms",
    "pods_to_published_ms",
    "published_to_admitted_ms",
    "admitted_to_first_ungated_ms",
    "first_to_last_ungated_ms",
)
"""The stages of created → last pod ungated, in order (:func:`job_stages`)."""


def job_stages(observer: Observer, job: JobTimes) -> dict[str, Any] | None:
    """A wholly ungated Job's way through the pipeline (ms), or None before it is: created →
    its first pod in the simulator's store (the simulator's Job controller), → the watcher's
    first state of it (its stamp), → first admitted (the decision's stamp), → first pod
    ungated, → last pod ungated. A stage whose end was not seen is None."""
    last = job.all_ungated()
    if last is None:
        return None
    admitted = next((d.time for d in observer.history(job.spec.name) if d.kind == "admitted"), None)
    first = min(job.ungated.values())
    # Monotonic and epoch instants of the same moments, all as seconds since the create.
    pods = None if job.pods_seen is None else job.pods_seen - job.created
    published = None if job.published is None else job.published - job.created_wall
    decided = None if admitted is None else admitted - job.created_wall
    points = [0.0, pods, published, decided, first - job.created, last - job.created]
    row: dict[str, Any] = {
        "job": job.spec.name,
        "pods": job.spec.pods,
        "created_at_s": round(job.spec.at, 2),
        "created_to_ungated_ms": round((last - job.created) * 1000, 1),
    }
    for name, (begin, end) in zip(STAGES, itertools.pairwise(points), strict=True):
        row[name] = None if begin is None or end is None else round((end - begin) * 1000, 1)
    return row


def slowest_jobs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The :data:`SLOWEST` Jobs by created → last pod ungated, with their stages: where the
    tail's time goes."""
    return sorted(rows, key=lambda row: row["created_to_ungated_ms"], reverse=True)[:SLOWEST]


def stage_percentiles(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | int | None]]:
    """p50/p99/max of each stage over the Jobs (where the typical Job's time goes)."""
    return {
        name: percentiles([row[name] / 1000 for row in rows if row[name] is not None])
        for name in STAGES
    }


def cpu_per_second(samples: list[tuple[float, dict[str, float]]]) -> list[dict[str, float]]:
    """Each process's share of a core between consecutive samples (``t``: seconds since the
    submissions started): which process was busy when the tail's Jobs waited."""
    out: list[dict[str, float]] = []
    for (t0, before), (t1, after) in itertools.pairwise(samples):
        span = t1 - t0
        row = {"t": round(t1, 1)}
        row.update({n: round((after[n] - before.get(n, 0.0)) / span, 2) for n in after if span > 0})
        out.append(row)
    return out


def cpu_per_job(samples: list[tuple[float, dict[str, float]]], jobs: int) -> dict[str, Any]:
    """CPU each process spent per offered Job, and the cores it kept busy on average, between
    the first and the last sample (the load: from the first submission until every Job ran;
    start-up and the restarts at the end excluded). Both are figures *at this rate*: a busier
    pipeline batches more (rounds, flushes, coalesced publishes), so its CPU per Job falls as
    the rate rises."""
    if len(samples) < 2 or jobs < 1:
        return {}
    (t0, first), (t1, last) = samples[0], samples[-1]
    spent = {name: last[name] - first[name] for name in last if name in first}
    seconds = t1 - t0
    return {
        "seconds": round(seconds, 1),
        "ms_per_job": {name: round(1000 * cpu / jobs, 1) for name, cpu in spent.items()},
        "cores": {name: round(cpu / seconds, 2) for name, cpu in spent.items()},
        "all_ms_per_job": round(1000 * sum(spent.values()) / jobs, 1),
        "all_cores": round(sum(spent.values()) / seconds, 2),
    }


def slope(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope (per second) of (time, value) samples; 0 for fewer than two."""
    if len(samples) < 2:
        return 0.0
    xs = [t for t, _ in samples]
    ys = [float(v) for _, v in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


async def submit(kube: KubeClient, observer: Observer, specs: list[JobSpec]) -> float:
    """Create the Jobs on their schedule (without waiting for one create before the next is
    due); returns the seconds the creates fell behind schedule at worst."""
    start = time.monotonic()
    lag = 0.0
    in_flight: set[asyncio.Task[None]] = set()
    limit = asyncio.Semaphore(64)

    async def create(job: JobTimes) -> None:
        async with limit:
            job.created = time.monotonic()
            job.created_wall = time.time()
            await kube.create(
                JOBS, workload_object(job.spec.entry(), NAMESPACE), namespace=NAMESPACE
            )

    for spec in specs:
        delay = start + spec.at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        lag = max(lag, -delay)
        job = observer.jobs[spec.name] = JobTimes(spec)
        task = asyncio.create_task(create(job))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.gather(*in_flight)
    return lag


async def gated_pods(kube: KubeClient) -> dict[str, int]:
    """Job name → its pods that still carry tidegate's gate, from the API server."""
    out: dict[str, int] = {}
    listed = await kube.list_objects(KUBE_PODS, namespace=NAMESPACE)
    for item in listed.items:
        pod: dict[str, Any] = dict(item)
        gates = pod.get("spec", {}).get("schedulingGates") or []
        if admission_gated(str(g.get("name")) for g in gates):
            app = pod.get("metadata", {}).get("labels", {}).get("app", "")
            out[app] = out.get(app, 0) + 1
    return out


def unreleased_admitted(observer: Observer, names: list[str]) -> list[str]:
    """Jobs whose admission is in force but whose pods are not all ungated."""
    return [
        n
        for n in names
        if observer.admission_in_force(n) and observer.jobs[n].all_ungated() is None
    ]


async def settle(
    observer: Observer, names: list[str], *, limit_seconds: float, quiet_seconds: float
) -> str:
    """After the load: wait until every admitted Job is wholly ungated ("caught up"), or the
    pipeline went ``quiet_seconds`` without ungating a pod or publishing a decision while some
    admitted Job still waits ("idle": those admissions are lost), or ``limit_seconds`` passed
    with the pipeline still working ("busy": they are still in flight)."""
    deadline = time.monotonic() + limit_seconds
    while True:
        if not unreleased_admitted(observer, names):
            return "caught up"
        now = time.monotonic()
        if now - observer.last_change >= quiet_seconds:
            return "idle"
        if now >= deadline:
            return "busy"
        await asyncio.sleep(0.5)


def lost_decisions(
    observer: Observer, names: list[str], *, outcome: str, gated: Mapping[str, int]
) -> tuple[list[str], list[str]]:
    """After :func:`settle` ended with ``outcome``: the admitted Jobs whose pods stay gated
    (``gated``: from the API server) although the pipeline went idle, and the Jobs ungated
    without any admission. Both are lost decisions; admitted Jobs still gated while the
    pipeline keeps working are in flight, not lost."""
    lost = [
        n
        for n in unreleased_admitted(observer, names)
        if outcome == "idle"
        and (gated.get(n, 0) > 0 or len(observer.jobs[n].ungated) < observer.jobs[n].spec.pods)
    ]
    released_without = [
        n
        for n in names
        if observer.jobs[n].ungated
        and not any(d.kind == "admitted" for d in observer.seen.get(n, []))
    ]
    return lost, released_without


def latency_split(observer: Observer, job: JobTimes) -> tuple[float, float] | None:
    """(queued, pipeline) seconds of a wholly ungated Job: queued is the time from its first
    pending decision (it waited: for capacity, a full domain or quota, the reason says) to its
    first admission; pipeline is the rest of created → last pod ungated (watcher, admission's
    first look, the ungater). None before the Job is wholly ungated or without an admission."""
    ungated = job.all_ungated()
    history = observer.history(job.spec.name)
    admitted = next((d for d in history if d.kind == "admitted"), None)
    if ungated is None or admitted is None:
        return None
    pending = next(
        (
            d
            for d in history
            if d.kind == "pending" and d.stream_sequence < admitted.stream_sequence
        ),
        None,
    )
    total = ungated - job.created
    queued = max(0.0, admitted.time - pending.time) if pending is not None else 0.0
    return queued, max(0.0, total - queued)


async def run_load(
    stack: LocalStack,
    kube: KubeClient,
    observer: Observer,
    specs: list[JobSpec],
    *,
    rate: float,
    seconds: float,
    drain_seconds: float,
    settle_seconds: float,
    quiet_seconds: float,
    nodes: int,
) -> dict[str, Any]:
    """Offer ``specs``, sample the backlog, wait for the Jobs to be released, and compute the
    figures of this run."""
    samples: list[tuple[float, int]] = []
    started = time.monotonic()
    done = asyncio.Event()

    cpu: list[tuple[float, dict[str, float]]] = []
    layout_now = cluster_nodes(stack)
    snapshots: list[Snapshot] = []

    async def sample() -> None:
        while not done.is_set():
            samples.append((time.monotonic() - started, observer.backlog()))
            snapshots.append(observer.snapshot(layout_now[1]))
            cpu.append(
                (
                    time.monotonic() - started,
                    {n: f["cpu_s"] for n, f in process_figures(stack).items()},
                )
            )
            await asyncio.sleep(1.0)

    bus_before = bus_counts(stack)
    sampler = asyncio.create_task(sample())
    lag = await submit(kube, observer, specs)
    submitted_at = time.monotonic()
    names = [s.name for s in specs]
    deadline = time.monotonic() + drain_seconds
    while time.monotonic() < deadline:
        jobs = [observer.jobs[n] for n in names]
        if all(j.all_running() is not None for j in jobs):
            break
        await asyncio.sleep(0.5)
    done.set()
    await sampler
    drained_at = time.monotonic()
    schedule = schedule_figures(
        schedule_timeline(observer, specs, layout_now, snapshots, end=time.time())
    )
    bus = bus_per_job(bus_before, bus_counts(stack), len(specs))
    await asyncio.sleep(1.0)  # the last decisions reach the observer
    jobs = [observer.jobs[n] for n in names]
    backlog_at_end = sum(1 for j in jobs if j.all_ungated() is None)
    unreleased_at_end = unreleased_admitted(observer, names)
    # Lost or in flight: let the pipeline finish what it holds (the load has stopped), then
    # judge from the API server's pods which admissions it left gated while idle.
    outcome = await settle(
        observer, names, limit_seconds=settle_seconds, quiet_seconds=quiet_seconds
    )
    still = unreleased_admitted(observer, names)
    gated = await gated_pods(kube)
    lost, released_without = lost_decisions(observer, names, outcome=outcome, gated=gated)

    stages = [row for j in jobs if (row := job_stages(observer, j)) is not None]
    to_ungated = [u - j.created for j in jobs if (u := j.all_ungated()) is not None]
    to_running = [r - j.created for j in jobs if (r := j.all_running()) is not None]
    splits = [(j, split) for j in jobs if (split := latency_split(observer, j)) is not None]
    queued = [q for _, (q, _) in splits if q > 0]
    pipeline = [p for _, (_, p) in splits]
    at_once = [p for _, (q, p) in splits if q == 0]
    reasons: dict[str, int] = {}
    for name in names:
        for d in observer.history(name):
            if d.kind == "pending":
                reasons[d.reason] = reasons.get(d.reason, 0) + 1
    admitted_times = [
        d.time for n in names for d in observer.seen.get(n, []) if d.kind == "admitted"
    ]
    first_created = min((j.created_wall for j in jobs if j.created_wall), default=0.0)
    admitted_span = (max(admitted_times) - first_created) if admitted_times else 0.0
    window = [(t, v) for t, v in samples if seconds / 2 <= t <= seconds]
    return {
        "slowest_jobs": slowest_jobs(stages),
        "stages": stage_percentiles(stages),
        "cpu_per_second": cpu_per_second(cpu),
        "cpu_per_job": cpu_per_job(cpu, len(specs)),
        "bus_messages_per_job": bus,
        "offered_jobs": len(specs),
        "offered_per_s": rate,
        "offered_pods": sum(s.pods for s in specs),
        "offered_load": offered_load(specs, seconds=seconds, nodes=nodes),
        "create_lag_max_s": round(lag, 3),
        "submit_s": round(submitted_at - started, 2),
        "drain_s": round(drained_at - submitted_at, 2),
        "created_to_ungated": percentiles(to_ungated),
        "created_to_running": percentiles(to_running),
        "pipeline_created_to_ungated": percentiles(pipeline),
        "created_to_ungated_admitted_at_once": percentiles(at_once),
        "queued_for_capacity": percentiles(queued),
        "waited_for_capacity": len(queued),
        "pending_reasons": reasons,
        "admitted_workloads": len(admitted_times),
        "admitted_per_s": round(len(admitted_times) / admitted_span, 2) if admitted_span else 0.0,
        "backlog_max": max((v for _, v in samples), default=0),
        "backlog_end_of_submission": next((v for t, v in reversed(samples) if t <= seconds), 0),
        "backlog_slope_per_s": round(slope(window), 3),
        "backlog_at_end": backlog_at_end,
        "unreleased_at_end": len(unreleased_at_end),
        "settle": outcome,
        "settle_s": round(time.monotonic() - drained_at, 2),
        "unreleased_after_settle": len(still),
        "oldest_unreleased_admission_s": round(
            max(
                (
                    time.time() - a.time
                    for n in still
                    for a in observer.history(n)[-1:]
                    if a.kind == "admitted"
                ),
                default=0.0,
            ),
            1,
        ),
        "newest_wholly_ungated_admission_s": round(
            min(
                (
                    time.time() - a.time
                    for j in jobs
                    if j.all_ungated() is not None
                    for a in observer.history(j.spec.name)
                    if a.kind == "admitted"
                ),
                default=0.0,
            ),
            1,
        ),
        "not_released_by_the_end": sum(1 for j in jobs if j.all_ungated() is None),
        "decisions_lost": len(lost) + len(released_without),
        "decisions_lost_examples": (lost + released_without)[:5],
        "decisions_duplicated": sum(observer.duplicated(n) for n in names),
        "schedule": schedule,
    }


async def restart_times(stack: LocalStack) -> dict[str, float]:
    """Each service stopped (SIGTERM) and started again: seconds until it is ready."""
    out: dict[str, float] = {}
    for name in SERVICES:
        await stack.stop_service(name)
        started = time.monotonic()
        await stack.start_service(name)
        out[name] = round(time.monotonic() - started, 2)
    return out


async def set_up(kube: KubeClient) -> None:
    """The managed namespace, a priority class and a queue without quota limits."""
    await kube.create(
        NAMESPACES,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {"tidegate.io/managed": "true"}},
        },
    )
    await kube.create(PRIORITY_CLASSES, priority_class_object("bench", 1000))
    await kube.create(QUEUES, queue_object(QueueEntry(name=QUEUE, spec={"priority": 10})))


def stack_settings(args: argparse.Namespace, workdir: Path) -> StackSettings:
    """The local stack at the benchmark's scale, with quiet logs and no webhook (the stack
    passes ``TIDEGATE_EVENT_LOOP`` and ``TIDEGATE_GC_THRESHOLD`` on to the services, unless
    ``--env`` says otherwise)."""
    env: Mapping[str, str] = {
        "TIDEGATE_LOG_LEVEL": "WARNING",
        "TIDEGATE_WEBHOOK": "off",
        **reservation_env(args.reservations != "off"),
        **dict(item.split("=", 1) for item in args.env),
    }
    return StackSettings(
        workdir=workdir,
        cluster=CLUSTER,
        nodes=node_shape(args.nodes),
        time_scale=1.0,
        ready_timeout_seconds=300,
        extra_env=env,
        nats_servers=args.nats_servers,
    )


class BenchStack(NamedTuple):
    """A running local stack with the benchmark's own Kubernetes client and bus connection."""

    stack: LocalStack
    kube: KubeClient
    bus: Bus


@contextlib.asynccontextmanager
async def bench_stack(settings: StackSettings) -> AsyncIterator[BenchStack]:
    """Start the local stack of ``settings``; connect a Kubernetes client without a rate
    limit and a bus connection with the cluster's streams (replicated as the services
    replicate them); close and stop everything at exit. What every benchmark on the local
    stack starts with."""
    async with (
        LocalStack.running(settings) as stack,
        await kube_connect(
            KubeSettings(source="kubeconfig", kubeconfig=stack.kubeconfig, qps=0)
        ) as kube,
        connected(stack.nats_url, settings.cluster, stream_replicas=settings.nats_servers) as bus,
    ):
        yield BenchStack(stack, kube, bus)


def observing(
    bus: Bus,
    durable: str,
    stream: str,
    subject: str,
    handler: Callable[[Received], Awaitable[None]],
    *,
    cluster: str = CLUSTER,
) -> DurableConsumer:
    """The benchmark's own consumer of ``subject`` on ``stream`` (large batches: it must keep
    up with the whole run)."""
    return DurableConsumer(
        bus,
        cluster=cluster,
        settings=ConsumerSettings(
            durable=durable,
            stream=stream,
            subjects=(subject,),
            fetch_timeout_seconds=0.25,
            max_ack_pending=8192,
            batch_size=256,
        ),
        handler=handler,
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start everything, offer the load (or probe rates), and collect the figures."""
    with tempfile.TemporaryDirectory(prefix="tidegate-e2e-bench-") as scratch:
        workdir = Path(scratch)
        started = time.monotonic()
        async with bench_stack(stack_settings(args, workdir)) as (stack, kube, bus):
            start_up = round(time.monotonic() - started, 2)
            observer = Observer()
            assert stack.sim is not None
            unsubscribe = stack.sim.store.subscribe(PODS.key, observer.on_pod)
            stop = asyncio.Event()
            consumer = observing(
                bus,
                "e2e-bench",
                layout.decisions_stream(CLUSTER),
                subjects.decision_wildcard(CLUSTER),
                observer.on_decision,
            )
            states = observing(
                bus,
                "e2e-bench-states",
                layout.state_stream(CLUSTER),
                subjects.workload(CLUSTER, NAMESPACE, "x").rsplit(".", 1)[0] + ".*",
                observer.on_state,
            )
            following = asyncio.gather(consumer.run(stop), states.run(stop))
            try:
                await set_up(kube)
                figures: dict[str, Any] = {
                    "nodes": args.nodes,
                    "shape": node_shape(args.nodes),
                    "nats_servers": args.nats_servers,
                    "seed": args.seed,
                    "utilization_target": args.utilization,
                    "sizes": args.sizes,
                    "reservations": args.reservations,
                    "declare_runtimes": args.declare_runtimes,
                    "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
                    "service_env": list(args.env),
                    "event_loop": eventloop.running_loop_kind(),
                    "gc_threshold": gc.get_threshold()[0],
                    "stack_start_s": start_up,
                }
                if args.find_max_rate:
                    figures.update(await find_max_rate(stack, kube, observer, args))
                else:
                    specs = job_stream(
                        seed=args.seed,
                        rate=args.rate,
                        seconds=args.duration,
                        nodes=args.nodes,
                        utilization=args.utilization,
                        prefix="job-",
                        sizes=args.sizes,
                        declare=args.declare_runtimes,
                    )
                    figures.update(
                        await run_load(
                            stack,
                            kube,
                            observer,
                            specs,
                            rate=args.rate,
                            seconds=args.duration,
                            drain_seconds=args.drain,
                            settle_seconds=args.settle,
                            quiet_seconds=args.quiet,
                            nodes=args.nodes,
                        )
                    )
                figures["decisions_on_stream"] = observer.decisions
                figures["pending_decisions"] = sum(
                    1 for ds in observer.seen.values() for d in ds if d.kind == "pending"
                )
                figures["processes"] = process_figures(stack)
                figures["load_avg_after_load"] = [round(x, 2) for x in os.getloadavg()]
                figures["replay_s"] = await restart_times(stack)
            finally:
                stop.set()
                unsubscribe()
                await following
    figures["cpus"] = len(os.sched_getaffinity(0))
    figures["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return figures


async def find_max_rate(
    stack: LocalStack, kube: KubeClient, observer: Observer, args: argparse.Namespace
) -> dict[str, Any]:
    """Probe offered rates on the running stack: double from ``--rate`` while the pipeline
    keeps up, then bisect between the last rate that did and the first that did not."""
    probes: list[dict[str, Any]] = []

    async def keeps_up(rate: float) -> bool:
        specs = job_stream(
            seed=args.seed + len(probes),
            rate=rate,
            seconds=args.duration,
            nodes=args.nodes,
            utilization=args.utilization,
            prefix=f"p{len(probes):02d}-",
            sizes=args.sizes,
            declare=args.declare_runtimes,
        )
        result = await run_load(
            stack,
            kube,
            observer,
            specs,
            rate=rate,
            seconds=args.duration,
            drain_seconds=args.drain,
            settle_seconds=args.settle,
            quiet_seconds=args.quiet,
            nodes=args.nodes,
        )
        # The Poisson stream offers a little more or less than the nominal rate.
        offered = len(specs) / args.duration
        ok = bool(
            result["backlog_slope_per_s"] <= KEPT_UP_SLOPE * rate
            and result["admitted_per_s"] >= 0.9 * offered
            and result["decisions_lost"] == 0
            and result["decisions_duplicated"] == 0
        )
        result["kept_up"] = ok
        result["load_avg_1m"] = round(os.getloadavg()[0], 2)
        probes.append(result)
        print(
            f"  probe {rate:g} Jobs/s ({offered:.1f} offered, "
            f"{result['offered_load'].get('pods_per_s', 0)} pods/s): admitted "
            f"{result['admitted_per_s']}/s, backlog slope {result['backlog_slope_per_s']}/s, "
            f"pipeline p99 {result['pipeline_created_to_ungated']['p99_ms']} ms, CPU "
            f"{result['cpu_per_job'].get('all_ms_per_job')} ms per Job "
            f"({result['cpu_per_job'].get('all_cores')} cores), load "
            f"{result['load_avg_1m']}: {'kept up' if ok else 'fell behind'}",
            file=sys.stderr,
            flush=True,
        )
        return ok

    good, bad = 0.0, None
    rate = args.rate
    if await keeps_up(rate):
        good, rate = rate, rate * 2
        while bad is None and rate <= args.max_rate:
            if await keeps_up(rate):
                good, rate = rate, rate * 2
            else:
                bad = rate
    else:
        # The start rate is too high already: halve until one keeps up.
        bad, rate = rate, rate / 2
        while good == 0.0 and rate >= MIN_PROBE_RATE:
            if await keeps_up(rate):
                good = rate
            else:
                bad, rate = rate, rate / 2
    if bad is not None and good:
        for _ in range(args.bisect_steps):
            middle = round((good + bad) / 2, 1)
            if middle in (good, bad):
                break
            if await keeps_up(middle):
                good = middle
            else:
                bad = middle
    return {"max_sustained_per_s": good, "first_failing_per_s": bad, "probes": probes}


def print_cpu_per_job(cost: Mapping[str, Any]) -> None:
    """CPU per Job during the load and the cores it kept busy (see :func:`cpu_per_job`)."""
    if not cost:
        return
    cores = cost["cores"]
    print(
        f"  CPU per Job at this rate (cores busy over the {cost['seconds']} s of load): "
        + ", ".join(f"{name} {ms} ms ({cores[name]})" for name, ms in cost["ms_per_job"].items())
        + f"; all {cost['all_ms_per_job']} ms ({cost['all_cores']})"
    )


def print_bus_per_job(bus: Mapping[str, Mapping[str, float]]) -> None:
    """NATS messages per Job, sent / received, by connection (see :func:`bus_per_job`)."""
    if not bus:
        return
    print(
        "  NATS messages per Job, sent / received: "
        + ", ".join(f"{name} {row['sent']} / {row['received']}" for name, row in bus.items())
    )


def print_run(figures: Mapping[str, Any]) -> None:
    """The figures of one run, readably."""
    load = figures["offered_load"]
    if load:
        print(
            f"  offered {figures['offered_per_s']} Jobs/s: {figures['offered_jobs']} Jobs, "
            f"{load['pods_per_s']} pods/s, {load['mean_gpus_per_job']} GPUs and "
            f"{load['mean_run_s']} s of run per Job on average: GPU demand "
            f"{load['gpu_demand']:.0%} of {load['cluster_gpus']} GPUs"
        )
    for what, label in (
        ("created_to_ungated", "created → ungated (all)"),
        ("pipeline_created_to_ungated", "  less time queued (pipeline)"),
        ("created_to_ungated_admitted_at_once", "  Jobs admitted at once"),
        ("queued_for_capacity", "  time queued (Jobs that waited)"),
        ("created_to_running", "created → running (all)"),
    ):
        p = figures[what]
        print(
            f"  {label:<34} p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms, max {p['max_ms']} ms "
            f"({p['count']} Jobs)"
        )
    print(
        "  stages p50 / p99 ms: "
        + ", ".join(
            f"{name.removesuffix('_ms').replace('_to_', ' → ')} {p['p50_ms']} / {p['p99_ms']}"
            for name, p in figures["stages"].items()
        )
    )
    for row in figures["slowest_jobs"][:3]:
        print(
            f"  slow: {row['job']} ({row['pods']} pods) {row['created_to_ungated_ms']} ms = "
            + " + ".join(f"{row[name]}" for name in STAGES)
            + f" ({', '.join(name.removesuffix('_ms') for name in STAGES)})"
        )
    print_cpu_per_job(figures.get("cpu_per_job") or {})
    print_bus_per_job(figures.get("bus_messages_per_job") or {})
    print(
        f"  admitted {figures['admitted_per_s']} workloads/s; pending reasons "
        f"{figures['pending_reasons'] or 'none'}"
    )
    print(
        f"  backlog max {figures['backlog_max']}, slope {figures['backlog_slope_per_s']}/s, "
        f"{figures['backlog_at_end']} at the end of the drain ({figures['drain_s']} s), "
        f"of which {figures['unreleased_at_end']} admitted and not yet released"
    )
    print(
        f"  after the drain the pipeline {figures['settle']} in {figures['settle_s']} s "
        f"({figures['unreleased_after_settle']} admitted still unreleased); lost "
        f"{figures['decisions_lost']}, duplicated {figures['decisions_duplicated']}"
    )
    schedule = figures.get("schedule")
    if schedule:
        print("  schedule figures (created → first admission; fragmented: time-averaged):")
        for line in side_by_side({"this run": schedule}).splitlines()[2:]:
            print(f"    {line}")


def both_ways(args: argparse.Namespace) -> dict[str, Any]:
    """The same seeded stream with reservations on, then off, each on a fresh stack; the
    figures of both and their schedule figures side by side."""
    runs: dict[str, Any] = {}
    for mode in ("on", "off"):
        runs[mode] = run_tool(run(argparse.Namespace(**{**vars(args), "reservations": mode})))
    table = side_by_side(
        {f"reservations {mode}": figures.get("schedule") or {} for mode, figures in runs.items()}
    )
    return {"reservations": "both", "runs": runs, "side_by_side": table}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print (or write) its figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=20.0, help="offered Jobs/s (start rate)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of submissions")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--utilization", type=float, default=0.5, help="GPU share kept busy")
    parser.add_argument(
        "--drain", type=float, default=120.0, help="max seconds to wait for every Job to run"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="then max seconds for the admitted Jobs still gated to be released",
    )
    parser.add_argument(
        "--quiet",
        type=float,
        default=15.0,
        help="an admitted Job still gated after this long without progress counts as lost",
    )
    parser.add_argument("--sizes", choices=SIZE_MIXES, default=SIZE_MIXES[0], help="pods per Job")
    parser.add_argument("--nats-servers", type=int, default=1, choices=(1, 3, 5))
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="TIDEGATE_X=VALUE",
        help="a service setting for every service (repeatable), e.g. TIDEGATE_KUBE_QPS=0",
    )
    parser.add_argument(
        "--reservations",
        choices=("on", "off", "both"),
        default="on",
        help="admission's reservations for big Jobs; both: run on, then off, side by side",
    )
    parser.add_argument(
        "--declare-runtimes",
        type=float,
        default=1.5,
        metavar="FACTOR",
        help="each Job declares its duration x FACTOR (>= 1) as tidegate.io/max-runtime; "
        "0: none (default: %(default)s)",
    )
    parser.add_argument("--find-max-rate", action="store_true")
    parser.add_argument("--max-rate", type=float, default=400.0, help="probe no higher")
    parser.add_argument("--bisect-steps", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.env):
        parser.error("--env takes TIDEGATE_NAME=VALUE")
    if args.declare_runtimes and args.declare_runtimes < 1:
        parser.error("--declare-runtimes: a factor of at least 1 (or 0 for none)")
    if args.reservations == "both" and args.find_max_rate:
        parser.error("--reservations both compares one load, not --find-max-rate")
    try:
        figures = both_ways(args) if args.reservations == "both" else run_tool(run(args))
    except ToolSettingError as exc:
        parser.error(str(exc))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    if args.json:
        print(json.dumps(figures))
        return 0
    if args.reservations == "both":
        for mode, one in figures["runs"].items():
            print(f"reservations {mode}:")
            print_one(args, one)
        print(figures["side_by_side"])
        return 0
    print_one(args, figures)
    return 0


def print_one(args: argparse.Namespace, figures: Mapping[str, Any]) -> None:
    """The figures of one run (of ``--reservations on`` or ``off``), readably."""
    print(
        f"end-to-end benchmark: {figures['nodes']} nodes ({figures['shape']}), seed {args.seed}, "
        f"sizes {args.sizes}"
    )
    if args.find_max_rate:
        print(
            f"  highest offered rate kept up with (backlog not growing): "
            f"{figures['max_sustained_per_s']} Jobs/s; first that fell behind: "
            f"{figures['first_failing_per_s']}"
        )
    else:
        print_run(figures)
    for name, proc in figures["processes"].items():
        print(f"  {name:<18} cpu {proc['cpu_s']} s, peak rss {proc['peak_rss_mib']} MiB")
    print(f"  replay (restart to ready): {figures['replay_s']}")
    print(
        f"  load average at the start {figures['load_avg_1m_at_start']}, after the load "
        f"{figures.get('load_avg_after_load')}, at the end {figures['load_avg_1m']} on "
        f"{figures['cpus']} cpus (measured while everything else on the machine ran)"
    )


if __name__ == "__main__":
    sys.exit(main())
