"""Benchmark of the simulated cluster at scale: nodes, pods, lists, watches, the control plane.

    python bench/sim.py [--nodes 10x20x50x8gpu] [--jobs 100] [--pods-per-job 1000]
                        [--watchers 4] [--json] [--out FILE]

Starts a SimCluster (10,000 nodes by default), creates ``--jobs`` Jobs of ``--pods-per-job``
pods that its controllers bind and start while ``--watchers`` processes follow every pod event
over HTTP, then lists and writes on the loaded cluster. Prints the times until every pod
exists, is bound and Running, the events each watcher received, list and create times;
measurements, never assertions.
"""

import argparse
import asyncio
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import aiohttp
import msgspec

from tidegate.sim import SimCluster, SimSettings

# Created last; the watcher processes stop when they see it. Without it they would be cut off
# at shutdown while still reading the tail of the stream, and under-count their events.
END_MARKER = "watch-end"
# A watcher process prints this once its watch is open; the pods are created only then (a
# watch opened later would see the pods that exist by then as one ADDED each, not every event).
WATCHING = "watching"


def rss_mib() -> float:
    """Peak resident memory of this process in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def count_pods(cluster: SimCluster, predicate: str) -> int:
    """Pods of the bench namespace that exist / are bound / are Running."""
    pods = cluster.store.objects(("", "pods"), "bench")
    if predicate == "exists":
        return cluster.store.count(("", "pods"), "bench")
    if predicate == "bound":
        return sum(1 for p in pods if p["spec"].get("nodeName"))  # type: ignore[union-attr]
    return sum(1 for p in pods if p["status"].get("phase") == "Running")  # type: ignore[union-attr]


async def wait_for(cluster: SimCluster, predicate: str, total: int, limit_seconds: float) -> float:
    """Seconds until ``total`` pods satisfy ``predicate``; NaN past the limit."""
    started = time.perf_counter()
    while await count_pods(cluster, predicate) < total:
        if time.perf_counter() - started > limit_seconds:
            return float("nan")
        await asyncio.sleep(0.5)
    return time.perf_counter() - started


async def follow(url: str) -> dict[str, int]:
    """Follow pod events like an informer until the server goes away (a watcher process).

    Resumes from the last resourceVersion when the server ends the stream, relists on 410.
    Returns once it has seen the ``END_MARKER`` pod created (the benchmark creates it after
    every other write), so the count covers every event, not what was read before shutdown.
    """
    counts = {"events": 0, "reconnects": 0, "relists": 0}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    last = "0"
    attempts = 0
    async with aiohttp.ClientSession(url, timeout=timeout) as http:
        while True:
            params = {"watch": "1", "resourceVersion": last, "allowWatchBookmarks": "true"}
            try:
                async with http.get("/api/v1/namespaces/bench/pods", params=params) as response:
                    if not attempts:
                        print(WATCHING, flush=True)
                    counts["reconnects"] += 1 if attempts else 0
                    attempts += 1
                    async for line in response.content:
                        event = msgspec.json.decode(line)
                        if event["type"] == "ERROR":
                            async with http.get("/api/v1/namespaces/bench/pods") as listing:
                                last = (await listing.json())["metadata"]["resourceVersion"]
                            counts["relists"] += 1
                            break
                        metadata = event["object"]["metadata"]
                        last = metadata["resourceVersion"]
                        if event["type"] == "ADDED" and metadata.get("name") == END_MARKER:
                            return counts
                        if event["type"] != "BOOKMARK":
                            counts["events"] += 1
            except aiohttp.ClientError:
                return counts


async def start_watchers(url: str, count: int) -> list[asyncio.subprocess.Process]:
    """Watcher processes (so their JSON decoding does not slow the server down), watching."""
    watchers = [
        await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--follow", url, stdout=asyncio.subprocess.PIPE
        )
        for _ in range(count)
    ]
    for watcher in watchers:
        assert watcher.stdout is not None
        line = await asyncio.wait_for(watcher.stdout.readline(), timeout=60)
        assert line.decode().strip() == WATCHING, line
    return watchers


async def run(args: argparse.Namespace) -> dict[str, object]:
    """Run every measurement; returns the figures."""
    result: dict[str, object] = {
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "topology": args.nodes,
    }
    started = time.perf_counter()
    settings = SimSettings(nodes=args.nodes, time_scale=1.0, bookmark_interval_seconds=60)
    async with SimCluster.running(settings) as cluster:
        result["populate_s"] = round(time.perf_counter() - started, 3)
        result["nodes"] = len(cluster.layout.nodes)
        async with aiohttp.ClientSession(cluster.url) as http:
            t0 = time.perf_counter()
            async with http.get("/api/v1/nodes") as response:
                body = await response.read()
            result["list_nodes_s"] = round(time.perf_counter() - t0, 3)
            result["list_nodes_mib"] = round(len(body) / 2**20, 1)
            async with http.post("/api/v1/namespaces", json={"metadata": {"name": "bench"}}) as r:
                assert r.status == 201, await r.text()
            watchers = await start_watchers(cluster.url, args.watchers)
            await asyncio.sleep(1.0)
            total = args.jobs * args.pods_per_job
            t0 = time.perf_counter()
            for i in range(args.jobs):
                job = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": f"job-{i}"},
                    "spec": {
                        "parallelism": args.pods_per_job,
                        "completions": args.pods_per_job,
                        "template": {
                            "metadata": {"labels": {"bench": f"job-{i}"}},
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "trainer",
                                        "resources": {"requests": {"cpu": "1"}},
                                    }
                                ],
                            },
                        },
                    },
                }
                async with http.post("/apis/batch/v1/namespaces/bench/jobs", json=job) as r:
                    assert r.status == 201, await r.text()
            limit = args.limit_seconds
            result["pods"] = total
            for stage in ("exists", "bound", "running"):
                waited = await wait_for(cluster, stage, total, limit)
                elapsed = time.perf_counter() - t0 if waited == waited else float("nan")
                result[f"pods_{stage}_after_s"] = round(elapsed, 2)
            await asyncio.sleep(1.0)
            result["resource_version"] = cluster.store.resource_version
            t0 = time.perf_counter()
            async with http.get("/api/v1/namespaces/bench/pods") as response:
                body = await response.read()
            result["list_pods_s"] = round(time.perf_counter() - t0, 3)
            result["list_pods_mib"] = round(len(body) / 2**20, 1)
            t0 = time.perf_counter()
            params = {"labelSelector": f"bench=job-{args.jobs - 1}", "limit": "500"}
            async with http.get("/api/v1/pods", params=params) as response:
                await response.read()
            result["list_selected_page_s"] = round(time.perf_counter() - t0, 3)
            latencies = []
            for i in range(args.single_writes):
                pod = {
                    "metadata": {"name": f"single-{i}"},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                }
                t1 = time.perf_counter()
                async with http.post("/api/v1/namespaces/bench/pods", json=pod) as r:
                    await r.read()
                latencies.append(time.perf_counter() - t1)
            latencies.sort()
            result["create_pod_p50_ms"] = round(latencies[len(latencies) // 2] * 1000, 2)
            result["create_pod_p99_ms"] = round(latencies[int(len(latencies) * 0.99)] * 1000, 2)
            await wait_for(cluster, "running", total + args.single_writes, limit)
            marker = {
                "metadata": {"name": END_MARKER},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            }
            async with http.post("/api/v1/namespaces/bench/pods", json=marker) as r:
                assert r.status == 201, await r.text()
            t0 = time.perf_counter()
            reading = [asyncio.ensure_future(w.communicate()) for w in watchers]
            await asyncio.wait(reading, timeout=limit)
            result["watch_drain_s"] = round(time.perf_counter() - t0, 2)
    follower_counts = [json.loads((await r)[0]) for r in reading]
    result["watch_events_per_watcher"] = [c["events"] for c in follower_counts]
    result["watch_reconnects_per_watcher"] = [c["reconnects"] for c in follower_counts]
    result["watch_relists_per_watcher"] = [c["relists"] for c in follower_counts]
    result["peak_rss_mib"] = round(rss_mib(), 1)
    return result


def main() -> int:
    """Parse options, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="10x20x50x8gpu", help="topology (default 10,000 nodes)")
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--pods-per-job", type=int, default=1000)
    parser.add_argument("--watchers", type=int, default=4)
    parser.add_argument("--single-writes", type=int, default=200)
    parser.add_argument("--limit-seconds", type=float, default=900.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object here")
    parser.add_argument("--follow", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.follow:
        print(json.dumps(asyncio.run(follow(args.follow))))
        return 0
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
