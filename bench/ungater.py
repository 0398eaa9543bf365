"""Benchmark of the ungater: slot planning, and pods released per second end to end.

    python bench/ungater.py [--json] [--out FILE] [--pods 1024] [--hosts 128]
                            [--concurrency 16] [--qps 0]

Times :func:`tidegate.policy.slots.plan_podset` for ``--pods`` gated pods over ``--hosts``
hosts, then, with a simulated cluster (no scheduler or kubelets), a throwaway nats-server and
the real watcher and ungater in this process, the time from one admitted decision until the
API server holds all ``--pods`` pods released. Measurements, never assertions.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tidegate.bus import BusSettings, connect
from tidegate.bus.server import NatsServerProcess
from tidegate.kube import JOBS, NAMESPACES, KubeSettings
from tidegate.kube import connect as connect_kube
from tidegate.model import Admitted, DomainCount, Envelope, TopologyAssignment, subjects
from tidegate.model.pods import admission_gated
from tidegate.policy.slots import Member, plan_podset
from tidegate.runtime import Service
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.kinds import PODS as SIM_PODS
from tidegate.ungater.app import setup as ungater_setup
from tidegate.ungater.config import UngaterSettings
from tidegate.watcher.app import setup as watcher_setup
from tidegate.watcher.config import WatcherSettings

LEVELS = ["tidegate.io/block", "tidegate.io/rack", "kubernetes.io/hostname"]


def planning_ms(pods: int, hosts: int) -> float:
    """Median time of one plan: half the pods released, half to place."""
    per_host = max(pods // hosts, 1)
    domains = [
        DomainCount(values=["b0", f"r{h // 16}", f"h{h}"], count=per_host) for h in range(hosts)
    ]
    assignment = TopologyAssignment(levels=LEVELS, domains=domains)
    members = []
    for rank in range(pods):
        domain = domains[min(rank // per_host, hosts - 1)].values
        released = rank % 2 == 0
        members.append(
            Member(
                uid=f"u{rank}",
                name=f"p{rank}",
                rank=rank,
                gated=not released,
                node_selector=dict(zip(LEVELS, domain, strict=True)) if released else {},
            )
        )
    times = []
    for _ in range(20):
        started = time.perf_counter()
        plan_podset(assignment, members)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


async def release_rate(pods: int, hosts: int, concurrency: int, qps: float) -> dict[str, Any]:
    """Pods per second released end to end (module docstring)."""
    racks = max(hosts // 8, 1)
    layout = f"1x{racks}x{max(hosts // racks, 1)}x8gpu"
    settings = SimSettings(nodes=layout, scheduler=False, kubelet=False, admission_gate=True)
    cluster = "bench"
    with (
        tempfile.TemporaryDirectory() as scratch,
        NatsServerProcess(store_dir=Path(scratch)) as nats,
    ):
        async with SimCluster.running(settings) as sim:
            kubeconfig = sim.write_kubeconfig(Path(scratch) / "kubeconfig")
            kube = await connect_kube(KubeSettings(kubeconfig=kubeconfig, qps=0))
            bus = await connect(BusSettings(servers=(nats.url,)))
            await bus.ensure_layout(cluster)
            await kube.create(NAMESPACES, {"metadata": {"name": "team"}})
            common: dict[str, Any] = {
                "cluster": cluster,
                "nats_url": nats.url,
                "http_port": 0,
                "kubeconfig": kubeconfig,
                "log_level": "ERROR",
            }
            services: list[Service[Any]] = [
                Service(
                    "watcher",
                    WatcherSettings(**common, kueue_topology_version="v1alpha1"),
                    watcher_setup,
                ),
                Service(
                    "ungater",
                    UngaterSettings(
                        **common,
                        webhook="off",
                        batch_window_seconds=0.05,
                        max_concurrent_patches=concurrency,
                        kube_qps=qps,
                    ),
                    ungater_setup,
                ),
            ]
            tasks = [asyncio.create_task(s.run(handle_signals=False)) for s in services]
            for service in services:
                await _until(partial(_ready, service))
            job: dict[str, Any] = dict(await kube.create(JOBS, _job(pods), namespace="team"))
            await _until(lambda: sum(_pods(sim).values()) >= pods)
            await asyncio.sleep(2.0)  # let the watcher publish every pod
            hosts_list = [node.labels for node in sim.layout.nodes[:hosts]]
            per_host = -(-pods // len(hosts_list))
            domains = [
                DomainCount(values=[labels[level] for level in LEVELS], count=per_host)
                for labels in hosts_list
            ]
            body = Admitted(
                workload="team/bench",
                uid=job["metadata"]["uid"],
                queue="q",
                sequence=1,
                epoch=1,
                assignments={"main": TopologyAssignment(levels=sim.levels, domains=domains)},
            )
            started = time.perf_counter()
            await bus.publish(
                subjects.decision(cluster, "admitted", "team", "bench"),
                Envelope(
                    event_id=uuid.uuid4().hex,
                    cluster=cluster,
                    source="bench",
                    time=time.time(),
                    body=body,
                ),
            )
            await _until(lambda: not any(_pods(sim).values()), interval=0.01)
            seconds = time.perf_counter() - started
            for service in services:
                service.request_stop()
            await asyncio.gather(*tasks)
            await bus.drain()
            await kube.close()
    return {
        "pods": pods,
        "hosts": hosts,
        "seconds": round(seconds, 3),
        "pods_per_s": round(pods / seconds, 1),
    }


def _ready(service: Service[Any]) -> bool:
    return service.started.is_set() and service.readiness.ready


async def _until(check: Callable[[], bool], *, interval: float = 0.05) -> None:
    """Poll ``check`` until it holds."""
    while True:
        if check():
            return
        await asyncio.sleep(interval)


def _job(pods: int) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bench"},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": {"tidegate.io/queue": "q"}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def _pods(sim: SimCluster) -> dict[str, bool]:
    """uid → still gated, for every pod in the store."""
    out: dict[str, bool] = {}
    for pod in sim.store.objects(SIM_PODS.key):
        metadata: Any = pod["metadata"]
        spec: Any = pod["spec"]
        gates = [str(g.get("name")) for g in spec.get("schedulingGates") or []]
        out[str(metadata["uid"])] = admission_gated(gates)
    return out


def main() -> None:
    """Run both measurements and print (or write) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--pods", type=int, default=1024)
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--qps", type=float, default=0.0)
    args = parser.parse_args()
    result = {
        "planning_ms": round(planning_ms(args.pods, args.hosts), 3),
        "release": asyncio.run(release_rate(args.pods, args.hosts, args.concurrency, args.qps)),
        "concurrency": args.concurrency,
        "qps": args.qps,
        "load_average": os.getloadavg(),
        "python": sys.version.split()[0],
    }
    text = json.dumps(result, indent=None if args.json else 2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
