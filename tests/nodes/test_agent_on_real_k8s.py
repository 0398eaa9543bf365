"""The node agent on the real control plane (etcd, kube-apiserver, controller-manager, scheduler).

There is no kubelet: the agent is what keeps the nodes Ready and runs their pods. What is
checked is read from the real API server: the controller-manager's node-lifecycle controller
removes the ``not-ready`` taint, the agent renews the nodes' Leases (what keeps that controller
from marking them unreachable), the real kube-scheduler binds a Job's pods, the
real Job controller sees them succeed, and a graceful delete of a bound pod (which the real API
server keeps Terminating until someone deletes it with grace 0) finishes.
"""

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tidegate.cli.nodeagent import (
    LEASE_NAMESPACE,
    LEASES,
    AgentSettings,
    NodeAgent,
    fake_nodes,
    node_ready_and_untainted,
)
from tidegate.kube import JOBS, NAMESPACES, NODES, PODS, KubeClient, KubeSettings, NotFound, connect
from tidegate.sim.names import parse_rfc3339
from tidegate.testing import until, until_async

pytestmark = pytest.mark.real_k8s


@pytest.fixture
async def kube(real_cluster: Any) -> AsyncIterator[KubeClient]:
    """An admin client of the session's control plane."""
    async with await connect(
        KubeSettings(kubeconfig=real_cluster.kubeconfig, backoff_max_seconds=0.5)
    ) as client:
        yield client


@pytest.fixture
async def namespace(kube: KubeClient) -> AsyncIterator[str]:
    """A namespace of this test's own (its pods may run once its ServiceAccount exists)."""
    name = f"nodes-{uuid.uuid4().hex[:8]}"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    await kube.delete(NAMESPACES, name)


def gpu_pod_template(test_id: str, *, seconds: float | None, grace: int = 30) -> Any:
    """A pod template of one GPU-full container pinned to this test's nodes."""
    annotations = {} if seconds is None else {"tidegate.io/sim-duration-seconds": f"{seconds:g}"}
    gpus = {"nvidia.com/gpu": "8"}
    return {
        "metadata": {"annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
            "nodeSelector": {"tidegate.io/test-agent": test_id},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": gpus, "limits": gpus},
                }
            ],
        },
    }


async def pods_of(kube: KubeClient, namespace: str, job: str) -> list[Any]:
    """The pods of one Job."""
    listed = await kube.list_objects(PODS, namespace=namespace, label_selector=f"job-name={job}")
    return listed.items


async def create_job(kube: KubeClient, namespace: str, name: str, pods: int, template: Any) -> None:
    """A Job of ``pods`` parallel pods; retried while the namespace's ServiceAccount is new."""
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 0,
            "template": template,
        },
    }
    await kube.create(JOBS, body, namespace=namespace)


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_fake_nodes_on_the_real_control_plane(
    real_cluster: Any, kube: KubeClient, namespace: str
) -> None:
    test_id = uuid.uuid4().hex[:8]
    settings = AgentSettings(
        nodes="1x2x2x8gpu",
        prefix=f"n{test_id}-",
        labels={"tidegate.io/test-agent": test_id},
        delete_nodes_on_exit=True,
    )
    async with fake_nodes(real_cluster.kubeconfig, settings) as agent:
        names = set(agent.node_names)
        first_leases = await lease_times(kube, names)
        # The admission plugin taints new nodes not-ready; the controller-manager lifts it.
        await agent.wait_ready(timeout_seconds=90)
        await assert_nodes_ready(kube, names)

        await create_job(kube, namespace, "work", 4, gpu_pod_template(test_id, seconds=2))
        seen: dict[str, set[str]] = {}

        async def job_complete() -> bool:
            for pod in await pods_of(kube, namespace, "work"):
                seen.setdefault(pod["metadata"]["name"], set()).add(pod["status"].get("phase", ""))
            job = await kube.get(JOBS, "work", namespace=namespace)
            return job["status"].get("succeeded") == 4

        await until_async(job_complete, within=90, what="the Job to complete", alive=agent.check)
        pods = await pods_of(kube, namespace, "work")
        assert {p["spec"]["nodeName"] for p in pods} == names, "one GPU-full pod per node"
        assert all(p["status"]["phase"] == "Succeeded" for p in pods)
        for pod in pods:
            scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
            assert scheduled[0]["status"] == "True"
        assert agent.stats.started >= 4
        assert agent.stats.finished >= 4

        await graceful_delete_finishes(kube, namespace, test_id, agent)

        # What keeps the node-lifecycle controller from marking the nodes unreachable once its
        # grace period has passed is the Lease renewals: every Lease must have been renewed
        # since registration (the session's controller-manager keeps its default 50 s grace,
        # too long to wait for in every run).
        async def renewed() -> bool:
            leases = await lease_times(kube, names)
            return set(leases) == names and all(t > first_leases[n] for n, t in leases.items())

        await until_async(
            renewed,
            within=3 * settings.renew_interval_seconds,
            what="every node's Lease to be renewed",
            interval=0.5,
            alive=agent.check,
        )
        await assert_nodes_ready(kube, names)
        owners = {
            lease["metadata"]["name"]: lease["metadata"]["ownerReferences"][0]
            for lease in (await kube.list_objects(LEASES, namespace=LEASE_NAMESPACE)).items
            if lease["metadata"]["name"] in names
        }
        assert all(o["kind"] == "Node" and o["name"] == n for n, o in owners.items())
    # --delete-nodes: the nodes are gone with the agent.
    left = {n["metadata"]["name"] for n in (await kube.list_objects(NODES)).items}
    assert not names & left


async def lease_times(kube: KubeClient, names: set[str]) -> dict[str, float]:
    """renewTime of the Lease of each of ``names``."""
    leases = (await kube.list_objects(LEASES, namespace=LEASE_NAMESPACE)).items
    return {
        lease["metadata"]["name"]: parse_rfc3339(lease["spec"]["renewTime"])
        for lease in leases
        if lease["metadata"]["name"] in names
    }


async def assert_nodes_ready(kube: KubeClient, names: set[str]) -> None:
    """Every one of ``names`` is Ready and carries no not-ready/unreachable taint."""
    nodes = [n for n in (await kube.list_objects(NODES)).items if n["metadata"]["name"] in names]
    assert {n["metadata"]["name"] for n in nodes} == names
    for node in nodes:
        assert node_ready_and_untainted(node), (node["status"]["conditions"], node["spec"])


async def graceful_delete_finishes(
    kube: KubeClient, namespace: str, test_id: str, agent: NodeAgent
) -> None:
    """A running pod deleted with a grace period stays Terminating, then the agent ends it."""
    await create_job(kube, namespace, "svc", 1, gpu_pod_template(test_id, seconds=None, grace=3))

    async def running() -> Any:
        pods = await pods_of(kube, namespace, "svc")
        return bool(pods) and pods[0]["status"].get("phase") == "Running" and pods[0]

    pod = await until_async(running, within=60, what="the service pod to run", alive=agent.check)
    name = pod["metadata"]["name"]
    removed = agent.stats.removed
    await kube.delete(PODS, name, namespace=namespace)
    terminating = await kube.get(PODS, name, namespace=namespace)
    assert terminating["metadata"]["deletionTimestamp"]
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 3

    async def gone() -> bool:
        try:
            await kube.get(PODS, name, namespace=namespace)
        except NotFound:
            return True
        return False

    await until_async(gone, within=60, what="the graceful deletion to finish", alive=agent.check)
    # The agent counts its removal once the API server has answered its delete, which the
    # GET above may see first (a fresh-clone run on a loaded machine did).
    await until(
        lambda: agent.stats.removed == removed + 1, within=10, what="the agent's removal counted"
    )
