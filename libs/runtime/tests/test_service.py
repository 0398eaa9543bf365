"""A service over real NATS and real HTTP: health, readiness after replay, metrics, stop."""

import asyncio
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tidegate.bus import BusSettings, ConsumerSettings, Received, connect, layout
from tidegate.model import Envelope, NodeState, subjects
from tidegate.runtime import Service, ServiceContext, ServiceSettings


def node_event(cluster: str, name: str, event_id: str) -> Envelope:
    return Envelope(
        event_id=event_id,
        cluster=cluster,
        source="test",
        time=time.time(),
        body=NodeState(name=name),
    )


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get(session: aiohttp.ClientSession, port: int, path: str) -> tuple[int, str]:
    async with session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text()


async def test_health_readiness_and_metrics_over_http(
    nats_url: str, cluster_id: str, http: aiohttp.ClientSession
) -> None:
    settings = ServiceSettings(cluster=cluster_id, nats_url=nats_url, http_port=0)
    warmed_up = asyncio.Event()
    nodes: list[str] = []
    decisions: list[str] = []
    decided = asyncio.Event()

    async def on_state(message: Received) -> None:
        body = message.envelope.body
        assert isinstance(body, NodeState)
        nodes.append(body.name)

    async def on_decision(message: Received) -> None:
        decisions.append(message.envelope.event_id)
        decided.set()

    async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
        # A node published before the service started must be replayed before it is ready.
        await ctx.bus.publish(subjects.node(ctx.cluster, "n1"), node_event(ctx.cluster, "n1", "e1"))
        await ctx.follow(
            "state",
            stream=layout.state_stream(ctx.cluster),
            subjects=subjects.state_wildcards(ctx.cluster),
            handler=on_state,
        )
        await ctx.consume(
            ConsumerSettings(
                durable="probe",
                stream=layout.decisions_stream(ctx.cluster),
                subjects=(subjects.decision_wildcard(ctx.cluster),),
                fetch_timeout_seconds=0.2,
            ),
            on_decision,
        )
        ctx.require("warm-up", warmed_up.is_set)

    service = Service("probe", settings, setup)
    running = asyncio.create_task(service.run(handle_signals=False))
    async with asyncio.timeout(15):
        await service.started.wait()
        assert service.http_port
        port = service.http_port
        status, body = await get(http, port, "/healthz")
        assert status == 200
        # Not ready while connecting, setting up and replaying; then only the warm-up is left.
        status, body = await get(http, port, "/readyz")
        while json.loads(body)["waiting_for"] != ["warm-up"]:
            assert status == 503
            await asyncio.sleep(0.02)
            status, body = await get(http, port, "/readyz")
        assert status == 503
        warmed_up.set()
        status, body = await get(http, port, "/readyz")
        assert (status, body) == (200, '{"status": "ready"}')
        assert nodes == ["n1"]

        decision_subject = subjects.decision(cluster_id, "released", "ns", "w")
        async with await connect(
            BusSettings(servers=(nats_url,), wait_for_server_seconds=5)
        ) as bus:
            await bus.publish(decision_subject, node_event(cluster_id, "w", "d1"))
        await decided.wait()
        status, body = await get(http, port, "/metrics")
        assert status == 200
        assert 'tidegate_build_info{service="probe"} 1.0' in body
        assert 'tidegate_state_replayed{follower="state"} 1.0' in body
        assert 'tidegate_bus_messages_handled_total{consumer="probe",outcome="ack"} 1.0' in body
        assert "tidegate_ready 1.0" in body

        service.request_stop()
        assert await running == 0
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(http, port, "/healthz")


async def test_a_failing_task_stops_the_service_with_exit_code_1(
    nats_url: str, cluster_id: str
) -> None:
    async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
        async def broken() -> None:
            raise RuntimeError("bug in a loop")

        async def forever() -> None:
            await asyncio.Event().wait()

        ctx.spawn("forever", forever())
        ctx.spawn("broken", broken())

    settings = ServiceSettings(cluster=cluster_id, nats_url=nats_url, http_port=0)
    async with asyncio.timeout(15):
        assert await Service("broken", settings, setup).run(handle_signals=False) == 1


async def test_a_stop_while_nats_is_unreachable_exits_cleanly(cluster_id: str) -> None:
    async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
        raise AssertionError("never connected, so never set up")

    settings = ServiceSettings(cluster=cluster_id, nats_url="nats://127.0.0.1:1", http_port=0)
    service = Service("lonely", settings, setup)
    running = asyncio.create_task(service.run(handle_signals=False))
    async with asyncio.timeout(15):
        await service.started.wait()
        await asyncio.sleep(0.3)
        service.request_stop()
        assert await running == 0
