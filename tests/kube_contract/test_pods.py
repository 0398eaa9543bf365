"""Pod writes: ungating (the API's mutability rules), eviction, deletion, binding."""

import pytest

from tidegate.kube import PODS, Conflict, Invalid, NotFound

from .conftest import GATE, ContractEnv

pytestmark = pytest.mark.kube_contract

OTHER_GATE = "example.com/other"


def gates(pod: dict[str, object]) -> list[str]:
    spec = pod["spec"]
    assert isinstance(spec, dict)
    return [g["name"] for g in spec.get("schedulingGates") or []]


def selector(pod: dict[str, object]) -> dict[str, str]:
    spec = pod["spec"]
    assert isinstance(spec, dict)
    return dict(spec.get("nodeSelector") or {})


async def test_ungate_removes_only_its_gate_and_merges_the_selector(env: ContractEnv) -> None:
    await env.create_pod("p", gates=(OTHER_GATE, GATE), node_selector={"tidegate.io/block": "b1"})
    pod = await env.client.ungate_pod(
        env.namespace, "p", gate=GATE, node_selector={"tidegate.io/rack": "r1"}
    )
    assert gates(pod) == [OTHER_GATE]
    assert selector(pod) == {"tidegate.io/block": "b1", "tidegate.io/rack": "r1"}
    stored = await env.client.get(PODS, "p", namespace=env.namespace)
    assert gates(stored) == [OTHER_GATE]
    assert selector(stored) == selector(pod)

    # Asking again is a no-op, not an error: nothing is sent.
    again = await env.client.ungate_pod(
        env.namespace, "p", gate=GATE, node_selector={"tidegate.io/rack": "r1"}
    )
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]  # type: ignore[index]

    last = await env.client.ungate_pod(env.namespace, "p", gate=OTHER_GATE, node_selector={})
    assert gates(last) == []


async def test_ungate_surfaces_illegal_selector_changes_as_invalid(env: ContractEnv) -> None:
    await env.create_pod("gated", node_selector={"tidegate.io/rack": "r1"})
    # While gated, a selector may only gain keys: changing one is refused.
    with pytest.raises(Invalid) as changed:
        await env.client.ungate_pod(
            env.namespace, "gated", gate=OTHER_GATE, node_selector={"tidegate.io/rack": "r2"}
        )
    assert changed.value.status == 422

    await env.create_pod("free", gates=(GATE,))
    await env.client.ungate_pod(env.namespace, "free", gate=GATE, node_selector={"a": "1"})
    # No longer gated: the selector cannot change at all.
    with pytest.raises(Invalid):
        await env.client.ungate_pod(env.namespace, "free", gate=GATE, node_selector={"b": "2"})
    stored = await env.client.get(PODS, "free", namespace=env.namespace)
    assert selector(stored) == {"a": "1"}


async def test_adding_a_scheduling_gate_is_invalid(env: ContractEnv) -> None:
    await env.create_pod("p", gates=(GATE,))
    patch = [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "late"}}]
    with pytest.raises(Invalid):
        await env.client.patch(PODS, "p", patch, namespace=env.namespace, patch_type="json")


async def test_ungate_missing_pod_is_not_found(env: ContractEnv) -> None:
    with pytest.raises(NotFound):
        await env.client.ungate_pod(env.namespace, "ghost", gate=GATE, node_selector={})


async def test_eviction_removes_an_unbound_pod(env: ContractEnv) -> None:
    await env.create_pod("victim")
    await env.client.evict_pod(env.namespace, "victim", grace_seconds=0)
    with pytest.raises(NotFound):
        await env.client.get(PODS, "victim", namespace=env.namespace)
    with pytest.raises(NotFound):
        await env.client.evict_pod(env.namespace, "victim")


async def test_delete_with_grace_zero(env: ContractEnv) -> None:
    created = await env.create_pod("p")
    uid = created["metadata"]["uid"]  # type: ignore[index]
    await env.client.delete_pod(env.namespace, "p", uid=str(uid))
    with pytest.raises(NotFound):
        await env.client.get(PODS, "p", namespace=env.namespace)
    with pytest.raises(NotFound):
        await env.client.delete_pod(env.namespace, "p")
    await env.client.delete_pod(env.namespace, "p", missing_ok=True)


async def test_delete_with_a_stale_uid_is_a_conflict(env: ContractEnv) -> None:
    await env.create_pod("p")
    with pytest.raises(Conflict):
        await env.client.delete_pod(env.namespace, "p", uid="00000000-0000-0000-0000-000000000000")
    assert (await env.client.get(PODS, "p", namespace=env.namespace))["metadata"]


async def test_bind(env: ContractEnv) -> None:
    await env.create_pod("gated")
    with pytest.raises(Conflict):
        await env.client.bind_pod(env.namespace, "gated", env.nodes[0])

    await env.create_pod("ready", gates=())
    await env.client.bind_pod(env.namespace, "ready", env.nodes[1])
    bound = await env.client.get(PODS, "ready", namespace=env.namespace)
    assert bound["spec"]["nodeName"] == env.nodes[1]  # type: ignore[index]
    with pytest.raises(Conflict):
        await env.client.bind_pod(env.namespace, "ready", env.nodes[0])
