"""Benchmark of each service's memory, its growth under churn, and its restart time, with a large
cluster mirrored on the bus.

    python bench/footprint.py [--nodes 16384] [--pods 100000] [--managed-jobs 50]
                              [--churn-rounds 5] [--churn-jobs 500] [--json] [--out FILE]

Runs tidegate on one machine (:class:`tidegate.cli.stack.LocalStack`) and reads each service's
resident memory: with the nodes only; with ``--pods`` pods of other tenants and
``--managed-jobs`` Jobs through the pipeline (per pod); after rounds of ``--churn-jobs`` Jobs
created, run and deleted (KiB kept per 1,000 workloads); and after a restart, with the replay's
duration. Measurements, never assertions. Full size needs several GiB and minutes; smoke it
with ``--nodes 64 --pods 200 --churn-rounds 3 --churn-jobs 20``.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from e2e import (  # type: ignore[import-not-found]
    JobSpec,
    bench_stack,
    node_shape,
    proc_figures,
    set_up,
)

from tidegate.bus import Bus, layout
from tidegate.cli.demo_trace import workload_object
from tidegate.cli.stack import SERVICES, LocalStack, StackSettings
from tidegate.kube import JOBS, NAMESPACES, KubeClient
from tidegate.sim.kinds import PODS

CLUSTER = "footprint"
MANAGED = "bench"
TENANTS = "tenants"
PODS_PER_JOB = 1000
CHURN_PODS = 2
"""Pods (one GPU each) of a churned Job."""
CHURN_SECONDS = 1.0
"""How long each churned pod runs."""


def rss(stack: LocalStack) -> dict[str, dict[str, float]]:
    """Each service's resident and peak memory and CPU seconds so far."""
    return {
        name: proc_figures(service.process.pid)
        for name, service in stack.processes.items()
        if service.process is not None and service.running
    }


def rss_kib(stack: LocalStack) -> dict[str, int]:
    """Each service's resident memory in KiB (``VmRSS``, unrounded: the churn step's slopes
    are a few KiB per round)."""
    found: dict[str, int] = {}
    for name, service in stack.processes.items():
        if service.process is None or not service.running:
            continue
        for line in Path(f"/proc/{service.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                found[name] = int(line.split()[1])
    return found


def tenant_job(name: str, pods: int) -> dict[str, Any]:
    """A Job of ``pods`` small pods that run until deleted, in the unmanaged namespace."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": TENANTS},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {"requests": {"cpu": "100m"}},
                        }
                    ],
                },
            },
        },
    }


async def until(what: str, check: Any, limit: float, interval: float = 1.0) -> float:
    """Wait until ``await check()`` is true; the seconds it took (SystemExit after ``limit``)."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > limit:
            raise SystemExit(f"footprint: {what} did not happen within {limit:.0f}s")
        await asyncio.sleep(interval)
    return round(time.monotonic() - started, 2)


async def create_tenants(kube: KubeClient, pods: int) -> None:
    """The other tenants' pods, in Jobs of 1,000."""
    await kube.create(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANTS}},
    )
    remaining, index = pods, 0
    while remaining > 0:
        count = min(PODS_PER_JOB, remaining)
        await kube.create(JOBS, tenant_job(f"tenant-{index:04d}", count), namespace=TENANTS)
        remaining -= count
        index += 1


async def create_managed(kube: KubeClient, jobs: int) -> None:
    """Jobs of 8 one-GPU pods that go through tidegate."""
    await set_up(kube)
    for index in range(jobs):
        spec = JobSpec(
            name=f"managed-{index:04d}", at=0.0, pods=8, gpus=1, topology="none", duration=3600.0
        )
        await kube.create(JOBS, workload_object(spec.entry(), MANAGED), namespace=MANAGED)


async def create_churn(kube: KubeClient, round_: int, jobs: int) -> list[str]:
    """One churn round's Jobs (managed, short); their names."""
    names = [f"churn-{round_:03d}-{index:04d}" for index in range(jobs)]
    for name in names:
        spec = JobSpec(
            name=name, at=0.0, pods=CHURN_PODS, gpus=1, topology="none", duration=CHURN_SECONDS
        )
        await kube.create(JOBS, workload_object(spec.entry(), MANAGED), namespace=MANAGED)
    return names


def rss_slope(workloads: list[int], rss: list[int]) -> float | None:
    """KiB of resident memory per 1,000 workloads seen: the least-squares slope of ``rss``
    (KiB) over ``workloads`` (None with fewer than two points)."""
    if len(set(workloads)) < 2:
        return None
    return round(statistics.linear_regression(workloads, rss).slope * 1000, 1)


async def decision_kinds(bus: Bus) -> dict[str, int]:
    """Messages on the decision stream per kind (``admitted``, ``replace-requested``, …): a
    ``replace-requested`` means a gang's slots had to be placed again (docs/ungater.md)."""
    stream = layout.decisions_stream(CLUSTER)
    info = await bus.jetstream.stream_info(stream, subjects_filter=f"tg.{CLUSTER}.decision.>")
    kinds: dict[str, int] = {}
    for subject, count in (info.state.subjects or {}).items():
        kind = subject.split(".")[3]
        kinds[kind] = kinds.get(kind, 0) + count
    return dict(sorted(kinds.items()))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start, measure on nodes only, load, measure, restart each service, measure."""
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "shape": node_shape(args.nodes),
        "pods": args.pods,
        "managed_jobs": args.managed_jobs,
        "churn_rounds": args.churn_rounds,
        "churn_jobs": args.churn_jobs,
    }
    expected_pods = args.pods + 8 * args.managed_jobs
    with tempfile.TemporaryDirectory(prefix="tidegate-footprint-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        settings = StackSettings(
            workdir=workdir,
            cluster=CLUSTER,
            nodes=node_shape(args.nodes),
            ready_timeout_seconds=args.timeout,
            extra_env={
                "TIDEGATE_LOG_LEVEL": os.environ.get("FOOTPRINT_LOG_LEVEL", "WARNING"),
                "TIDEGATE_WEBHOOK": "off",
                "TIDEGATE_KUBE_QPS": "0",
            },
        )
        started = time.monotonic()
        async with bench_stack(settings) as (stack, kube, bus):
            figures["stack_start_s"] = round(time.monotonic() - started, 2)
            await asyncio.sleep(args.settle)
            nodes_only = rss(stack)
            await create_tenants(kube, args.pods)

            def phases() -> dict[str, int]:
                found: dict[str, int] = {}
                for pod in stack.sim.store.objects(PODS.key):
                    status = pod.get("status")
                    phase = str(status.get("phase")) if isinstance(status, dict) else "None"
                    metadata = pod.get("metadata")
                    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
                    found[f"{namespace}/{phase}"] = found.get(f"{namespace}/{phase}", 0) + 1
                return found

            def running_at_least(count: int) -> Callable[[], Awaitable[bool]]:
                async def check() -> bool:
                    running = sum(v for k, v in phases().items() if k.endswith("/Running"))
                    if args.verbose:
                        print(f"  pods: {phases()}", file=sys.stderr, flush=True)
                    return running >= count

                return check

            def mirrored_at_least(count: int) -> Callable[[], Awaitable[bool]]:
                async def check() -> bool:
                    info = await bus.jetstream.stream_info(layout.state_stream(CLUSTER))
                    return bool(info.state.messages >= args.nodes + count)

                return check

            # The tenants' pods first, and mirrored, before any managed Job: admission must
            # decide on a capacity view that already counts them (otherwise it may pin a gang
            # to a node the scheduler is filling with tenant pods at the same moment).
            figures["pods_running_s"] = await until(
                "every tenant pod Running", running_at_least(args.pods), args.timeout
            )
            figures["pods_mirrored_s"] = await until(
                "the watcher publishing every pod", mirrored_at_least(args.pods), args.timeout
            )
            await create_managed(kube, args.managed_jobs)
            figures["managed_running_s"] = await until(
                "every managed pod Running", running_at_least(expected_pods), args.timeout
            )
            await until(
                "the watcher publishing the managed pods",
                mirrored_at_least(expected_pods),
                args.timeout,
            )
            await asyncio.sleep(args.settle)
            loaded = rss(stack)
            streams = {}
            for stream in (
                layout.state_stream(CLUSTER),
                layout.capacity_stream(CLUSTER),
                layout.decisions_stream(CLUSTER),
                f"KV_{layout.ledger_bucket(CLUSTER)}",
            ):
                info = await bus.jetstream.stream_info(stream)
                streams[stream] = {
                    "messages": info.state.messages,
                    "mib": round(info.state.bytes / 2**20, 1),
                }
            figures["streams"] = streams
            figures["decisions"] = await decision_kinds(bus)

            def churn_pods(prefix: str) -> dict[str, int]:
                found: dict[str, int] = {}
                for pod in stack.sim.store.objects(PODS.key):
                    metadata = pod.get("metadata")
                    if not isinstance(metadata, dict) or metadata.get("namespace") != MANAGED:
                        continue
                    if not str(metadata.get("name", "")).startswith(prefix):
                        continue
                    status = pod.get("status")
                    phase = str(status.get("phase")) if isinstance(status, dict) else "None"
                    found[phase] = found.get(phase, 0) + 1
                return found

            churn: list[dict[str, Any]] = []
            seen = 0
            for round_ in range(args.churn_rounds):
                prefix = f"churn-{round_:03d}-"
                begun = time.monotonic()
                names = await create_churn(kube, round_, args.churn_jobs)
                wanted = CHURN_PODS * args.churn_jobs

                async def succeeded(prefix: str = prefix, wanted: int = wanted) -> bool:
                    found = churn_pods(prefix)
                    if args.verbose:
                        print(f"  churn {prefix}: {found}", file=sys.stderr, flush=True)
                    return found.get("Succeeded", 0) >= wanted

                await until(f"churn round {round_} succeeding", succeeded, args.timeout, 0.5)
                for name in names:
                    await kube.delete(JOBS, name, namespace=MANAGED, propagation="Background")

                async def gone(prefix: str = prefix) -> bool:
                    return not churn_pods(prefix)

                await until(f"churn round {round_} deleted", gone, args.timeout, 0.5)
                await asyncio.sleep(args.churn_settle)
                seen += args.churn_jobs
                churn.append(
                    {
                        "workloads_seen": seen,
                        "seconds": round(time.monotonic() - begun, 2),
                        "rss_kib": rss_kib(stack),
                    }
                )
            figures["churn"] = churn
            if churn:  # the churned Jobs went through admission: their decisions, by kind
                figures["decisions_after_churn"] = await decision_kinds(bus)

            replay: dict[str, float] = {}
            after: dict[str, dict[str, float]] = {}
            for name in SERVICES:
                await stack.stop_service(name)
                begun = time.monotonic()
                await stack.start_service(name)
                replay[name] = round(time.monotonic() - begun, 2)
                await asyncio.sleep(1.0)
                after[name] = rss(stack)[name]

    services: dict[str, Any] = {}
    for name in SERVICES:
        before = nodes_only.get(name, {}).get("rss_mib", 0.0)
        load = loaded.get(name, {}).get("rss_mib", 0.0)
        services[name] = {
            "rss_nodes_only_mib": before,
            "rss_loaded_mib": load,
            "peak_rss_mib": loaded.get(name, {}).get("peak_rss_mib"),
            "per_pod_kib": round((load - before) * 1024 / expected_pods, 2)
            if expected_pods
            else None,
            "replay_s": replay.get(name),
            "rss_after_replay_mib": after.get(name, {}).get("rss_mib"),
            "cpu_s_before_restart": loaded.get(name, {}).get("cpu_s"),
            "rss_after_churn_rounds_kib": [r["rss_kib"].get(name) for r in churn],
            "churn_rss_slope_kib_per_1000_workloads": rss_slope(
                [r["workloads_seen"] for r in churn[1:] if name in r["rss_kib"]],
                [r["rss_kib"][name] for r in churn[1:] if name in r["rss_kib"]],
            ),
        }
    figures["services"] = services
    figures["cpus"] = len(os.sched_getaffinity(0))
    figures["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print (or write) its figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=16384)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--managed-jobs", type=int, default=50)
    parser.add_argument("--churn-rounds", type=int, default=5, help="0: no churn step")
    parser.add_argument("--churn-jobs", type=int, default=500, help="Jobs created per round")
    parser.add_argument(
        "--churn-settle", type=float, default=2.0, help="seconds after a round's deletions"
    )
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per waiting step")
    parser.add_argument("--verbose", action="store_true", help="progress on stderr")
    parser.add_argument("--workdir", type=Path, help="keep logs here (default: a temporary dir)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    if args.json:
        print(json.dumps(figures))
        return 0
    print(
        f"footprint: {figures['nodes']} nodes, {figures['pods']} pods + "
        f"{figures['managed_jobs']} managed Jobs; pods Running after "
        f"{figures['pods_running_s']} s, mirrored after {figures['pods_mirrored_s']} s more"
    )
    for name, s in figures["services"].items():
        print(
            f"  {name:<15} rss {s['rss_nodes_only_mib']} MiB nodes only, {s['rss_loaded_mib']} "
            f"MiB loaded (peak {s['peak_rss_mib']}), {s['per_pod_kib']} KiB/pod; replay "
            f"{s['replay_s']} s, then {s['rss_after_replay_mib']} MiB"
        )
    if figures["churn"]:
        seen = figures["churn"][-1]["workloads_seen"]
        print(
            f"  churn: {figures['churn_rounds']} rounds of {figures['churn_jobs']} Jobs "
            f"({seen} workloads created, run and deleted, "
            f"{', '.join(str(r['seconds']) for r in figures['churn'])} s); RSS slope over the "
            "rounds after the first, KiB per 1,000 workloads seen:"
        )
        for name, s in figures["services"].items():
            after = ", ".join(str(k) for k in s["rss_after_churn_rounds_kib"])
            print(
                f"    {name:<15} {s['churn_rss_slope_kib_per_1000_workloads']} "
                f"(RSS after each round: {after} KiB)"
            )
        kinds = figures["decisions_after_churn"].items()
        print("  decisions after the churn: " + ", ".join(f"{n} {kind}" for kind, n in kinds))
    for stream, size in figures["streams"].items():
        print(f"  {stream}: {size['messages']} messages, {size['mib']} MiB")
    print("  decisions: " + ", ".join(f"{n} {kind}" for kind, n in figures["decisions"].items()))
    print(f"  load average {figures['load_avg_1m']} on {figures['cpus']} cpus")
    return 0


if __name__ == "__main__":
    sys.exit(main())
