"""What compose.yaml's setup does, done over HTTP against the simulated cluster.

compose runs `tidegate sim`, then kubectl applies deploy/crds/ and the example namespace,
Topology and Queues; the docs then submit the example workloads. Here the same objects go to a
SimCluster through kubernetes-asyncio (kubectl may be absent), and what a user would see is
checked: the CRDs served with their schemas, the Topology matching the simulator's node labels,
the Queues stored, and every pod of the example workloads held by the scheduling gate.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tidegate.sim import SimCluster, SimSettings

from .conftest import CRD_DIR, EXAMPLES_DIR, Manifest, load_documents

GATE = "tidegate.io/admission"


@pytest.fixture
async def api() -> AsyncIterator[client.ApiClient]:
    async with SimCluster.running(SimSettings(nodes="1x2x4x8gpu")) as sim:
        configuration = client.Configuration(host=sim.url)
        async with client.ApiClient(configuration) as api_client:
            yield api_client


async def _apply(api: client.ApiClient, obj: Manifest) -> None:
    """Create ``obj``, or replace it when it exists (what kubectl apply ends up doing)."""
    group_version, kind = obj["apiVersion"], obj["kind"]
    namespace = obj["metadata"].get("namespace")
    name = obj["metadata"]["name"]
    if kind == "CustomResourceDefinition":
        extensions = client.ApiextensionsV1Api(api)
        try:
            current = await extensions.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            await extensions.create_custom_resource_definition(obj)
            return
        obj = {
            **obj,
            "metadata": {**obj["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        await extensions.replace_custom_resource_definition(name, obj)
    elif kind == "Namespace":
        await client.CoreV1Api(api).create_namespace(obj)
    elif kind == "Pod":
        await client.CoreV1Api(api).create_namespaced_pod(namespace, obj)
    elif kind == "Job":
        await client.BatchV1Api(api).create_namespaced_job(namespace, obj)
    elif kind == "Deployment":
        await client.AppsV1Api(api).create_namespaced_deployment(namespace, obj)
    else:
        group, version = group_version.split("/")
        plural = {"Topology": "topologies", "Queue": "queues", "PodGroup": "podgroups"}[kind]
        custom = client.CustomObjectsApi(api)
        if namespace:
            await custom.create_namespaced_custom_object(group, version, namespace, plural, obj)
            return
        try:
            await custom.create_cluster_custom_object(group, version, plural, obj)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = await custom.get_cluster_custom_object(group, version, plural, name)
            await custom.replace_cluster_custom_object(
                group, version, plural, name, {**current, "spec": obj["spec"]}
            )


def _examples(*names: str) -> list[Manifest]:
    return [doc for name in names for doc in load_documents(EXAMPLES_DIR / name)]


async def _pods(api: client.ApiClient, namespace: str, expected: int) -> list[Any]:
    """The namespace's pods once the controllers have made ``expected`` of them."""
    core = client.CoreV1Api(api)
    for _ in range(600):
        pods = (await core.list_namespaced_pod(namespace)).items
        if len(pods) >= expected:
            return list(pods)
        await asyncio.sleep(0.05)
    pytest.fail(f"only {len(pods)} of {expected} pods appeared in {namespace}")


async def test_the_compose_setup_and_the_example_workloads(api: client.ApiClient) -> None:
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for crd in load_documents(path):
            await _apply(api, crd)
    for obj in _examples("namespace.yaml", "topology.yaml", "queues.yaml"):
        await _apply(api, obj)

    served = await client.ApiextensionsV1Api(api).read_custom_resource_definition(
        "queues.tidegate.io"
    )
    assert served.spec.names.short_names == ["tq"]
    custom = client.CustomObjectsApi(api)
    topology = await custom.get_cluster_custom_object(
        "tidegate.io", "v1alpha1", "topologies", "default"
    )
    (example,) = _examples("topology.yaml")
    assert topology["spec"]["levels"] == example["spec"]["levels"]
    nodes = (await client.CoreV1Api(api).list_node()).items
    for level in example["spec"]["levels"]:
        assert all(level["nodeLabel"] in node.metadata.labels for node in nodes), level
    queues = await custom.list_cluster_custom_object("tidegate.io", "v1alpha1", "queues")
    stored = {q["metadata"]["name"]: q["spec"] for q in queues["items"]}
    assert stored == {q["metadata"]["name"]: q["spec"] for q in _examples("queues.yaml")}

    for obj in _examples("training-job.yaml", "inference-deployment.yaml", "podgroup.yaml"):
        await _apply(api, obj)
    (job,) = _examples("training-job.yaml")
    (deployment,) = _examples("inference-deployment.yaml")
    members = [doc for doc in _examples("podgroup.yaml") if doc["kind"] == "Pod"]
    expected = job["spec"]["parallelism"] + deployment["spec"]["replicas"] + len(members)
    pods = await _pods(api, "research", expected)
    assert len(pods) == expected
    for pod in pods:
        gates = [gate.name for gate in pod.spec.scheduling_gates or []]
        assert gates == [GATE], pod.metadata.name
        assert pod.spec.node_name is None, pod.metadata.name
    group = await custom.get_namespaced_custom_object(
        "tidegate.io", "v1alpha1", "research", "podgroups", "pair"
    )
    assert group["spec"]["minMember"] == len(members)
