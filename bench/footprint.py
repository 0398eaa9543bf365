"""Benchmark of each service's memory and start-up replay with a large cluster mirrored on the bus.

    python bench/footprint.py [--nodes 16384] [--pods 100000] [--managed-jobs 50]
                              [--json] [--out FILE]

Sizing the Deployments needs each service's resident memory as a function of the cluster it
mirrors, and how long a restarted service takes to replay the streams before it is ready. This
runs tidegate as in production on one machine (:class:`tidegate.cli.stack.LocalStack`: a
nats-server, the five services as processes, the simulated cluster with its control plane in
this process; racks of 32 nodes of 8 GPUs, blocks of 8 racks), then:

1. **nodes only**: once every service is ready on the empty cluster of ``--nodes`` nodes, each
   service's resident memory (``VmRSS`` from ``/proc``): base + per-node cost.
2. **pods**: ``--pods`` pods (Jobs of 1,000 pods of 100m CPU in a namespace tidegate does not
   manage, so they are neither gated nor admitted: the cluster's other tenants) are created,
   scheduled and run, and mirrored; then ``--managed-jobs`` Jobs of 8 one-GPU pods go through
   the whole pipeline (queue, admission, ungating), so the ledger and the decision log are not
   empty. Once every
   pod runs and the watcher has published them all (the state stream holds at least one
   message per node and pod), the services settle for ``--settle`` seconds and each one's
   resident and peak memory are read again. Per pod = (loaded − nodes only) / pods.
3. **replay**: each service in turn is stopped (SIGTERM) and started again; the seconds until
   its ``/readyz`` answers (it replays the state and capacity streams first) and its resident
   memory once ready.

The streams' sizes (messages, bytes) are reported too. The memory model it supports is
``RSS ≈ base + a × nodes + b × pods`` per service: this run gives ``base + a × nodes`` (step 1)
and ``b`` (step 2); a second run at another ``--nodes`` separates ``base`` from ``a``.

Figures are measurements, never assertions. At full size (16,384 nodes, 100,000 pods) this needs
several GiB of memory and minutes; smoke it small first (``--nodes 256 --pods 2000``).
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from e2e import (  # type: ignore[import-not-found]
    JobSpec,
    node_shape,
    proc_figures,
    set_up,
)

from tidegate.bus import Bus, layout
from tidegate.cli.demo_trace import workload_object
from tidegate.cli.stack import SERVICES, LocalStack, StackSettings
from tidegate.kube import JOBS, NAMESPACES, KubeClient, KubeSettings
from tidegate.kube import connect as kube_connect
from tidegate.sim.kinds import PODS
from tidegate.testing import connected

CLUSTER = "footprint"
MANAGED = "bench"
TENANTS = "tenants"
PODS_PER_JOB = 1000


def rss(stack: LocalStack) -> dict[str, dict[str, float]]:
    """Each service's resident and peak memory and CPU seconds so far."""
    return {
        name: proc_figures(service.process.pid)
        for name, service in stack.processes.items()
        if service.process is not None and service.running
    }


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
        async with (
            LocalStack.running(settings) as stack,
            await kube_connect(
                KubeSettings(source="kubeconfig", kubeconfig=stack.kubeconfig, qps=0)
            ) as kube,
            connected(stack.nats_url, CLUSTER) as bus,
        ):
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
    for stream, size in figures["streams"].items():
        print(f"  {stream}: {size['messages']} messages, {size['mib']} MiB")
    print("  decisions: " + ", ".join(f"{n} {kind}" for kind, n in figures["decisions"].items()))
    print(f"  load average {figures['load_avg_1m']} on {figures['cpus']} cpus")
    return 0


if __name__ == "__main__":
    sys.exit(main())
