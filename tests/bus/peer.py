"""A separate process on the bus, for the cross-process tests in this directory.

    python peer.py publish URL CLUSTER EVENT_ID   publish one decision inside a span
    python peer.py consume URL CLUSTER COUNT      handle COUNT decisions with a durable consumer
    python peer.py service                        a runtime Service configured by TIDEGATE_* env

Spans go to the file named by TIDEGATE_TRACE_FILE. The service appends the event id of every
message it finished handling to TIDEGATE_OUTPUT_FILE, after sleeping
TIDEGATE_HANDLER_DELAY_SECONDS (a slow handler, to stop in the middle of a batch).
"""

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tidegate.bus import BusSettings, ConsumerSettings, DurableConsumer, Received, connect, layout
from tidegate.model import Envelope, Released, subjects
from tidegate.runtime import ServiceContext, ServiceSettings, run_service
from tidegate.telemetry import setup_tracing, shutdown_tracing
from tidegate.testing.bus import counting


def decision_consumer(cluster: str, *, batch_size: int = 10) -> ConsumerSettings:
    return ConsumerSettings(
        durable="peer",
        stream=layout.decisions_stream(cluster),
        subjects=(subjects.decision_wildcard(cluster),),
        batch_size=batch_size,
        fetch_timeout_seconds=0.2,
    )


async def publish(url: str, cluster: str, event_id: str) -> None:
    bus = await connect(BusSettings(servers=(url,), wait_for_server_seconds=5))
    await bus.ensure_layout(cluster)
    envelope = Envelope(
        event_id=event_id,
        cluster=cluster,
        source="peer",
        time=time.time(),
        body=Released(workload="ns/w", uid="u", queue="q", reason="Completed"),
    )
    await bus.publish(subjects.decision(cluster, "released", "ns", "w"), envelope)
    await bus.drain()


async def consume(url: str, cluster: str, count: int) -> None:
    bus = await connect(BusSettings(servers=(url,), wait_for_server_seconds=5))
    await bus.ensure_layout(cluster)
    handle, stop = counting(count)
    consumer = DurableConsumer(
        bus, cluster=cluster, settings=decision_consumer(cluster), handler=handle
    )
    await asyncio.wait_for(consumer.run(stop), timeout=30)
    await bus.drain()


@dataclass(frozen=True, kw_only=True)
class PeerSettings(ServiceSettings):
    output_file: Path = Path("handled.txt")
    handler_delay_seconds: float = 0.0
    batch_size: int = 3


async def setup(ctx: ServiceContext[PeerSettings]) -> None:
    async def handle(message: Received) -> None:
        await asyncio.sleep(ctx.settings.handler_delay_seconds)
        with ctx.settings.output_file.open("a") as output:
            output.write(message.envelope.event_id + "\n")

    await ctx.consume(decision_consumer(ctx.cluster, batch_size=ctx.settings.batch_size), handle)


def main() -> None:
    command, *args = sys.argv[1:]
    if command == "service":
        run_service("peer", PeerSettings, setup)
    setup_tracing(f"peer-{command}")
    try:
        if command == "publish":
            asyncio.run(publish(args[0], args[1], args[2]))
        elif command == "consume":
            asyncio.run(consume(args[0], args[1], int(args[2])))
        else:
            raise SystemExit(f"unknown command {command}")
    finally:
        shutdown_tracing()


if __name__ == "__main__":
    main()
