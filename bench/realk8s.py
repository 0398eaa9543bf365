"""Benchmark on a real Kubernetes control plane: the time tidegate adds to the bare kube-scheduler.

    python bench/realk8s.py [--nodes 1024] [--kubeconfig FILE | --simulator]
                            [--env TIDEGATE_X=V] [--json] [--out FILE]

Starts a control plane from ``KUBEBUILDER_ASSETS`` (or uses ``--kubeconfig``) with ``--nodes``
fake 8-GPU nodes kept by the node agent, and times a 1,000-pod Job and 100 Jobs of 8 pods to
all Running, once bare and once with the five services in the loop (pods gated as the webhook
would gate them). Prints both, the ratios tidegate/bare and the CPU seconds of each process of
the tidegate run; measurements, never assertions. Run it on a quiet machine; a smoke run:
``python bench/realk8s.py --nodes 16``.

``--simulator`` runs the same two measurements on the simulated cluster (``libs/sim``, in this
process, started as the other benchmarks start it) where there are no Kubernetes binaries.
There the bare run is not kube-scheduler: the simulator's own binder stands in for it (first
fitting node by name, in this process) and its kubelets mark a bound pod Running at once, so
the figures show where tidegate's added time goes, not how it compares with a real
kube-scheduler. The JSON's ``cluster`` says which kind ran (``real`` or ``simulator``).
"""

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from e2e import bench_stack, process_figures  # type: ignore[import-not-found]

from tidegate.cli.demo_run import load_crds, wait_established
from tidegate.cli.nodeagent import AgentSettings, fake_nodes
from tidegate.cli.stack import SERVICES, LocalStack, StackSettings
from tidegate.kube import (
    CRDS,
    JOBS,
    NAMESPACES,
    PODS,
    QUEUES,
    AlreadyExists,
    Informer,
    KubeClient,
    KubeEvent,
    KubeSettings,
    NotFound,
    connect,
)
from tidegate.model.names import ADMISSION_GATE
from tidegate.runtime import eventloop
from tidegate.runtime.tool import run_tool

REPO = Path(__file__).resolve().parent.parent
RACK_SIZE = 32
GPUS = {"nvidia.com/gpu": "8"}
QUEUE = "bench"
SIMULATED_BARE = (
    "the simulator's binder (libs/sim, in the benchmark's process) stands in for "
    "kube-scheduler, and its kubelets mark a bound pod Running at once: the figures show where "
    "tidegate's added time goes, not how it compares with a real kube-scheduler"
)
"""What the bare run is on the simulated cluster (printed, and in the JSON)."""


def shape_for(nodes: int) -> str:
    """A topology description of ``nodes`` 8-GPU nodes in racks of up to 32 (one block)."""
    rack = min(RACK_SIZE, nodes)
    if nodes % rack:
        raise SystemExit(f"--nodes {nodes}: must be a multiple of {rack} (the rack size)")
    return f"1x{nodes // rack}x{rack}x8gpu"


def job_body(name: str, pods: int, *, gated: bool, bench_label: str | None) -> dict[str, Any]:
    """A Job of ``pods`` GPU-full pods, rack-preferred, in tidegate's queue, on the nodes
    labelled ``bench_label`` (None: any node; the simulated cluster has the bench's only)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # The pods run until the scenario's namespace is deleted; then nothing should wait.
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": GPUS, "limits": GPUS}}
        ],
    }
    if bench_label is not None:
        spec["nodeSelector"] = {"tidegate.io/bench": bench_label}
    if gated:
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    labels = {"tidegate.io/queue": QUEUE}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"tidegate.io/topology-preferred": "tidegate.io/rack"},
        },
        "spec": {
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


class RunningWatch:
    """When each pod of a namespace was first seen Running, by Job."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.running: dict[str, dict[str, float]] = {}
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "RunningWatch":
        informer = Informer(self.kube, PODS, namespace=self.namespace)
        self._task = asyncio.create_task(self._follow(informer))
        await informer.wait_synced()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self, informer: Informer) -> None:
        async for item in informer:
            if not isinstance(item, KubeEvent) or item.type == "DELETED":
                continue
            pod = item.obj
            if pod.get("status", {}).get("phase") != "Running":  # type: ignore[union-attr]
                continue
            job = pod["metadata"].get("labels", {}).get("job-name", "")  # type: ignore[index]
            self.running.setdefault(job, {}).setdefault(item.key[1], time.monotonic())
            self.changed.set()

    async def wait(self, expected: dict[str, int], *, within: float) -> dict[str, float]:
        """Wait until every Job of ``expected`` has that many pods Running; the time each
        Job's last pod started running."""
        deadline = time.monotonic() + within
        while True:
            done = {
                job: max(self.running[job].values())
                for job, count in expected.items()
                if len(self.running.get(job, {})) >= count
            }
            if len(done) == len(expected):
                return done
            if time.monotonic() > deadline:
                waiting = {j: len(self.running.get(j, {})) for j in expected if j not in done}
                raise SystemExit(f"timed out: Running pods of unfinished Jobs: {waiting}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)


async def new_namespace(kube: KubeClient, prefix: str, *, managed: bool) -> str:
    """A fresh namespace (labelled for tidegate when ``managed``) whose ServiceAccount exists."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    labels = {"tidegate.io/managed": "true"} if managed else {}
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    await kube.create(NAMESPACES, body)
    return name


async def scenario(
    kube: KubeClient,
    *,
    jobs: dict[str, int],
    gated: bool,
    bench_label: str | None,
    say: Callable[[str], None],
) -> dict[str, float]:
    """Create ``jobs`` (name → pods) at once; seconds from creation to all Running, per Job."""
    namespace = await new_namespace(kube, "bench-" + ("gated" if gated else "bare"), managed=gated)
    try:
        async with RunningWatch(kube, namespace) as watch:
            created: dict[str, float] = {}

            async def create(name: str, pods: int) -> None:
                body = job_body(name, pods, gated=gated, bench_label=bench_label)
                for _ in range(50):
                    try:
                        created[name] = time.monotonic()
                        await kube.create(JOBS, body, namespace=namespace)
                        return
                    except NotFound:  # the namespace is still being set up
                        await asyncio.sleep(0.1)

            await asyncio.gather(*(create(name, pods) for name, pods in jobs.items()))
            finished = await watch.wait(jobs, within=600)
        return {name: finished[name] - created[name] for name in jobs}
    finally:
        await release(kube, namespace, list(jobs), say)


async def release(
    kube: KubeClient, namespace: str, jobs: list[str], say: Callable[[str], None]
) -> None:
    """Delete the scenario's Jobs and pods, wait until no pod holds a GPU, drop the namespace."""
    for name in jobs:
        with contextlib.suppress(NotFound):
            await kube.delete(JOBS, name, namespace=namespace, propagation="Background")
    begun = time.monotonic()
    while time.monotonic() - begun < 300:
        pods = (await kube.list_objects(PODS, namespace=namespace)).items
        if not pods:
            break
        for pod in pods:
            await kube.delete_pod(
                namespace,
                str(pod["metadata"]["name"]),  # type: ignore[index]
                grace_seconds=0,
                missing_ok=True,
            )
        await asyncio.sleep(0.5)
    else:
        say(f"  (pods of {namespace} still there after 300 s)")
    await kube.delete(NAMESPACES, namespace)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


TidegateLoop = Callable[[], AbstractAsyncContextManager[LocalStack]]
"""Starts the five services against the cluster (and stops them at exit): the stack."""


def sizes(args: argparse.Namespace) -> tuple[int, int]:
    """The big Job's pods and the number of 8-pod Jobs for ``args``."""
    return args.pods or max(1, args.nodes * 1000 // 1024), args.jobs or min(100, args.nodes // 8)


async def run_all(
    kube: KubeClient,
    args: argparse.Namespace,
    say: Callable[[str], None],
    *,
    bench_label: str | None,
    tidegate: TidegateLoop,
    bare_stack: LocalStack | None = None,
) -> dict[str, Any]:
    """Both scenarios on the cluster's ready nodes, bare then with tidegate (``tidegate()``
    running); the figures, with each process's CPU seconds of a run where a stack is up
    (``bare_stack``: the simulator's, without services)."""
    pods, small_jobs = sizes(args)
    results: dict[str, Any] = {"nodes": args.nodes, "big_job_pods": pods, "small_jobs": small_jobs}
    big = {"big": pods}
    small = {f"small-{i:03d}": 8 for i in range(small_jobs)}
    figures: dict[str, dict[str, dict[str, float]]] = {}
    cpu: dict[str, dict[str, float]] = {}
    say(
        "bare: "
        + (
            "the simulator's binder (no gate)"
            if bare_stack is not None
            else "kube-scheduler (no gate)"
        )
    )
    before = cpu_seconds(bare_stack) if bare_stack is not None else {}
    figures["bare"] = {
        "big": await scenario(kube, jobs=big, gated=False, bench_label=bench_label, say=say),
        "small": await scenario(kube, jobs=small, gated=False, bench_label=bench_label, say=say),
    }
    if bare_stack is not None:
        cpu["bare"] = spent(before, cpu_seconds(bare_stack))
    say(f"  big Job: {figures['bare']['big']['big']:.2f} s")
    say("tidegate in the loop (5 services, gated pods)")
    async with tidegate() as stack:
        before = cpu_seconds(stack)
        figures["tidegate"] = {
            "big": await scenario(kube, jobs=big, gated=True, bench_label=bench_label, say=say),
            "small": await scenario(kube, jobs=small, gated=True, bench_label=bench_label, say=say),
        }
        cpu["tidegate"] = spent(before, cpu_seconds(stack))
        dead = stack.dead_services()
        if dead:
            raise SystemExit(f"services died: {[p.name for p in dead]}")
    say(f"  big Job: {figures['tidegate']['big']['big']:.2f} s")
    for mode, runs in figures.items():
        per_job = list(runs["small"].values())
        results[mode] = {
            "big_job_s": round(runs["big"]["big"], 3),
            "small_jobs_p50_s": round(quantile(per_job, 0.5), 3) if per_job else None,
            "small_jobs_p99_s": round(quantile(per_job, 0.99), 3) if per_job else None,
            "small_jobs_last_s": round(max(per_job), 3) if per_job else None,
            "small_jobs_mean_s": round(statistics.fmean(per_job), 3) if per_job else None,
        }
        if mode in cpu:
            results[mode]["cpu_s"] = cpu[mode]
    bare, gated = results["bare"], results["tidegate"]
    results["ratio"] = {
        "big_job": _ratio(gated["big_job_s"], bare["big_job_s"]),
        "small_jobs_p50": _ratio(gated["small_jobs_p50_s"], bare["small_jobs_p50_s"]),
        "small_jobs_p99": _ratio(gated["small_jobs_p99_s"], bare["small_jobs_p99_s"]),
    }
    results["gate"] = "in the pod template (no webhook round trip)"
    results["service_env"] = dict(item.split("=", 1) for item in args.env)
    results["event_loop"] = eventloop.running_loop_kind()
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return results


def cpu_seconds(stack: LocalStack) -> dict[str, float]:
    """CPU seconds so far of each process of ``stack`` and of this one (which runs the
    simulator, when there is one)."""
    figures = {name: proc["cpu_s"] for name, proc in process_figures(stack).items()}
    if stack.sim is None:
        figures["harness"] = figures.pop("harness+simulator")
    return figures


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each process spent between two readings (one started since: all of it)."""
    return {name: round(cpu - before.get(name, 0.0), 2) for name, cpu in after.items()}


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return round(value / base, 3)


async def ensure_setup(kube: KubeClient, say: Callable[[str], None]) -> None:
    """The tidegate CRDs (created where missing) and an unlimited Queue for the benchmark."""
    missing = []
    for crd in load_crds(REPO / "deploy" / "crds"):
        name = str(crd["metadata"]["name"])  # type: ignore[index]
        try:
            await kube.get(CRDS, name)
        except NotFound:
            await kube.create(CRDS, crd)
            missing.append(name)
    if missing:
        say(f"  installed CRDs: {', '.join(missing)}")
        await wait_established(kube, missing)
    queue = {
        "apiVersion": "tidegate.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": QUEUE},
        "spec": {"priority": 10},
    }
    with contextlib.suppress(AlreadyExists):
        await kube.create(QUEUES, queue)


@contextlib.asynccontextmanager
async def control_plane(kubeconfig: Path | None) -> AsyncIterator[Path]:
    """The kubeconfig of the cluster to use: the given one, or a control plane started from
    KUBEBUILDER_ASSETS for the benchmark's length."""
    if kubeconfig is not None:
        yield kubeconfig
        return
    from tidegate.testing.controlplane import ControlPlane, find_binaries

    binaries = find_binaries()
    if binaries is None:
        raise SystemExit(
            "no Kubernetes binaries: set KUBEBUILDER_ASSETS (see docs/testing.md), pass "
            "--kubeconfig, or run on the simulated cluster with --simulator"
        )
    with tempfile.TemporaryDirectory(prefix="tidegate-k8s-") as workdir:
        plane = await asyncio.to_thread(ControlPlane.start, binaries, Path(workdir))
        try:
            yield plane.kubeconfig
        finally:
            await asyncio.to_thread(plane.stop)


async def on_real_cluster(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    """The benchmark on the ``--kubeconfig`` cluster or a control plane of its own, with fake
    nodes from the node agent; the services run as a local stack against it."""
    bench_label = uuid.uuid4().hex[:8]
    agent_settings = AgentSettings(
        nodes=shape_for(args.nodes),
        prefix=f"b{bench_label}-",
        labels={"tidegate.io/bench": bench_label},
        topology_name="default",
        delete_nodes_on_exit=True,
    )
    async with control_plane(args.kubeconfig) as kubeconfig:
        settings = KubeSettings(kubeconfig=kubeconfig, qps=200, burst=400)
        async with await connect(settings) as kube:
            # The CRDs first: the node agent creates the Topology of its nodes when it starts.
            await ensure_setup(kube, say)
            async with fake_nodes(
                kubeconfig, agent_settings, say=lambda line: say(f"  {line}")
            ) as agent:
                begun = time.monotonic()
                await agent.wait_ready(timeout_seconds=600)
                ready = round(time.monotonic() - begun, 2)
                with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as workdir:
                    stack_settings = StackSettings(
                        workdir=Path(workdir),
                        cluster="bench",
                        kubeconfig=kubeconfig,
                        extra_env=dict(item.split("=", 1) for item in args.env),
                    )
                    results = await run_all(
                        kube,
                        args,
                        say,
                        bench_label=bench_label,
                        tidegate=lambda: LocalStack.running(stack_settings),
                    )
    return {"cluster": "real", "nodes_ready_s": ready, **results}


async def on_simulator(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    """The benchmark on the simulated cluster: a local stack started without services (the
    simulator's binder alone: the bare run), then the five services started on it."""
    say(f"on the simulated cluster: {SIMULATED_BARE}")
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as workdir:
        settings = StackSettings(
            workdir=Path(workdir),
            cluster="bench",
            nodes=shape_for(args.nodes),
            services=(),
            # As on the real cluster: no webhook gates the pods, the gated Jobs carry the gate.
            admission_gate=False,
            ready_timeout_seconds=300,
            extra_env=dict(item.split("=", 1) for item in args.env),
        )
        begun = time.monotonic()
        async with bench_stack(settings) as (stack, kube, _bus):
            started = round(time.monotonic() - begun, 2)
            await ensure_setup(kube, say)

            @contextlib.asynccontextmanager
            async def services() -> AsyncIterator[LocalStack]:
                try:
                    for name in SERVICES:
                        await stack.start_service(name)
                    yield stack
                finally:
                    for name in reversed(stack.processes):
                        await stack.stop_service(name)

            results = await run_all(
                kube, args, say, bench_label=None, tidegate=services, bare_stack=stack
            )
    return {
        "cluster": "simulator",
        "bare_means": SIMULATED_BARE,
        "stack_start_s": started,
        **results,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    say: Callable[[str], None] = (lambda _l: None) if args.json else print
    if args.simulator:
        return await on_simulator(args, say)
    return await on_real_cluster(args, say)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1024, help="fake 8-GPU nodes")
    parser.add_argument("--pods", type=int, default=0, help="pods of the big Job")
    parser.add_argument("--jobs", type=int, default=0, help="8-pod Jobs created at once")
    cluster = parser.add_mutually_exclusive_group()
    cluster.add_argument("--kubeconfig", type=Path, help="an existing cluster to use")
    cluster.add_argument(
        "--simulator",
        action="store_true",
        help="the simulated cluster instead of a real one (its binder stands in for "
        "kube-scheduler in the bare run)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="TIDEGATE_X=VALUE",
        help="a setting for every service (repeatable), e.g. TIDEGATE_KUBE_QPS=200",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON figures")
    parser.add_argument("--out", type=Path, help="also write the JSON figures here")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.pods < 0 or args.jobs < 0:
        parser.error("--nodes must be positive; --pods and --jobs must not be negative")
    if max(args.pods, 8 * args.jobs) > args.nodes:
        parser.error("the nodes cannot hold that many GPU-full pods at once")
    return args


if __name__ == "__main__":
    options = parse_args(sys.argv[1:])
    # On the simulator it runs in this process: on the loop and garbage-collector threshold
    # the other benchmarks of the simulated cluster run it on.
    figures = run_tool(main(options)) if options.simulator else asyncio.run(main(options))
    text = json.dumps(figures, indent=2)
    if options.out is not None:
        options.out.parent.mkdir(parents=True, exist_ok=True)
        options.out.write_text(text + "\n")
    if options.json:
        print(text)
    else:
        ratio = figures["ratio"]
        print(text)
        print(
            f"tidegate/bare: big Job {ratio['big_job']}, small Jobs p50 "
            f"{ratio['small_jobs_p50']}, p99 {ratio['small_jobs_p99']}"
        )
        print(f"CPU seconds of the tidegate run: {figures['tidegate']['cpu_s']}")
        if figures["cluster"] == "simulator":
            print(f"on the simulated cluster, bare is not kube-scheduler: {SIMULATED_BARE}")
