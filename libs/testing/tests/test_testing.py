"""The shared test support itself: waiting, in-process services, bus helpers, processes."""

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tidegate.bus import Received, layout
from tidegate.model import NodeState, subjects
from tidegate.runtime import Service, ServiceContext, ServiceSettings
from tidegate.testing import (
    RunningServices,
    connected,
    envelope,
    following,
    run_to_exit,
    service_process,
    start_until,
    until,
    until_async,
)


async def test_until_returns_once_the_check_holds_and_treats_assertions_as_not_yet() -> None:
    polls = 0

    def check() -> bool:
        nonlocal polls
        polls += 1
        assert polls >= 3, "not yet"
        return True

    await until(check, within=5, interval=0.001)
    assert polls == 3


async def test_until_times_out_naming_what_with_the_last_assertion_as_cause() -> None:
    def check() -> bool:
        raise AssertionError("still 2 pods")

    with pytest.raises(AssertionError, match="timed out waiting for the pods: 2 left") as failure:
        await until(check, within=0.05, interval=0.01, what="the pods", describe=lambda: ": 2 left")
    assert isinstance(failure.value.__cause__, AssertionError)
    assert str(failure.value.__cause__) == "still 2 pods"


async def test_until_fails_at_once_when_alive_raises() -> None:
    def dead() -> None:
        raise AssertionError("the service stopped with exit code 1")

    async with asyncio.timeout(1):
        with pytest.raises(AssertionError, match="exit code 1"):
            await until(lambda: False, within=60, alive=dead)


async def test_until_async_returns_the_first_truthy_result() -> None:
    results = iter([None, [], ["pod"]])

    async def check() -> list[str] | None:
        return next(results)

    assert await until_async(check, within=5, interval=0.001) == ["pod"]


async def test_start_until_returns_the_task_once_ready_and_raises_what_ended_it_first() -> None:
    ready = asyncio.Event()
    stop = asyncio.Event()

    async def works() -> None:
        ready.set()
        await stop.wait()

    task = await start_until(works(), ready, within=5, what="the worker")
    assert not task.done()
    stop.set()
    await task

    async def fails() -> None:
        raise RuntimeError("no API server")

    with pytest.raises(RuntimeError, match="no API server"):
        await start_until(fails(), asyncio.Event(), within=5, what="the worker")

    async def hangs() -> None:
        await asyncio.Event().wait()

    with pytest.raises(AssertionError, match="the worker did not become ready"):
        await start_until(hangs(), asyncio.Event(), within=0.05, what="the worker")


async def test_running_services_start_notice_an_unasked_stop_and_stop_gracefully(
    nats_url: str, cluster_id: str
) -> None:
    crash = asyncio.Event()

    async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
        async def crash_on_demand() -> None:
            await crash.wait()
            raise RuntimeError("boom")

        ctx.spawn("crash", crash_on_demand())

    settings = ServiceSettings(cluster=cluster_id, nats_url=nats_url, http_port=0)
    services = RunningServices(ready_within=20)
    steady = Service("steady", settings, setup)
    fragile = Service("fragile", settings, setup)
    await services.start(steady)
    await services.start(fragile)
    services.check()
    assert await services.stop(steady) == 0
    with pytest.raises(AssertionError, match="steady is not running"):
        await services.stop(steady)
    crash.set()
    with pytest.raises(AssertionError, match="fragile stopped with exit code 1"):
        await until(lambda: False, within=10, alive=services.check)
    await services.stop_all()
    assert services.running == []


async def test_connected_and_following_see_what_a_test_publishes(
    nats_url: str, cluster_id: str
) -> None:
    seen: list[str] = []

    async def remember(received: Received) -> None:
        seen.append(received.envelope.event_id)

    async with connected(nats_url, cluster_id, name="testing-test") as bus:
        first = envelope(cluster_id, NodeState(name="n1"))
        await bus.publish(subjects.node(cluster_id, "n1"), first)
        async with following(
            bus,
            stream=layout.state_stream(cluster_id),
            subjects=subjects.state_wildcards(cluster_id),
            handler=remember,
            replayed_within=5,
        ):
            assert seen == [first.event_id]
            second = envelope(cluster_id, NodeState(name="n2"), event_id="mine")
            await bus.publish(subjects.node(cluster_id, "n2"), second)
            await until(lambda: seen == [first.event_id, "mine"], within=5)
    assert first.source == "test"
    assert first.cluster == cluster_id
    assert first.event_id != "mine"


async def test_a_service_process_is_ready_serves_metrics_and_stops_on_sigterm(
    nats_url: str, cluster_id: str, tmp_path: Path
) -> None:
    settings = {"TIDEGATE_CLUSTER": cluster_id, "TIDEGATE_NATS_URL": nats_url}
    async with (
        service_process("topology_cache", settings, logs=tmp_path) as process,
        aiohttp.ClientSession() as http,
    ):
        await process.ready(http)
        assert "tidegate_ready 1.0" in await process.metrics(http)
        process.signal()
        assert await process.wait() == 0
    assert "topology-cache" in process.log_tail()


async def test_a_process_that_dies_early_fails_the_wait_quoting_its_log(tmp_path: Path) -> None:
    settings = {"TIDEGATE_COALESCE_SECONDS": "soon"}
    async with (
        service_process("topology_cache", settings, logs=tmp_path) as process,
        aiohttp.ClientSession() as http,
    ):
        with pytest.raises(AssertionError, match=r"topology_cache exited with 2:\n.*soon"):
            await process.ready(http)
    code, stderr = await run_to_exit("topology_cache", settings)
    assert code == 2
    assert "TIDEGATE_COALESCE_SECONDS: 'soon' is not a number" in stderr
