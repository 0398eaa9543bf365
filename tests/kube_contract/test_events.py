"""Events stay current: a repeat of (object, reason, type) counts up instead of piling up."""

import pytest

from tidegate.kube import EVENTS, ObjectRef, connect

from .conftest import ContractEnv

pytestmark = pytest.mark.kube_contract


async def test_event_is_created_then_counted(env: ContractEnv) -> None:
    pod = await env.create_pod("p")
    first = await env.client.create_event(
        pod,
        reason="Pending",
        message="couldn't fit 16 pods in any rack: best rack fits 12",
        type="Warning",
        action="Admit",
    )
    assert first["count"] == 1
    assert first["involvedObject"]["uid"] == pod["metadata"]["uid"]  # type: ignore[index]
    second = await env.client.create_event(
        pod,
        reason="Pending",
        message="couldn't fit 16 pods in any rack: best rack fits 14",
        type="Warning",
        action="Admit",
    )
    assert second["metadata"]["name"] == first["metadata"]["name"]  # type: ignore[index]
    assert second["count"] == 2
    assert second["message"].endswith("fits 14")  # type: ignore[union-attr]
    assert second["lastTimestamp"] >= first["firstTimestamp"]  # type: ignore[operator]
    assert second["firstTimestamp"] == first["firstTimestamp"]

    # Another process (no cache) continues the same Event.
    async with await connect(env.settings()) as other:
        third = await other.create_event(
            ObjectRef.of(pod), reason="Pending", message="still waiting", type="Warning"
        )
    assert third["count"] == 3

    # A different reason is a different Event.
    await env.client.create_event(pod, reason="Admitted", message="placed in rack r1")
    listed = await env.client.list_objects(
        EVENTS, namespace=env.namespace, field_selector="involvedObject.name=p"
    )
    counts = sorted((e["reason"], e["count"]) for e in listed.items)  # type: ignore[type-var]
    assert counts == [("Admitted", 1), ("Pending", 3)]


async def test_event_for_a_cluster_scoped_object_lives_in_default(env: ContractEnv) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": env.nodes[0]}}
    event = await env.client.create_event(node, reason="TopologyChanged", message="rack moved")
    assert event["metadata"]["namespace"] == "default"  # type: ignore[index]
    await env.client.delete(EVENTS, str(event["metadata"]["name"]), namespace="default")  # type: ignore[index]
