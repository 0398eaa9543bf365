"""Two ungater replicas against the same decisions: one releases, the other stands by and takes
over; per domain the API server never holds more released pods than assigned."""

import contextlib
import signal
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp

from tidegate.runtime import Service
from tidegate.testing import ServiceProcess, service_process, until_async
from tidegate.ungater.app import setup as ungater_setup

from .conftest import Env, gated, index_of


def released_count(service: Service[Any]) -> float:
    value = service.metrics.registry.get_sample_value("tidegate_ungater_pods_released_total")
    return value or 0.0


async def test_two_replicas_release_from_one_and_never_more_than_assigned(env: Env) -> None:
    # Slow releases (one write at a time, few per second), so the handover lands mid-way.
    slow = {"max_concurrent_patches": 1, "kube_qps": 6.0, "kube_burst": 1, "lease_ttl_seconds": 2}
    replicas = {
        name: await env.start(name, env.ungater_settings(**slow), ungater_setup)
        for name in ("ungater-a", "ungater-b")
    }
    job = await env.job("pair", 16)
    hosts = [env.host(rack, node) for rack in (0, 1) for node in (0, 1)]
    await env.admit("team/pair", job["metadata"]["uid"], {"main": [(h, 4) for h in hosts]})

    async def some_released() -> bool:
        return len([p for p in await env.pods("job-name=pair") if not gated(p)]) >= 3

    await env.until_async(some_released, within=30, what="a few pods released")
    counts = {name: released_count(service) for name, service in replicas.items()}
    active = [name for name, count in counts.items() if count > 0]
    assert len(active) == 1, f"exactly one replica releases, not {counts}"

    # The releasing replica stops (a rolling update); the standby takes over and finishes.
    await env.stop(active[0])

    async def all_released() -> list[dict[str, Any]] | None:
        pods = await env.pods("job-name=pair")
        return pods if len(pods) == 16 and not any(gated(p) for p in pods) else None

    pods = await env.until_async(all_released, within=60, what="every pod released")
    (standby,) = [name for name in replicas if name != active[0]]
    assert released_count(replicas[standby]) > 0, "the standby took over"
    assert env.monitor.most == dict.fromkeys(hosts, 4)
    by_index = {index_of(p): p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in pods}
    assert sorted(by_index) == list(range(16))


async def leader_gauge(http: aiohttp.ClientSession, process: ServiceProcess) -> str:
    text = await process.metrics(http)
    (line,) = [x for x in text.splitlines() if x.startswith('tidegate_leader{role="ungater"}')]
    return line.split()[-1]


async def test_a_releaser_paused_past_its_lease_releases_nothing_when_it_wakes(
    env: Env, tmp_path: Path
) -> None:
    """SIGSTOP the releasing process past its lease TTL: the standby takes over and releases;
    the paused one, resumed, sends no write (its lease clock ran out) and exits 1."""
    settings = {
        "TIDEGATE_CLUSTER": env.cluster,
        "TIDEGATE_NATS_URL": env.nats_url,
        "TIDEGATE_KUBECONFIG": str(env.kubeconfig),
        "TIDEGATE_BATCH_WINDOW_SECONDS": "0.05",
        "TIDEGATE_LEASE_TTL_SECONDS": "2",
        "TIDEGATE_WEBHOOK": "off",
        "TIDEGATE_LOG_LEVEL": "INFO",
    }
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(aiohttp.ClientSession())
        processes: list[ServiceProcess] = []
        for instance in ("a", "b"):
            logs = tmp_path / instance
            logs.mkdir()
            process = await stack.enter_async_context(
                service_process("ungater", settings, logs=logs)
            )
            await process.ready(http, within=60)
            processes.append(process)

        async def one_leader() -> int | None:
            gauges = [await leader_gauge(http, p) for p in processes]
            return gauges.index("1.0") if sorted(gauges) == ["0.0", "1.0"] else None

        first = (
            await until_async(
                lambda: _not_none(one_leader()), within=30, what="one releasing replica"
            )
            - 1
        )
        paused, standby = processes[first], processes[1 - first]
        job = await env.job("paused", 2)
        await env.admit("team/paused", job["metadata"]["uid"], {"main": [(env.host(0, 2), 2)]})

        async def released(name: str, count: int) -> bool:
            pods = await env.pods(f"job-name={name}")
            return len(pods) == count and not any(gated(p) for p in pods)

        await env.until_async(lambda: released("paused", 2), within=30, what="the first job")

        paused.signal(signal.SIGSTOP)
        try:

            async def standby_leads() -> bool:
                return await leader_gauge(http, standby) == "1.0"

            await env.until_async(standby_leads, within=30, what="the standby taking over")
            later = await env.job("later", 2)
            await env.admit("team/later", later["metadata"]["uid"], {"main": [(env.host(1, 2), 2)]})
            await env.until_async(lambda: released("later", 2), within=30, what="the second job")
        finally:
            paused.signal(signal.SIGCONT)
        assert await paused.wait(within=60) == 1, "the deposed releaser exits"
        assert env.monitor.most == {env.host(0, 2): 2, env.host(1, 2): 2}


async def _not_none(value: Awaitable[int | None]) -> int | None:
    found = await value
    return None if found is None else found + 1  # 0 is a valid index: make it truthy
