"""A service over real NATS and real HTTP: health, readiness after replay, metrics, stop."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

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


async def until(check: Callable[[], bool]) -> None:
    """Poll ``check`` until it holds (callers bound the wait with a timeout)."""
    while True:
        if check():
            return
        await asyncio.sleep(0.02)


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
    assert not service.readiness.ready, "a service that has not started is not ready"
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


async def test_one_leader_a_ready_standby_and_a_handover_on_graceful_stop(
    nats_url: str, cluster_id: str, http: aiohttp.ClientSession
) -> None:
    epochs: dict[str, int] = {}
    leading: dict[str, asyncio.Event] = {"a": asyncio.Event(), "b": asyncio.Event()}

    def setup_for(name: str) -> Callable[[ServiceContext[ServiceSettings]], Awaitable[None]]:
        async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
            lease = await ctx.lead("decider", ttl_seconds=30)
            epochs[name] = lease.epoch
            leading[name].set()

        return setup

    settings = ServiceSettings(cluster=cluster_id, nats_url=nats_url, http_port=0)
    first = Service("a", settings, setup_for("a"))
    second = Service("b", settings, setup_for("b"))
    running_first = asyncio.create_task(first.run(handle_signals=False))
    async with asyncio.timeout(20):
        await leading["a"].wait()
        running_second = asyncio.create_task(second.run(handle_signals=False))
        await second.started.wait()
        assert second.http_port
        status, _ = await get(http, second.http_port, "/readyz")
        while status != 200:  # the standby is ready: its view is complete, it just does not lead
            await asyncio.sleep(0.02)
            status, _ = await get(http, second.http_port, "/readyz")
        _, metrics = await get(http, second.http_port, "/metrics")
        assert 'tidegate_leader{role="decider"} 0.0' in metrics
        assert not leading["b"].is_set()

        first.request_stop()  # releases the lease: no need to wait out the 30 s TTL
        assert await running_first == 0
        await leading["b"].wait()
        assert epochs["b"] > epochs["a"]
        _, metrics = await get(http, second.http_port, "/metrics")
        assert 'tidegate_leader{role="decider"} 1.0' in metrics
        second.request_stop()
        assert await running_second == 0


@asynccontextmanager
async def leader_holding(role: str, settings: ServiceSettings) -> AsyncIterator[None]:
    """A service ``leader`` that holds the lease ``role`` while the block runs."""
    ready = asyncio.Event()

    async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
        await ctx.lead(role, ttl_seconds=30)
        ready.set()

    leader = Service("leader", settings, setup)
    running = asyncio.create_task(leader.run(handle_signals=False))
    await ready.wait()
    try:
        yield
    finally:
        leader.request_stop()
        assert await running == 0


async def test_a_standby_stops_cleanly_while_waiting_for_the_lease(
    nats_url: str, cluster_id: str
) -> None:
    async def standby_setup(ctx: ServiceContext[ServiceSettings]) -> None:
        await ctx.lead("decider", ttl_seconds=30)
        raise AssertionError("the standby must not become leader here")

    settings = ServiceSettings(cluster=cluster_id, nats_url=nats_url, http_port=0)
    standby = Service("standby", settings, standby_setup)
    async with asyncio.timeout(20), leader_holding("decider", settings):
        running_standby = asyncio.create_task(standby.run(handle_signals=False))
        await standby.started.wait()
        await until(lambda: standby.readiness.ready)
        standby.request_stop()
        assert await running_standby == 0


async def test_a_lease_awaited_by_a_spawned_task_does_not_make_a_running_setup_ready(
    nats_url: str, cluster_id: str
) -> None:
    """The ungater's pattern: setup spawns the task that waits for the lease and goes on
    registering work (its webhook). While that task is a standby the setup is not done, so
    the service must not report ready: a CI run once called the webhook before it listened."""
    go_on = asyncio.Event()
    contexts: list[ServiceContext[ServiceSettings]] = []
    registered = False

    async def waits_for_lease(ctx: ServiceContext[ServiceSettings]) -> None:
        await ctx.lead("releaser", ttl_seconds=30)

    async def spawning_setup(ctx: ServiceContext[ServiceSettings]) -> None:
        nonlocal registered
        contexts.append(ctx)
        ctx.spawn("lead", waits_for_lease(ctx))
        await go_on.wait()  # as the ungater awaits a consumer's creation
        ctx.require("late", lambda: True)
        registered = True

    settings = ServiceSettings(cluster=cluster_id, nats_url=nats_url, http_port=0)
    spawning = Service("spawning", settings, spawning_setup)
    async with asyncio.timeout(20), leader_holding("releaser", settings):
        running_spawning = asyncio.create_task(spawning.run(handle_signals=False))
        await until(lambda: bool(contexts) and contexts[0].standby)
        await asyncio.sleep(0.1)
        assert not spawning.readiness.ready, "ready before its setup returned"
        go_on.set()
        await until(lambda: spawning.readiness.ready)
        assert registered
        spawning.request_stop()
        assert await running_spawning == 0


async def test_a_failed_leader_releases_its_lease_so_a_standby_takes_over_at_once(
    nats_url: str, cluster_id: str
) -> None:
    holders: dict[str, str] = {}
    successor_leads = asyncio.Event()

    async def crash() -> None:
        raise RuntimeError("the leader's work failed")

    async def failing_setup(ctx: ServiceContext[ServiceSettings]) -> None:
        lease = await ctx.lead("decider", ttl_seconds=30, holder="first")
        holders["failed"] = lease.settings.holder
        ctx.spawn("work", crash())

    async def successor_setup(ctx: ServiceContext[ServiceSettings]) -> None:
        lease = await ctx.lead("decider", ttl_seconds=30)
        holders["successor"] = lease.settings.holder
        successor_leads.set()

    settings = ServiceSettings(cluster=cluster_id, nats_url=nats_url, http_port=0)
    failing = Service("failing", settings, failing_setup)
    successor = Service("successor", settings, successor_setup)
    async with asyncio.timeout(20):
        assert await failing.run(handle_signals=False) == 1
        running_successor = asyncio.create_task(successor.run(handle_signals=False))
        # Well within the 30 s TTL: the failed leader released the lease on its way out.
        await successor_leads.wait()
        successor.request_stop()
        assert await running_successor == 0
    assert holders["failed"] == "first"
    assert holders["successor"] != "first"
