"""Benchmark of the whole pipeline: how long a user waits from creating a Job to its pods running.

    python bench/e2e.py [--json] [--out FILE] [--nodes 1024] [--rate 20] [--duration 60]
                        [--seed 7] [--utilization 0.5] [--nats-servers 1]
                        [--env TIDEGATE_KUBE_QPS=0 ...]
    python bench/e2e.py --find-max-rate [--rate 20] [--duration 30] ...

Runs tidegate as in production, on one machine (:class:`tidegate.cli.stack.LocalStack`): a
nats-server (or ``--nats-servers 3`` as a JetStream cluster), the five services as their own
processes, and the simulated Kubernetes cluster with its scheduler, kubelets and controllers in
this process (``--nodes`` nodes of 8 GPUs, racks of 32, blocks of 8 racks). A seeded stream of
Jobs is created through the Kubernetes API at ``--rate`` Jobs per second (Poisson arrivals) for
``--duration`` seconds: 1–256 pods each (log-uniform), 1, 2, 4 or 8 GPUs per pod, a third
required in one rack, a third preferred in one rack, a third unconstrained. Each pod runs for a
seeded time chosen so that the offered load keeps about ``--utilization`` of the GPUs busy, then
finishes, so capacity churns: admissions, releases and capacity changes all the time.

Figures (from the API server's objects, observed in this process as they change, and from the
decision stream):

- **created → last pod ungated** and **created → last pod Running**, per Job, p50/p99/max in ms
  (created: when the harness sent the create); these include the time a Job waited for
  capacity, so the same is given for the Jobs admitted at once (no pending decision first:
  the pipeline's own latency), with the number that waited;
- **admitted workloads/s** over the run (admitted decisions / time from the first create to the
  last admission), and the offered rate;
- **backlog**: Jobs created but not yet wholly ungated, sampled every second; its slope over the
  second half of the submission window (Jobs/s; about 0 when the pipeline keeps up);
- **decisions lost** (a Job whose pods were released without an admitted decision, or an admitted
  decision whose Job's pods were not all released by the end) and **duplicated** (a workload
  admitted more than once without a release between): both must be 0;
- every service's **CPU seconds** and **peak RSS** (``/proc/<pid>``: utime+stime, VmHWM), the
  nats-server's, and this process's (the simulated cluster and the harness);
- **start-up replay time** of each service at the end: SIGTERM, start again, time until
  ``/readyz`` answers (the replay of the streams is what it waits for).

``--find-max-rate`` instead probes offered rates on one running stack (doubling from ``--rate``,
then bisecting) and reports the highest rate whose backlog did not grow (slope ≤ 5% of the rate)
and whose admitted rate kept up with the offered one (≥ 90%).

Figures are measurements, never assertions; everything shares this machine's cores, so the load
average is reported too. Keep runs short on a shared machine.
"""

import argparse
import asyncio
import json
import math
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidegate.bus import ConsumerSettings, DurableConsumer, Received, layout
from tidegate.cli.demo_trace import (
    QueueEntry,
    WorkloadEntry,
    priority_class_object,
    queue_object,
    workload_object,
)
from tidegate.cli.stack import SERVICES, LocalStack, StackSettings
from tidegate.kube import JOBS, NAMESPACES, PRIORITY_CLASSES, QUEUES, KubeClient, KubeSettings
from tidegate.kube import connect as kube_connect
from tidegate.model import Admitted, Pending, Released, subjects
from tidegate.sim.kinds import PODS
from tidegate.testing import connected

CLUSTER = "e2ebench"
NAMESPACE = "bench"
QUEUE = "bench"
GATE = "tidegate.io/admission"
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
        )


def job_stream(
    *, seed: int, rate: float, seconds: float, nodes: int, utilization: float, prefix: str
) -> list[JobSpec]:
    """The seeded Jobs of one run: Poisson arrivals at ``rate``, mixed sizes and topologies,
    durations so that about ``utilization`` of the GPUs are busy."""
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
        pods = max(1, min(MAX_PODS, int(2 ** rng.uniform(0, math.log2(MAX_PODS + 1)))))
        topology = rng.choice(("required", "preferred", "none"))
        limit = rack_gpus if topology == "required" else max(rack_gpus, total_gpus // 4)
        pods = max(1, min(pods, limit // gpus))
        shapes.append((pods, gpus, topology))
    if not shapes:
        return []
    mean_gpus = statistics.fmean(p * g for p, g, _ in shapes)
    # Little's law: busy GPUs = rate x GPUs per Job x duration.
    mean_duration = max(1.0, utilization * total_gpus / (rate * mean_gpus))
    return [
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


# ------------------------------------------------------------------------------- observation


@dataclass
class JobTimes:
    """What happened to one Job, in monotonic seconds."""

    spec: JobSpec
    created: float = 0.0
    ungated: dict[str, float] = field(default_factory=dict)
    """Pod name → when its gate was seen gone."""
    running: dict[str, float] = field(default_factory=dict)

    def all_ungated(self) -> float | None:
        """When the last pod was ungated, once all were."""
        return max(self.ungated.values()) if len(self.ungated) >= self.spec.pods else None

    def all_running(self) -> float | None:
        """When the last pod was Running, once all were."""
        return max(self.running.values()) if len(self.running) >= self.spec.pods else None


class Observer:
    """Follows the simulated cluster's pods (synchronously, on every commit in the store) and
    the decision stream."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobTimes] = {}
        self.admitted: dict[str, list[tuple[int, float]]] = {}
        """Workload name → (decision sequence, when received) of each admitted decision."""
        self.released: dict[str, int] = {}
        self.pending: int = 0
        self.waited: set[str] = set()
        """Workloads that got a pending decision (waited for capacity) before admission."""
        self.decisions = 0
        self._sequences: set[int] = set()
        self.first_admitted: float | None = None
        self.last_admitted: float | None = None

    def on_pod(self, event: Any) -> None:
        """A pod changed in the simulator's store."""
        pod = event.obj
        metadata = pod.get("metadata", {})
        if metadata.get("namespace") != NAMESPACE:
            return
        job = self.jobs.get(metadata.get("labels", {}).get("app", ""))
        if job is None:
            return
        name = metadata.get("name", "")
        now = time.monotonic()
        gates = pod.get("spec", {}).get("schedulingGates") or []
        if name not in job.ungated and not any(g.get("name") == GATE for g in gates):
            job.ungated[name] = now
        if name not in job.running and pod.get("status", {}).get("phase") in (
            "Running",
            "Succeeded",
        ):
            job.running[name] = now

    async def on_decision(self, received: Received) -> None:
        """A decision on the stream (each stream sequence counted once)."""
        if received.stream_sequence in self._sequences:
            return
        self._sequences.add(received.stream_sequence)
        self.decisions += 1
        body = received.envelope.body
        name = str(getattr(body, "workload", "")).split("/")[-1]
        now = time.monotonic()
        if isinstance(body, Admitted):
            self.admitted.setdefault(name, []).append((body.sequence, now))
            self.first_admitted = self.first_admitted or now
            self.last_admitted = now
        elif isinstance(body, Released):
            self.released[name] = self.released.get(name, 0) + 1
        elif isinstance(body, Pending):
            self.pending += 1
            if name not in self.admitted:
                self.waited.add(name)

    def backlog(self) -> int:
        """Jobs created whose pods are not all ungated yet."""
        return sum(1 for j in self.jobs.values() if j.created and j.all_ungated() is None)


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


def process_figures(stack: LocalStack) -> dict[str, dict[str, float]]:
    """Every service's, the nats-server(s)' and this process's CPU and memory."""
    out: dict[str, dict[str, float]] = {}
    for name, service in stack.processes.items():
        if service.process is not None and service.running:
            out[name] = proc_figures(service.process.pid)
    members = getattr(stack.nats, "members", None) or [stack.nats]
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


# ------------------------------------------------------------------------------------- runs


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    """p50, p99 and max of ``values`` in ms, and how many there were."""
    if not values:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]

    return {
        "count": len(ordered),
        "p50_ms": round(at(0.50) * 1000, 1),
        "p99_ms": round(at(0.99) * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
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


async def run_load(
    stack: LocalStack,
    kube: KubeClient,
    observer: Observer,
    specs: list[JobSpec],
    *,
    rate: float,
    seconds: float,
    drain_seconds: float,
) -> dict[str, Any]:
    """Offer ``specs``, sample the backlog, wait for the Jobs to be released, and compute the
    figures of this run."""
    samples: list[tuple[float, int]] = []
    started = time.monotonic()
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            samples.append((time.monotonic() - started, observer.backlog()))
            await asyncio.sleep(1.0)

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
    await asyncio.sleep(1.0)  # the last decisions reach the observer

    jobs = [observer.jobs[n] for n in names]
    to_ungated = [u - j.created for j in jobs if (u := j.all_ungated()) is not None]
    to_running = [r - j.created for j in jobs if (r := j.all_running()) is not None]
    at_once = [
        u - j.created
        for j in jobs
        if (u := j.all_ungated()) is not None and j.spec.name not in observer.waited
    ]
    admitted_times = [t for n in names for _, t in observer.admitted.get(n, [])]
    admitted_span = (max(admitted_times) - started) if admitted_times else 0.0
    window = [(t, v) for t, v in samples if seconds / 2 <= t <= seconds]

    # Lost: released without an admission, or admitted but not released by the end.
    released_without = [
        j.spec.name for j in jobs if j.ungated and j.spec.name not in observer.admitted
    ]
    admitted_not_released = [
        j.spec.name for j in jobs if j.spec.name in observer.admitted and j.all_ungated() is None
    ]
    duplicated = 0
    for name in names:
        sequences = [s for s, _ in observer.admitted.get(name, [])]
        extra = len(sequences) - 1 - observer.released.get(name, 0)
        duplicated += max(0, extra) + (len(sequences) - len(set(sequences)))
    return {
        "offered_jobs": len(specs),
        "offered_per_s": rate,
        "offered_pods": sum(s.pods for s in specs),
        "create_lag_max_s": round(lag, 3),
        "submit_s": round(submitted_at - started, 2),
        "created_to_ungated": percentiles(to_ungated),
        "created_to_running": percentiles(to_running),
        "created_to_ungated_admitted_at_once": percentiles(at_once),
        "waited_for_capacity": sum(1 for n in names if n in observer.waited),
        "admitted_workloads": len(admitted_times),
        "admitted_per_s": round(len(admitted_times) / admitted_span, 2) if admitted_span else 0.0,
        "backlog_max": max((v for _, v in samples), default=0),
        "backlog_end_of_submission": next((v for t, v in reversed(samples) if t <= seconds), 0),
        "backlog_slope_per_s": round(slope(window), 3),
        "not_released_by_the_end": sum(1 for j in jobs if j.all_ungated() is None),
        "decisions_lost": len(released_without) + len(admitted_not_released),
        "decisions_lost_examples": (released_without + admitted_not_released)[:5],
        "decisions_duplicated": duplicated,
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
    """The local stack at the benchmark's scale, with quiet logs and no webhook."""
    env: Mapping[str, str] = {
        "TIDEGATE_LOG_LEVEL": "WARNING",
        "TIDEGATE_WEBHOOK": "off",
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


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start everything, offer the load (or probe rates), and collect the figures."""
    with tempfile.TemporaryDirectory(prefix="tidegate-e2e-bench-") as scratch:
        workdir = Path(scratch)
        started = time.monotonic()
        async with (
            LocalStack.running(stack_settings(args, workdir)) as stack,
            await kube_connect(
                KubeSettings(source="kubeconfig", kubeconfig=stack.kubeconfig, qps=0)
            ) as kube,
            connected(stack.nats_url, CLUSTER, stream_replicas=args.nats_servers) as bus,
        ):
            start_up = round(time.monotonic() - started, 2)
            observer = Observer()
            unsubscribe = stack.sim.store.subscribe(PODS.key, observer.on_pod)
            stop = asyncio.Event()
            consumer = DurableConsumer(
                bus,
                cluster=CLUSTER,
                settings=ConsumerSettings(
                    durable="e2e-bench",
                    stream=layout.decisions_stream(CLUSTER),
                    subjects=(subjects.decision_wildcard(CLUSTER),),
                    fetch_timeout_seconds=0.25,
                    max_ack_pending=8192,
                    batch_size=256,
                ),
                handler=observer.on_decision,
            )
            following = asyncio.create_task(consumer.run(stop))
            try:
                await set_up(kube)
                figures: dict[str, Any] = {
                    "nodes": args.nodes,
                    "shape": node_shape(args.nodes),
                    "nats_servers": args.nats_servers,
                    "seed": args.seed,
                    "utilization_target": args.utilization,
                    "service_env": list(args.env),
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
                        )
                    )
                figures["decisions_on_stream"] = observer.decisions
                figures["pending_decisions"] = observer.pending
                figures["processes"] = process_figures(stack)
                figures["replay_s"] = await restart_times(stack)
            finally:
                stop.set()
                unsubscribe()
                await following
    figures["cpus"] = os.cpu_count()
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
        )
        result = await run_load(
            stack, kube, observer, specs, rate=rate, seconds=args.duration, drain_seconds=args.drain
        )
        ok = bool(
            result["backlog_slope_per_s"] <= 0.05 * rate
            and result["admitted_per_s"]
            >= 0.9 * rate * min(1.0, len(specs) / max(1, rate * args.duration))
            and result["not_released_by_the_end"] == 0
        )
        result["kept_up"] = ok
        probes.append(result)
        print(
            f"  probe {rate:g} Jobs/s: admitted {result['admitted_per_s']}/s, backlog slope "
            f"{result['backlog_slope_per_s']}/s, p99 ungated "
            f"{result['created_to_ungated']['p99_ms']} ms: {'kept up' if ok else 'fell behind'}",
            file=sys.stderr,
            flush=True,
        )
        return ok

    good, bad = 0.0, None
    rate = args.rate
    while bad is None and rate <= args.max_rate:
        if await keeps_up(rate):
            good, rate = rate, rate * 2
        else:
            bad = rate
    if bad is not None:
        for _ in range(args.bisect_steps):
            middle = round((good + bad) / 2, 1)
            if middle in (good, bad):
                break
            if await keeps_up(middle):
                good = middle
            else:
                bad = middle
    return {"max_sustained_per_s": good, "first_failing_per_s": bad, "probes": probes}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print (or write) its figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=20.0, help="offered Jobs/s (start rate)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of submissions")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--utilization", type=float, default=0.5, help="GPU share kept busy")
    parser.add_argument("--drain", type=float, default=120.0, help="max seconds to wait after")
    parser.add_argument("--nats-servers", type=int, default=1, choices=(1, 3, 5))
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="TIDEGATE_X=VALUE",
        help="a service setting for every service (repeatable), e.g. TIDEGATE_KUBE_QPS=0",
    )
    parser.add_argument("--find-max-rate", action="store_true")
    parser.add_argument("--max-rate", type=float, default=400.0, help="probe no higher")
    parser.add_argument("--bisect-steps", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.env):
        parser.error("--env takes TIDEGATE_NAME=VALUE")
    figures = asyncio.run(run(args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"end-to-end benchmark: {figures['nodes']} nodes ({figures['shape']}), seed {args.seed}")
    if args.find_max_rate:
        print(f"  highest offered rate kept up with: {figures['max_sustained_per_s']} Jobs/s")
    else:
        for what in (
            "created_to_ungated",
            "created_to_running",
            "created_to_ungated_admitted_at_once",
        ):
            p = figures[what]
            print(
                f"  {what.replace('_', ' ')}: p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms, "
                f"max {p['max_ms']} ms ({p['count']} Jobs)"
            )
        print(
            f"  offered {figures['offered_per_s']} Jobs/s ({figures['offered_jobs']} Jobs, "
            f"{figures['offered_pods']} pods); admitted {figures['admitted_per_s']} workloads/s"
        )
        print(
            f"  backlog max {figures['backlog_max']}, slope {figures['backlog_slope_per_s']}/s; "
            f"lost {figures['decisions_lost']}, duplicated {figures['decisions_duplicated']}"
        )
        print(f"  {figures['waited_for_capacity']} Jobs waited for capacity")
    for name, proc in figures["processes"].items():
        print(f"  {name:<18} cpu {proc['cpu_s']} s, peak rss {proc['peak_rss_mib']} MiB")
    print(f"  replay (restart to ready): {figures['replay_s']}")
    print(f"  load average {figures['load_avg_1m']} on {figures['cpus']} cpus")
    return 0


if __name__ == "__main__":
    sys.exit(main())
