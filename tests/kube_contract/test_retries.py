"""Retries: 429 (with Retry-After), 5xx and dropped connections, through a fault proxy.

The proxy sits between the client and the target and fails the first N matching requests, so
these tests run the same against the simulator and a real API server.
"""

from pathlib import Path

import pytest

from tidegate.kube import PODS, Informer, KubeClient, ServerError, TooManyRequests, connect
from tidegate.testing.faultproxy import Cut, KubeFaultProxy, Refuse

from .conftest import CONTRACT_LABEL, GATE, ContractEnv
from .helpers import names, recording

pytestmark = pytest.mark.kube_contract


async def test_429_is_retried_after_the_servers_delay(
    env: ContractEnv, proxy: KubeFaultProxy, proxied: KubeClient
) -> None:
    await env.create_pod("p")
    proxy.arm("GET", "/pods/p", Refuse(429, retry_after="0"), times=2)
    pod = await proxied.get(PODS, "p", namespace=env.namespace)
    assert pod["metadata"]["name"] == "p"  # type: ignore[index]
    assert proxy.count("GET", "/pods/p") == 3


async def test_429_is_retried_even_for_creates(
    env: ContractEnv, proxy: KubeFaultProxy, proxied: KubeClient
) -> None:
    # 429 means the server did not act, so even a non-idempotent create is safe to resend.
    proxy.arm("POST", f"/namespaces/{env.namespace}/pods", Refuse(429))
    await proxied.create(PODS, env.pod("p"), namespace=env.namespace)
    assert proxy.count("POST", f"/namespaces/{env.namespace}/pods") == 2


async def test_5xx_is_retried_for_idempotent_calls_only(
    env: ContractEnv, proxy: KubeFaultProxy, proxied: KubeClient
) -> None:
    await env.create_pod("p")
    proxy.arm("PATCH", "/pods/p", Refuse(503), times=2)
    pod = await proxied.ungate_pod(env.namespace, "p", gate=GATE, node_selector={"r": "1"})
    assert pod["spec"].get("schedulingGates") is None  # type: ignore[union-attr]

    proxy.arm("POST", f"/namespaces/{env.namespace}/pods", Refuse(500))
    with pytest.raises(ServerError):
        await proxied.create(PODS, env.pod("q"), namespace=env.namespace)
    assert proxy.count("POST", f"/namespaces/{env.namespace}/pods") == 1


async def test_retries_give_up_after_max_attempts(
    env: ContractEnv, proxy: KubeFaultProxy, proxied: KubeClient
) -> None:
    proxy.arm("GET", "/pods/p", Refuse(429, retry_after="0"), times=10)
    with pytest.raises(TooManyRequests) as info:
        await proxied.get(PODS, "p", namespace=env.namespace)
    assert info.value.retry_after_seconds == 0
    assert proxy.count("GET", "/pods/p") == 4


async def test_dropped_connection_is_retried_for_reads(
    env: ContractEnv, proxy: KubeFaultProxy, proxied: KubeClient
) -> None:
    await env.create_pod("p")
    proxy.arm("GET", "/pods/p", Cut())
    pod = await proxied.get(PODS, "p", namespace=env.namespace)
    assert pod["metadata"]["name"] == "p"  # type: ignore[index]
    assert proxy.count("GET", "/pods/p") == 2


async def test_informer_rides_out_failing_lists_and_watches(
    env: ContractEnv, proxy: KubeFaultProxy, proxied: KubeClient
) -> None:
    await env.create_pod("a")
    proxy.arm("GET", "/pods", Refuse(503), times=2, query="limit=")
    informer = Informer(
        proxied, PODS, namespace=env.namespace, label_selector=f"{CONTRACT_LABEL}={env.run_id}"
    )
    proxy.arm("GET", "/pods", Refuse(500), times=2, query="watch=true")
    async with recording(informer) as rec:
        listed, _ = await rec.until_synced()
        assert names(listed) == ["a"]
        await env.create_pod("b")
        event = await rec.next_event()
        assert (event.type, event.key[1]) == ("ADDED", "b")
    assert proxy.count("GET", "/pods", query="watch=true") >= 3


async def test_http_410_on_a_watch_relists(
    env: ContractEnv, proxy: KubeFaultProxy, proxied: KubeClient
) -> None:
    # Real servers mostly say "too old" as a watch ERROR event; an HTTP 410 must work too.
    await env.create_pod("a")
    proxy.arm("GET", "/pods", Refuse(410), query="watch=true")
    informer = Informer(
        proxied, PODS, namespace=env.namespace, label_selector=f"{CONTRACT_LABEL}={env.run_id}"
    )
    async with recording(informer) as rec:
        first, _ = await rec.until_synced()
        assert names(first) == ["a"]
        again, synced = await rec.until_synced()
        assert synced.relist
        assert again == []  # nothing changed meanwhile: no events
        await env.create_pod("b")
        assert (await rec.next_event()).key[1] == "b"
    assert informer.relists == 1


async def test_expired_continue_token_restarts_the_list(
    env: ContractEnv, proxy: KubeFaultProxy, tmp_path: Path
) -> None:
    for index in range(5):
        await env.create_pod(f"p{index}")
    kubeconfig = proxy.write_kubeconfig(tmp_path / "paged-kubeconfig")
    async with await connect(env.settings(kubeconfig=kubeconfig, list_page_size=2)) as client:
        proxy.arm("GET", "/pods", Refuse(410), query="continue=")
        informer = Informer(
            client, PODS, namespace=env.namespace, label_selector=f"{CONTRACT_LABEL}={env.run_id}"
        )
        async with recording(informer) as rec:
            listed, synced = await rec.until_synced()
    assert sorted(names(listed)) == [f"p{i}" for i in range(5)]
    assert synced.count == 5
    assert not synced.relist
    # first page, the expired continuation, then three pages of a fresh list
    assert proxy.count("GET", "/pods", query="limit=2") == 5


class _DeposedError(Exception):
    """What a lease guard raises once its writer is no longer the leader."""


async def test_a_guarded_write_asks_its_guard_before_every_attempt_and_stops_when_it_refuses(
    env: ContractEnv, proxy: KubeFaultProxy, proxied: KubeClient
) -> None:
    # A leader's write held back by the rate limiter and the server's 429s must not land after
    # its lease: the guard is asked again before each retry, and its refusal ends the write.
    await env.create_pod("p")
    path = f"/namespaces/{env.namespace}/pods/p"
    proxy.arm("PATCH", path, Refuse(429, retry_after="0"), times=3)
    asked: list[str] = []

    def lease_guard() -> float:
        asked.append("write")
        if len(asked) > 2:
            raise _DeposedError("lease lost")
        return 30.0

    leader = proxied.guarded(lease_guard)
    with pytest.raises(_DeposedError):
        await leader.annotate(PODS, env.namespace, "p", {"example.com/by": "old-leader"})
    assert len(asked) == 3
    assert proxy.count("PATCH", path) == 2  # the third attempt was never sent
    pod = await proxied.get(PODS, "p", namespace=env.namespace)
    assert "example.com/by" not in pod["metadata"].get("annotations", {})  # type: ignore[union-attr]

    # Reads are not guarded; a write the guard allows goes through.
    await leader.get(PODS, "p", namespace=env.namespace)
    assert len(asked) == 3
    asked.clear()
    guarded = proxied.guarded(lambda: 30.0)
    await guarded.annotate(PODS, env.namespace, "p", {"example.com/by": "leader"})
    pod = await proxied.get(PODS, "p", namespace=env.namespace)
    assert pod["metadata"]["annotations"]["example.com/by"] == "leader"  # type: ignore[index]
