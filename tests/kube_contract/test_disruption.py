"""The Eviction subresource honours PodDisruptionBudgets (policy/v1) on the simulator as on a
real API server: 429 TooManyRequests when evicting would break the budget."""

import pytest

from tidegate.kube import PDBS, PODS, NotFound, TooManyRequests
from tidegate.testing import until_async

from .conftest import ContractEnv, k8s

pytestmark = pytest.mark.kube_contract


async def running_pods(env: ContractEnv, app: str, count: int) -> list[str]:
    """``count`` pods labelled ``app``, bound and reported Running and Ready (as a kubelet
    would report them)."""
    names = []
    for index in range(count):
        name = f"{app}-{index}"
        await env.create_pod(name, gates=(), labels={"app": app})
        await env.client.bind_pod(env.namespace, name, env.nodes[index % len(env.nodes)])
        status = {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        }
        await env.client.patch(
            PODS, name, {"status": status}, namespace=env.namespace, subresource="status"
        )
        names.append(name)
    return names


async def test_an_eviction_the_budget_forbids_is_refused_with_429(env: ContractEnv) -> None:
    pods = await running_pods(env, "gang", 2)
    await env.client.create(
        PDBS,
        k8s.disruption_budget("all", {"app": "gang"}, min_available=2),
        namespace=env.namespace,
    )
    with pytest.raises(TooManyRequests):
        await env.client.evict_pod(env.namespace, pods[0], grace_seconds=0)
    stored = await env.client.get(PODS, pods[0], namespace=env.namespace)
    assert not stored["metadata"].get("deletionTimestamp")  # type: ignore[union-attr]


async def test_a_budget_allows_what_it_can_spare_and_no_more(env: ContractEnv) -> None:
    pods = await running_pods(env, "web", 2)
    await env.client.create(
        PDBS, k8s.disruption_budget("one", {"app": "web"}, min_available=1), namespace=env.namespace
    )

    async def first_evicted() -> bool:
        # A real server refuses until its disruption controller has computed the budget.
        try:
            await env.client.evict_pod(env.namespace, pods[0], grace_seconds=0)
        except TooManyRequests:
            return False
        return True

    await until_async(first_evicted, within=60.0, what="the budget to allow one eviction")
    with pytest.raises(TooManyRequests):
        await env.client.evict_pod(env.namespace, pods[1], grace_seconds=0)
    # A pod that is not running yet is never protected.
    await env.create_pod("pending", gates=(), labels={"app": "web"})
    await env.client.evict_pod(env.namespace, "pending", grace_seconds=0)
    with pytest.raises(NotFound):
        await env.client.get(PODS, "pending", namespace=env.namespace)


async def test_a_dry_run_eviction_checks_the_budget_and_evicts_nothing(env: ContractEnv) -> None:
    pods = await running_pods(env, "dry", 2)
    await env.client.create(
        PDBS, k8s.disruption_budget("dry", {"app": "dry"}, min_available=2), namespace=env.namespace
    )
    with pytest.raises(TooManyRequests):
        await env.client.evict_pod(env.namespace, pods[0], dry_run=True)
    await env.client.delete(PDBS, "dry", namespace=env.namespace)
    await env.client.evict_pod(env.namespace, pods[0], dry_run=True)
    stored = await env.client.get(PODS, pods[0], namespace=env.namespace)
    assert not stored["metadata"].get("deletionTimestamp")  # type: ignore[union-attr]
