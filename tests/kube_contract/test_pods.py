"""Pod writes: ungating (the API's mutability rules), eviction, deletion, binding."""

import pytest

from tidegate.kube import JOBS, PODS, BadRequest, Conflict, Invalid, KnownPod, NotFound
from tidegate.kube.ungate import ungate_json_patch

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


def known(pod: dict[str, object]) -> KnownPod:
    """The pod as a watcher saw it."""
    metadata = pod["metadata"]
    assert isinstance(metadata, dict)
    return KnownPod(str(metadata["uid"]), gates(pod), selector(pod))


async def test_a_guarded_json_patch_releases_a_pod_as_known_in_one_request(
    env: ContractEnv,
) -> None:
    """The ungater's one-request release (tidegate.kube.ungate.ungate_json_patch)."""
    created = await env.create_pod(
        "p", gates=(OTHER_GATE, GATE), node_selector={"tidegate.io/block": "b1"}
    )
    patch = ungate_json_patch(known(created), GATE, {"tidegate.io/rack": "r2"})
    assert patch is not None
    pod = await env.client.patch(PODS, "p", patch, namespace=env.namespace, patch_type="json")
    assert gates(pod) == [OTHER_GATE]
    assert selector(pod) == {"tidegate.io/block": "b1", "tidegate.io/rack": "r2"}

    alone = await env.create_pod("alone", gates=(GATE,))
    patch = ungate_json_patch(known(alone), GATE, {"r": "2"})
    assert patch is not None
    pod = await env.client.patch(PODS, "alone", patch, namespace=env.namespace, patch_type="json")
    assert gates(pod) == []
    assert selector(pod) == {"r": "2"}


async def test_a_guarded_json_patch_is_refused_for_a_pod_not_as_known(env: ContractEnv) -> None:
    """What makes the one-request release safe without a read: a pod that changed since it
    was seen is refused, never overwritten; ungate_pod then reads it and still releases it."""
    created = await env.create_pod("moved", gates=(OTHER_GATE, GATE))
    seen = known(created)
    await env.client.ungate_pod(env.namespace, "moved", gate=OTHER_GATE, node_selector={})
    stale = ungate_json_patch(seen, GATE, {})  # the gate is at index 0 now, not 1
    assert stale is not None
    with pytest.raises((Invalid, BadRequest)):
        await env.client.patch(PODS, "moved", stale, namespace=env.namespace, patch_type="json")
    pod = await env.client.ungate_pod(
        env.namespace, "moved", gate=GATE, node_selector={"r": "1"}, known=seen
    )
    assert (gates(pod), selector(pod)) == ([], {"r": "1"})

    # Seen without a selector, given one since: replacing the whole selector would drop a
    # key, which the API refuses for a gated pod.
    other = await env.create_pod("selected", gates=(GATE,))
    seen = known(other)
    await env.client.patch(
        PODS, "selected", {"spec": {"nodeSelector": {"a": "1"}}}, namespace=env.namespace
    )
    stale = ungate_json_patch(seen, GATE, {"r": "1"})
    assert stale is not None
    with pytest.raises((Invalid, BadRequest)):
        await env.client.patch(PODS, "selected", stale, namespace=env.namespace, patch_type="json")
    pod = await env.client.ungate_pod(
        env.namespace, "selected", gate=GATE, node_selector={"r": "1"}, known=seen
    )
    assert (gates(pod), selector(pod)) == ([], {"a": "1", "r": "1"})

    # Another pod of the same name.
    first = await env.create_pod("again")
    await env.client.delete(PODS, "again", namespace=env.namespace, grace_seconds=0)
    await env.create_pod("again")
    stale = ungate_json_patch(known(first), GATE, {})
    assert stale is not None
    with pytest.raises((Invalid, BadRequest)):
        await env.client.patch(PODS, "again", stale, namespace=env.namespace, patch_type="json")


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


@pytest.mark.parametrize(
    ("requests", "limits", "field", "reason", "message"),
    [
        (
            {"nvidia.com/gpu": "8"},
            None,
            "spec.containers[0].resources.limits",
            "FieldValueRequired",
            "Required value: Limit must be set for non overcommitable resources",
        ),
        (
            {"nvidia.com/gpu": "4"},
            {"nvidia.com/gpu": "8"},
            "spec.containers[0].resources.requests",
            "FieldValueInvalid",
            'Invalid value: "4": must be equal to nvidia.com/gpu limit of 8',
        ),
        (
            {"cpu": "2"},
            {"cpu": "1500m"},
            "spec.containers[0].resources.requests",
            "FieldValueInvalid",
            'Invalid value: "2": must be less than or equal to cpu limit of 1500m',
        ),
    ],
    ids=["no-limit", "request-below-limit", "cpu-above-limit"],
)
async def test_an_extended_resource_request_needs_an_equal_limit(
    env: ContractEnv,
    requests: dict[str, str],
    limits: dict[str, str] | None,
    field: str,
    reason: str,
    message: str,
) -> None:
    """Kubernetes' validation: an extended resource's request must have a limit, and equal it
    (422, one cause per field, worded as below); native resources only need request ≤ limit."""
    body = env.pod("gpu")
    resources: dict[str, object] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    body["spec"]["containers"][0]["resources"] = resources  # type: ignore[index]
    with pytest.raises(Invalid) as refused:
        await env.client.create(PODS, body, namespace=env.namespace)
    assert refused.value.status == 422
    assert refused.value.reason == "Invalid"
    assert [(c.field, c.reason, c.message) for c in refused.value.causes] == [
        (field, reason, message)
    ]
    assert refused.value.message == f'Pod "gpu" is invalid: {field}: {message}'


async def test_a_job_whose_template_asks_for_a_gpu_without_a_limit_is_invalid(
    env: ContractEnv,
) -> None:
    """The pod template of a Job is validated as a pod: the Job itself is refused."""
    template = env.pod("unused")
    template["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "8"}}  # type: ignore[index]
    template["spec"]["restartPolicy"] = "Never"  # type: ignore[index]
    del template["spec"]["schedulingGates"]  # type: ignore[attr-defined]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "gpu"},
        "spec": {"template": {"spec": template["spec"]}},
    }
    with pytest.raises(Invalid) as refused:
        await env.client.create(JOBS, job, namespace=env.namespace)
    field = "spec.template.spec.containers[0].resources.limits"
    assert [(c.field, c.reason) for c in refused.value.causes] == [(field, "FieldValueRequired")]
    assert refused.value.message.startswith(f'Job.batch "gpu" is invalid: {field}: Required value')
