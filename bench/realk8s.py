"""Benchmark on a real Kubernetes control plane: the time tidegate adds to the bare kube-scheduler.

    python bench/realk8s.py [--nodes 1024] [--kubeconfig FILE] [--env TIDEGATE_X=V] [--json]
                            [--out FILE]

Starts a control plane from ``KUBEBUILDER_ASSETS`` (or uses ``--kubeconfig``) with ``--nodes``
fake 8-GPU nodes kept by the node agent, and times a 1,000-pod Job and 100 Jobs of 8 pods to
all Running, once bare and once with the five services in the loop (pods gated as the webhook
would gate them). Prints both and the ratios tidegate/bare; measurements, never assertions.
Run it on a quiet machine; a smoke run: ``python bench/realk8s.py --nodes 16``.
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
from pathlib import Path
from typing import Any

from tidegate.cli.demo_run import load_crds, wait_established
from tidegate.cli.nodeagent import AgentSettings, fake_nodes
from tidegate.cli.stack import LocalStack, StackSettings
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

REPO = Path(__file__).resolve().parent.parent
RACK_SIZE = 32
GPUS = {"nvidia.com/gpu": "8"}
QUEUE = "bench"


def shape_for(nodes: int) -> str:
    """A topology description of ``nodes`` 8-GPU nodes in racks of up to 32 (one block)."""
    rack = min(RACK_SIZE, nodes)
    if nodes % rack:
        raise SystemExit(f"--nodes {nodes}: must be a multiple of {rack} (the rack size)")
    return f"1x{nodes // rack}x{rack}x8gpu"


def job_body(name: str, pods: int, *, gated: bool, bench_label: str) -> dict[str, Any]:
    """A Job of ``pods`` GPU-full pods, rack-preferred, in tidegate's queue."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # The pods run until the scenario's namespace is deleted; then nothing should wait.
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"tidegate.io/bench": bench_label},
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": GPUS, "limits": GPUS}}
        ],
    }
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
    bench_label: str,
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


async def run_all(
    kube: KubeClient, kubeconfig: Path, args: argparse.Namespace, say: Callable[[str], None]
) -> dict[str, Any]:
    """Both scenarios, bare then with tidegate; the figures."""
    bench_label = uuid.uuid4().hex[:8]
    pods = args.pods or max(1, args.nodes * 1000 // 1024)
    small_jobs = args.jobs or min(100, args.nodes // 8)
    agent_settings = AgentSettings(
        nodes=shape_for(args.nodes),
        prefix=f"b{bench_label}-",
        labels={"tidegate.io/bench": bench_label},
        topology_name="default",
        delete_nodes_on_exit=True,
    )
    results: dict[str, Any] = {"nodes": args.nodes, "big_job_pods": pods, "small_jobs": small_jobs}
    big = {"big": pods}
    small = {f"small-{i:03d}": 8 for i in range(small_jobs)}
    # The CRDs first: the node agent creates the Topology of its nodes when it starts.
    await ensure_setup(kube, say)
    async with fake_nodes(kubeconfig, agent_settings, say=lambda line: say(f"  {line}")) as agent:
        begun = time.monotonic()
        await agent.wait_ready(timeout_seconds=600)
        results["nodes_ready_s"] = round(time.monotonic() - begun, 2)
        figures: dict[str, dict[str, dict[str, float]]] = {}
        say("bare kube-scheduler (no gate)")
        figures["bare"] = {
            "big": await scenario(kube, jobs=big, gated=False, bench_label=bench_label, say=say),
            "small": await scenario(
                kube, jobs=small, gated=False, bench_label=bench_label, say=say
            ),
        }
        say(f"  big Job: {figures['bare']['big']['big']:.2f} s")
        with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as workdir:
            stack_settings = StackSettings(
                workdir=Path(workdir),
                cluster="bench",
                kubeconfig=kubeconfig,
                extra_env=dict(item.split("=", 1) for item in args.env),
            )
            say("tidegate in the loop (5 services, gated pods)")
            async with LocalStack.running(stack_settings) as stack:
                figures["tidegate"] = {
                    "big": await scenario(
                        kube, jobs=big, gated=True, bench_label=bench_label, say=say
                    ),
                    "small": await scenario(
                        kube, jobs=small, gated=True, bench_label=bench_label, say=say
                    ),
                }
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
    bare, gated = results["bare"], results["tidegate"]
    results["ratio"] = {
        "big_job": _ratio(gated["big_job_s"], bare["big_job_s"]),
        "small_jobs_p50": _ratio(gated["small_jobs_p50_s"], bare["small_jobs_p50_s"]),
        "small_jobs_p99": _ratio(gated["small_jobs_p99_s"], bare["small_jobs_p99_s"]),
    }
    results["gate"] = "in the pod template (no webhook round trip)"
    results["service_env"] = dict(item.split("=", 1) for item in args.env)
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return results


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
            "no Kubernetes binaries: set KUBEBUILDER_ASSETS (see docs/testing.md) or pass "
            "--kubeconfig"
        )
    with tempfile.TemporaryDirectory(prefix="tidegate-k8s-") as workdir:
        plane = await asyncio.to_thread(ControlPlane.start, binaries, Path(workdir))
        try:
            yield plane.kubeconfig
        finally:
            await asyncio.to_thread(plane.stop)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    say: Callable[[str], None] = (lambda _l: None) if args.json else print
    async with control_plane(args.kubeconfig) as kubeconfig:
        settings = KubeSettings(kubeconfig=kubeconfig, qps=200, burst=400)
        async with await connect(settings) as kube:
            return await run_all(kube, kubeconfig, args, say)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1024, help="fake 8-GPU nodes")
    parser.add_argument("--pods", type=int, default=0, help="pods of the big Job")
    parser.add_argument("--jobs", type=int, default=0, help="8-pod Jobs created at once")
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster to use")
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
    figures = asyncio.run(main(options))
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
