"""The Job controller's failure rules tidegate's re-queue rests on, on both control planes.

tidegate sends a Job back to its queue by suspending it, not by evicting its pods, because of
two rules of kube-controller-manager's Job controller: an evicted pod is a failure
(it spends ``backoffLimit`` and delays the replacements by the pod failure backoff, 10 s
doubling per failure), while a pod the controller deletes itself for a suspension is not.
These tests check both rules where they come from — the real control plane (``real_k8s``:
etcd, kube-apiserver, kube-controller-manager, no kubelet) — and on the simulator, which must
agree. Pods stay Pending (no node), so evicting one deletes it at once, as pod GC would.
"""

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.kube import JOBS, NAMESPACES, PODS, KubeClient, KubeSettings, NotFound, connect
from tidegate.sim import SimCluster, SimSettings
from tidegate.testing import until_async
from tidegate.testing.manifests import Builders


@pytest.fixture(params=["sim", pytest.param("real", marks=pytest.mark.real_k8s)])
async def kube(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KubeClient]:
    """An admin client of a control plane with a Job controller and no node."""
    if request.param == "real":
        plane = request.getfixturevalue("real_cluster")
        client = await connect(KubeSettings(source="kubeconfig", kubeconfig=plane.kubeconfig))
        try:
            yield client
        finally:
            await client.close()
        return
    async with SimCluster.running(SimSettings(nodes=None)) as sim:
        client = await connect(KubeSettings(kubeconfig=sim.write_kubeconfig(tmp_path / "kc")))
        try:
            yield client
        finally:
            await client.close()


@pytest.fixture
async def namespace(kube: KubeClient) -> AsyncIterator[str]:
    name = f"jobs-{uuid.uuid4().hex[:8]}"
    await kube.create(NAMESPACES, {"metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            await kube.delete(NAMESPACES, name)


k8s = Builders(server_fields=False)
PLAIN = k8s.template(containers=[{"name": "main", "image": "trainer:1"}], restartPolicy="Never")
"""The pods of the Job a new user writes (with two pods, no podFailurePolicy, the default
backoffLimit)."""


async def live_pods(kube: KubeClient, namespace: str, job: str) -> list[dict[str, Any]]:
    listed = await kube.list_objects(PODS, namespace=namespace, label_selector=f"job-name={job}")
    return [dict(p) for p in listed.items if not p["metadata"].get("deletionTimestamp")]


async def status(kube: KubeClient, namespace: str, job: str) -> dict[str, Any]:
    return dict((await kube.get(JOBS, job, namespace=namespace)).get("status") or {})


async def test_evicted_pods_are_failures_and_their_replacements_wait_the_backoff(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(
        JOBS, k8s.job("evicted", parallelism=2, completions=2, template=PLAIN), namespace=namespace
    )
    first = await until_async(
        lambda: _exactly(live_pods(kube, namespace, "evicted"), 2), within=30, what="2 pods"
    )
    for pod in first:
        await kube.evict_pod(namespace, pod["metadata"]["name"], uid=pod["metadata"]["uid"])
    await until_async(
        lambda: _failed(kube, namespace, "evicted", 2), within=30, what="2 failures counted"
    )
    counted = asyncio.get_running_loop().time()
    # Two failures: 20 s before the controller creates replacements.
    await asyncio.sleep(5)
    assert await live_pods(kube, namespace, "evicted") == []
    await until_async(
        lambda: _exactly(live_pods(kube, namespace, "evicted"), 2), within=40, what="replacements"
    )
    assert asyncio.get_running_loop().time() - counted >= 12


async def test_pods_deleted_for_a_suspension_are_no_failures(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(
        JOBS, k8s.job("queued", parallelism=2, completions=2, template=PLAIN), namespace=namespace
    )
    await until_async(
        lambda: _exactly(live_pods(kube, namespace, "queued"), 2), within=30, what="2 pods"
    )
    await kube.patch(JOBS, "queued", {"spec": {"suspend": True}}, namespace=namespace)
    await until_async(
        lambda: _none(live_pods(kube, namespace, "queued")), within=30, what="pods deleted"
    )
    await kube.patch(JOBS, "queued", {"spec": {"suspend": False}}, namespace=namespace)
    # Back at once: nothing was counted, so there is no backoff.
    await until_async(
        lambda: _exactly(live_pods(kube, namespace, "queued"), 2), within=8, what="pods again"
    )
    assert (await status(kube, namespace, "queued")).get("failed", 0) == 0


async def _exactly(pods: Any, count: int) -> list[dict[str, Any]] | None:
    found: list[dict[str, Any]] = await pods
    return found if len(found) == count else None


async def _none(pods: Any) -> bool:
    return not await pods


async def _failed(kube: KubeClient, namespace: str, job: str, count: int) -> bool | None:
    return (await status(kube, namespace, job)).get("failed") == count or None
