"""Where the simulator differed from Kubernetes, found by the controller contract
(tests/kube_contract/test_controllers.py), each held here on the simulator alone.

- The Eviction API and the taint-eviction controller mark the pod ``DisruptionTarget`` (reason
  ``EvictionByEvictionAPI`` / ``DeletionByTaintManager``) before deleting it.
- A create in a namespace being deleted is refused as the NamespaceLifecycle plugin refuses
  it: ``<resource> "<name>" is forbidden: …`` with a ``NamespaceTerminating`` cause.
- A Deployment's new ReplicaSet is created with the replicas its rollout allows (within
  ``maxSurge``), not with all of them.
- A pod on a NoExecute-tainted node leaves after the least ``tolerationSeconds`` of the
  tolerations it uses (one without seconds beside one with them does not make it stay).
- A namespace being deleted says in its conditions what remains in it and which finalizers
  hold it (``NamespaceContentRemaining``, ``NamespaceFinalizersRemaining``).
"""

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.store import WatchEvent
from tidegate.testing import until
from tidegate.testing.manifests import Builders

k8s = Builders(server_fields=False)

NS = "/api/v1/namespaces"
PODS = f"{NS}/default/pods"
SMP = {"Content-Type": "application/strategic-merge-patch+json"}


def condition(obj: dict[str, object], kind: str) -> dict[str, object] | None:
    for item in obj["status"].get("conditions", []):  # type: ignore[attr-defined]
        if item["type"] == kind:
            return dict(item)
    return None


@pytest.fixture
async def whole() -> AsyncIterator[SimCluster]:
    """Everything on, 100x faster than real time."""
    settings = SimSettings(nodes="1x1x2x8gpu", time_scale=0.01, scheduler_interval_seconds=0.01)
    async with SimCluster.running(settings) as running:
        yield running


async def test_an_eviction_marks_the_pod_a_disruption_target(
    http: aiohttp.ClientSession,
) -> None:
    bound = k8s.pod(
        "ev", gated=False, nodeName="block0-rack0-node0", terminationGracePeriodSeconds=30
    )
    async with http.post(PODS, json=bound) as response:
        assert response.status == 201
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "ev"}}
    async with http.post(f"{PODS}/ev/eviction?dryRun=All", json=eviction) as response:
        assert response.status == 201
    async with http.get(f"{PODS}/ev") as response:
        assert condition(await response.json(), "DisruptionTarget") is None  # a dry run
    async with http.post(f"{PODS}/ev/eviction", json=eviction) as response:
        assert response.status == 201
    async with http.get(f"{PODS}/ev") as response:
        stored = await response.json()
    assert stored["metadata"]["deletionTimestamp"]  # bound: Terminating for its grace period
    target = condition(stored, "DisruptionTarget")
    assert target is not None
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )


async def test_the_taint_manager_marks_what_it_deletes_a_disruption_target(
    whole: SimCluster,
) -> None:
    node = "block0-rack0-node0"
    brief = {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 1,
    }
    async with aiohttp.ClientSession(whole.url) as http:
        body = k8s.pod("on-node", gated=False, nodeName=node, tolerations=[brief])
        async with http.post(PODS, json=body) as response:
            assert response.status == 201
        whole.set_node_ready(node, False)

        def marked() -> dict[str, object] | None:
            stored = whole.store.get(("", "pods"), "default", "on-node")
            return stored if stored and stored["metadata"].get("deletionTimestamp") else None  # type: ignore[union-attr]

        stored = await until(marked, within=5.0)
    target = condition(stored, "DisruptionTarget")
    assert target is not None
    assert (target["reason"], target["message"]) == (
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
    )


async def test_a_create_in_a_terminating_namespace_is_refused_as_kubernetes_refuses_it(
    http: aiohttp.ClientSession,
) -> None:
    async with http.post(NS, json={"metadata": {"name": "doomed"}}) as response:
        assert response.status == 201
    async with http.delete(f"{NS}/doomed") as response:  # no controller empties it here
        assert response.status == 200
    cause = {
        "reason": "NamespaceTerminating",
        "message": "namespace doomed is being terminated",
        "field": "metadata.namespace",
    }
    refusals = [
        (f"{NS}/doomed/pods", k8s.pod("late", gated=False), 'pods "late"'),
        (
            f"{NS}/doomed/pods",
            {**k8s.pod("", gated=False), "metadata": {"generateName": "x-"}},
            "pods",
        ),
        (
            "/apis/batch/v1/namespaces/doomed/jobs",
            {"metadata": {"name": "j"}, "spec": {"template": k8s.pod("", gated=False)}},
            'jobs.batch "j"',
        ),
    ]
    for path, body, subject in refusals:
        async with http.post(path, json=body) as response:
            assert response.status == 403
            status = await response.json()
        assert status["reason"] == "Forbidden"
        assert status["message"] == (
            f"{subject} is forbidden: unable to create new content in namespace doomed "
            "because it is being terminated"
        )
        assert status["details"]["causes"] == [cause]


async def test_a_new_replicaset_starts_within_max_surge(whole: SimCluster) -> None:
    seen: dict[str, int] = {}

    def record(event: WatchEvent) -> None:
        name = str(event.obj["metadata"]["name"])  # type: ignore[index]
        replicas = int(event.obj["spec"]["replicas"])  # type: ignore[index]
        seen[name] = max(seen.get(name, 0), replicas)

    whole.store.subscribe(("apps", "replicasets"), record)
    deployment = {
        "metadata": {"name": "roll"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "roll"}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "roll"}},
                "spec": k8s.pod("", gated=False)["spec"],
            },
        },
    }
    path = "/apis/apps/v1/namespaces/default/deployments"
    async with aiohttp.ClientSession(whole.url) as http:
        async with http.post(path, json=deployment) as response:
            assert response.status == 201

        def ready() -> bool:
            stored = whole.store.get(("apps", "deployments"), "default", "roll")
            return bool(stored and stored.get("status", {}).get("availableReplicas") == 2)  # type: ignore[union-attr]

        await until(ready, within=5.0)
        nowhere = {"spec": {"template": {"spec": {"nodeSelector": {"example.com/no": "node"}}}}}
        async with http.patch(f"{path}/roll", data=json.dumps(nowhere), headers=SMP) as response:
            assert response.status == 200
        await until(lambda: len(seen) == 2, within=5.0)
        await asyncio.sleep(0.3)
    first = next(iter(seen))
    new = next(name for name in seen if name != first)
    assert seen == {first: 2, new: 1}, seen


async def test_a_terminating_namespace_says_what_remains_and_what_holds_it(
    whole: SimCluster,
) -> None:
    held = k8s.pod("held", gated=False, terminationGracePeriodSeconds=0)
    held["metadata"]["finalizers"] = ["example.com/hold", "example.com/too"]  # type: ignore[index]
    async with aiohttp.ClientSession(whole.url) as http:
        async with http.post(NS, json={"metadata": {"name": "going"}}) as response:
            assert response.status == 201
        async with http.post(f"{NS}/going/pods", json=held) as response:
            assert response.status == 201
        async with http.delete(f"{NS}/going") as response:
            assert response.status == 200

        def conditions() -> dict[str, tuple[str, str, str]]:
            stored = whole.store.get(("", "namespaces"), "", "going")
            assert stored is not None
            return {
                c["type"]: (c["status"], c["reason"], c["message"])
                for c in stored.get("status", {}).get("conditions", [])  # type: ignore[union-attr]
            }

        def says(finalizers: str) -> bool:
            found = conditions()
            return found.get("NamespaceFinalizersRemaining", ("", "", ""))[2].endswith(finalizers)

        await until(lambda: says("example.com/too in 1 resource instances"), within=5.0)
        found = conditions()
        assert found["NamespaceContentRemaining"] == (
            "True",
            "SomeResourcesRemain",
            "Some resources are remaining: pods. has 1 resource instances",
        )
        assert found["NamespaceFinalizersRemaining"] == (
            "True",
            "SomeFinalizersRemain",
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 "
            "resource instances, example.com/too in 1 resource instances",
        )
        assert found["NamespaceDeletionContentFailure"][0] == "False"
        # One finalizer removed: the conditions follow.
        one = json.dumps({"metadata": {"finalizers": ["example.com/too"]}})
        headers = {"Content-Type": "application/merge-patch+json"}
        async with http.patch(f"{NS}/going/pods/held", data=one, headers=headers) as response:
            assert response.status == 200
        await until(
            lambda: conditions()["NamespaceFinalizersRemaining"][2].endswith(
                "remaining: example.com/too in 1 resource instances"
            ),
            within=5.0,
        )
        none = json.dumps({"metadata": {"finalizers": None}})
        async with http.patch(f"{NS}/going/pods/held", data=none, headers=headers) as response:
            assert response.status == 200
        await until(lambda: whole.store.get(("", "namespaces"), "", "going") is None, within=5.0)


async def test_the_least_toleration_seconds_of_the_tolerations_used_decides(
    whole: SimCluster,
) -> None:
    node = "block0-rack0-node0"
    forever = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    brief = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}
    async with aiohttp.ClientSession(whole.url) as http:
        for name, tolerations in (("both", [forever, brief]), ("stays", [forever])):
            body = k8s.pod(name, gated=False, nodeName=node, tolerations=tolerations)
            async with http.post(PODS, json=body) as response:
                assert response.status == 201
        whole.set_node_ready(node, False)

        def deleting(name: str) -> bool:
            stored = whole.store.get(("", "pods"), "default", name)
            return bool(stored and stored["metadata"].get("deletionTimestamp"))  # type: ignore[union-attr]

        await until(lambda: deleting("both"), within=5.0)
    assert not deleting("stays")
