"""Two ungater replicas against the same decisions: one releases, the other stands by and takes
over; per domain the API server never holds more released pods than assigned."""

from typing import Any

from tidegate.runtime import Service
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
