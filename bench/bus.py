"""Benchmark of JetStream publishing (awaited and asynchronous), durable consuming and a state
follower's replay.

    python bench/bus.py [--awaited 2000] [--async-messages 30000] [--in-flight 4096]
                        [--follow 20000] [--json] [--out FILE]

Starts a throwaway nats-server with file storage and one cluster's streams, then measures
``Bus.publish`` one message at a time, ``Publisher`` with up to ``--in-flight``
unacknowledged, a durable consumer reading them back, and a ``StateFollower`` replaying
``--follow`` pod states. Prints messages per second for each (and the follower's CPU per
message); measurements, never assertions. Quick (a few seconds).
"""

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

from tidegate.bus import (
    Bus,
    BusSettings,
    ConsumerSettings,
    DurableConsumer,
    Publisher,
    connect,
    layout,
)
from tidegate.bus.server import NatsServerProcess
from tidegate.model import DomainCount, Envelope, TopologyAssignment, codec, subjects
from tidegate.model.events import Admitted, PodState
from tidegate.testing.bus import counting, envelope, following

CLUSTER = "bench"


def decision(index: int) -> Envelope:
    """A realistic admitted decision."""
    return envelope(
        CLUSTER,
        Admitted(
            workload=f"team-a/job-{index}",
            uid=f"uid-{index}",
            queue="training",
            sequence=index,
            epoch=1,
            assignments={
                "workers": TopologyAssignment(
                    levels=["example.com/block", "example.com/rack"],
                    domains=[DomainCount(values=["b1", "r7"], count=8)],
                )
            },
            charged={"cpu": 8000, "nvidia.com/gpu": 8},
        ),
        event_id=f"bench-{index}",
        source="bench",
    )


async def measure(
    url: str, awaited: int, async_messages: int, in_flight: int, follow_messages: int
) -> dict[str, float]:
    bus = await connect(BusSettings(servers=(url,), wait_for_server_seconds=10))
    await bus.ensure_layout(CLUSTER)

    def subject(index: int) -> str:
        # One workload's: the decision stream keeps the newest 64 decisions of each subject.
        return subjects.decision(CLUSTER, "admitted", "team-a", f"job-{index}")

    started = time.perf_counter()
    for index in range(awaited):
        await bus.publish(subject(index), decision(index))
    awaited_seconds = time.perf_counter() - started

    started = time.perf_counter()
    async with Publisher(bus, max_in_flight=in_flight) as publisher:
        for index in range(awaited, awaited + async_messages):
            await publisher.submit(subject(index), decision(index))
        await publisher.flush(timeout_seconds=60)
    async_seconds = time.perf_counter() - started

    total = awaited + async_messages
    handle, done = counting(total)
    consumer = DurableConsumer(
        bus,
        cluster=CLUSTER,
        settings=ConsumerSettings(
            durable="bench",
            stream=layout.decisions_stream(CLUSTER),
            subjects=(subjects.decision_wildcard(CLUSTER),),
            batch_size=256,
            fetch_timeout_seconds=0.5,
        ),
        handler=handle,
    )
    started = time.perf_counter()
    await asyncio.wait_for(consumer.run(done), timeout=120)
    consume_seconds = time.perf_counter() - started
    follow_seconds, follow_cpu = await follow(bus, follow_messages, in_flight)
    await bus.drain()
    return {
        "awaited_messages": awaited,
        "awaited_msgs_per_s": round(awaited / awaited_seconds),
        "async_messages": async_messages,
        "async_in_flight": in_flight,
        "async_msgs_per_s": round(async_messages / async_seconds),
        "consume_messages": total,
        "consume_msgs_per_s": round(total / consume_seconds),
        "message_bytes": len(codec.encode(decision(0))),
        "follow_messages": follow_messages,
        "follow_msgs_per_s": round(follow_messages / follow_seconds),
        "follow_cpu_us_per_msg": round(follow_cpu / follow_messages * 1e6, 1),
    }


def pod_state(index: int) -> Envelope:
    """A running pod's state, as the watcher publishes it."""
    return envelope(
        CLUSTER,
        PodState(
            namespace="team-a",
            name=f"pod-{index}",
            uid=f"uid-{index}",
            node_name=f"node-{index % 1024}",
            phase="Running",
            requests={"cpu": 8000, "nvidia.com/gpu": 8},
            workload=f"team-a/job-{index // 8}",
            podset="main",
            rank=index % 8,
        ),
        event_id=f"pod-{index}",
        source="bench",
    )


async def follow(bus: Bus, count: int, in_flight: int) -> tuple[float, float]:
    """Publish ``count`` pod states on their own subjects, then replay them with a
    :class:`StateFollower` (how every service rebuilds its view); (seconds, CPU seconds of
    this process) of the replay."""
    async with Publisher(bus, max_in_flight=in_flight) as publisher:
        for index in range(count):
            await publisher.submit(
                subjects.pod(CLUSTER, "team-a", f"pod-{index}"), pod_state(index)
            )
        await publisher.flush(timeout_seconds=60)
    handle, done = counting(count)
    cpu_before = time.process_time()
    started = time.perf_counter()
    async with following(
        bus, stream=layout.state_stream(CLUSTER), subjects=[f"tg.{CLUSTER}.pod.>"], handler=handle
    ):
        await asyncio.wait_for(done.wait(), timeout=120)
    return time.perf_counter() - started, time.process_time() - cpu_before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--awaited", type=int, default=2000, help="messages published one by one")
    parser.add_argument(
        "--async-messages", type=int, default=30000, help="messages published asynchronously"
    )
    parser.add_argument(
        "--in-flight", type=int, default=4096, help="async publishes awaiting ack, at most"
    )
    parser.add_argument(
        "--follow", type=int, default=20000, help="pod states replayed by a StateFollower"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args()
    with NatsServerProcess() as server:
        result = asyncio.run(
            measure(server.url, args.awaited, args.async_messages, args.in_flight, args.follow)
        )
    result |= {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
        # Other work on the machine lowers every figure; the load says how busy it was.
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    if args.json or args.out:
        text = json.dumps(result, indent=2)
        if args.json:
            print(text)
        if args.out:
            args.out.write_text(text + "\n")
    if not args.json:
        print(
            f"awaited publish : {result['awaited_msgs_per_s']:>8} msg/s ({args.awaited} messages)"
        )
        print(
            f"async publish   : {result['async_msgs_per_s']:>8} msg/s "
            f"({args.async_messages} messages, {args.in_flight} in flight)"
        )
        print(f"durable consume : {result['consume_msgs_per_s']:>8} msg/s (batches of 256, acked)")
        print(f"message size    : {result['message_bytes']} bytes")
        print(
            f"state follower  : {result['follow_msgs_per_s']:>8} msg/s, "
            f"{result['follow_cpu_us_per_msg']} µs of CPU a message "
            f"({args.follow} pod states replayed, this process: nats-py's reader included)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
