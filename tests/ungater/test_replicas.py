"""Two ungater replicas against the same decisions: one releases, the other stands by and takes
over while releases are in flight; the API server never holds more released pods in a domain
than it was assigned, though more gated pods than slots wait."""

import contextlib
import signal
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, cast

import aiohttp

from tidegate.kube.ungate import has_gate
from tidegate.model.names import ADMISSION_GATE
from tidegate.runtime import Service
from tidegate.sim.kinds import PODS as SIM_PODS
from tidegate.sim.store import WatchEvent
from tidegate.testing import ServiceProcess, service_process, until_async
from tidegate.ungater.app import setup as ungater_setup

from .conftest import Domain, Env, gated

HOSTNAME = "kubernetes.io/hostname"


def released_count(service: Service[Any]) -> float:
    value = service.metrics.registry.get_sample_value("tidegate_ungater_pods_released_total")
    return value or 0.0


def holding(pods: list[dict[str, Any]]) -> Counter[str]:
    """Host → pods of ``pods`` released there that hold a slot (not gated, not leaving)."""
    return Counter(
        p["spec"]["nodeSelector"][HOSTNAME]
        for p in pods
        if not gated(p) and not p["metadata"].get("deletionTimestamp")
    )


async def test_a_handover_mid_release_fills_each_slot_once(env: Env) -> None:
    """20 gated pods for 16 slots; the releasing replica stops while the bus lags its releases
    (the watcher is down) and the slots are re-ordered; the standby finishes: 4 per host and
    16 pods ever released, from the API server's pods."""
    # Slow releases (one write at a time, few per second), so the handover lands mid-way.
    slow = {"max_concurrent_patches": 1, "kube_qps": 6.0, "kube_burst": 1, "lease_ttl_seconds": 2}
    replicas = {
        name: await env.start(name, env.ungater_settings(**slow), ungater_setup)
        for name in ("ungater-a", "ungater-b")
    }
    ever: set[str] = set()  # every pod the API server ever held released

    def on_pod(event: WatchEvent) -> None:
        pod = cast(dict[str, Any], event.obj)
        if not has_gate(pod, ADMISSION_GATE):
            ever.add(str(pod["metadata"]["uid"]))

    unsubscribe = env.sim.store.subscribe(SIM_PODS.key, on_pod)
    try:
        job = await env.job("pair", 20)
        hosts: list[Domain] = [env.host(rack, node) for rack in (0, 1) for node in (0, 1)]

        async def all_gated() -> bool:
            return len([p for p in await env.pods("job-name=pair") if gated(p)]) == 20

        await env.until_async(all_gated, within=30, what="20 gated pods")
        uid = job["metadata"]["uid"]
        first = await env.admit("team/pair", uid, {"main": [(h, 4) for h in hosts]})

        async def released_at_least(count: int) -> int | None:
            pods = await env.pods("job-name=pair")
            released = sum(holding(pods).values())
            return released if released >= count else None

        await env.until_async(lambda: released_at_least(3), within=30, what="a few released")
        counts = {name: released_count(service) for name, service in replicas.items()}
        active = [name for name, count in counts.items() if count > 0]
        assert len(active) == 1, f"exactly one replica releases, not {counts}"

        # The bus stops following the API server: releases sent from now on are in flight
        # (not on the bus) when the releasing replica stops and the standby takes over.
        await env.stop("watcher")
        before = await env.until_async(lambda: released_at_least(1), what="the API's pods")
        await env.until_async(
            lambda: released_at_least(before + 1), within=30, what="a release the bus misses"
        )
        # Admission moves the slots around (same hosts, another order): the standby's rank →
        # slot mapping differs from the one the in-flight releases followed.
        order = [(h, 4) for h in reversed(hosts)]
        await env.admit("team/pair", uid, {"main": order}, replaces=first.sequence)
        await env.stop(active[0])
        (standby,) = [name for name in replicas if name != active[0]]
        assert sum(holding(await env.pods("job-name=pair")).values()) < 16, "handover mid-way"
        await env.until(
            lambda: released_count(replicas[standby]) > 0, within=30, what="the standby releasing"
        )
        await env.start_watcher()

        async def settled() -> list[dict[str, Any]] | None:
            pods = await env.pods("job-name=pair")
            return pods if sum(holding(pods).values()) >= 16 else None

        await env.until_async(settled, within=60, what="every slot filled")
        await env.until(
            lambda: env.monitor.most.keys() >= set(hosts), within=10, what="the monitor"
        )
        pods = await env.pods("job-name=pair")
    finally:
        unsubscribe()
    by_host = holding(pods)
    assert by_host == {h[-1]: 4 for h in hosts}, "each host holds its 4 slots, no more"
    assert len([p for p in pods if gated(p)]) == 4, "the pods beyond the slots stay gated"
    assert len(ever) == 16, f"each slot was filled once: {len(ever)} pods ever released"
    assert env.monitor.most == dict.fromkeys(hosts, 4)


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
