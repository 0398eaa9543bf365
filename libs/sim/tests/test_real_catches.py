"""What a real control plane caught that the simulator had let through, held on the simulator.

Most test runs have no real control plane (docs/testing.md#real-kubernetes), so behaviour a real
one showed and tidegate relies on is pinned here, over HTTP, on a running simulated cluster.
docs/simulator.md ("What real clusters caught, and the simulator now holds") lists every catch
and the test that holds it; the ones held elsewhere are not repeated here.
"""

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tidegate.sim import SimCluster, SimSettings
from tidegate.testing import until

from .test_control_plane import ONE_GPU, k8s

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    """Scheduler, kubelets and controllers on, 100x faster than real time."""
    settings = SimSettings(nodes="1x1x2x8gpu", time_scale=0.01, scheduler_interval_seconds=0.01)
    async with SimCluster.running(settings) as running:
        yield running


@pytest.fixture
async def http(cluster: SimCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cluster.url) as session:
        yield session


async def watch_until_deleted(
    http: aiohttp.ClientSession, name: str, resource_version: str
) -> list[dict[str, object]]:
    """Every watch event of pod ``name`` after ``resource_version``, up to its DELETED."""
    events: list[dict[str, object]] = []
    params = {
        "watch": "1",
        "resourceVersion": resource_version,
        "fieldSelector": f"metadata.name={name}",
        "timeoutSeconds": "10",
    }
    async with http.get(PODS, params=params) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if not line.strip():
                continue
            event = json.loads(line)
            events.append(event)
            if event["type"] == "DELETED":
                break
    return events


async def test_a_deleted_running_pod_is_marked_failed_before_it_is_gone(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    """A kubelet records the end of a deleted pod (phase Failed, its containers killed) before
    the pod leaves the API server. A Job with a podFailurePolicy replaces a pod only once it is
    terminal: on the real control plane, fake kubelets that removed deleted pods without a
    terminal phase left evicted gangs without replacements for good."""
    async with http.post(
        PODS, json=k8s.pod("victim", gated=False, containers=ONE_GPU, restartPolicy="Never")
    ) as response:
        assert response.status == 201, await response.text()

    def running() -> bool:
        pod = cluster.store.get(("", "pods"), "default", "victim")
        return bool(pod and pod["status"].get("phase") == "Running")  # type: ignore[union-attr]

    await until(running, within=10, what="the pod to run")
    async with http.get(f"{PODS}/victim") as response:
        seen = (await response.json())["metadata"]["resourceVersion"]
    # The eviction a preemption sends: a graceful deletion (30 s, scaled to 0.3 s here).
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim"}}
    async with http.post(f"{PODS}/victim/eviction", json=eviction) as response:
        assert response.status == 201, await response.text()

    events = await watch_until_deleted(http, "victim", seen)
    assert events[-1]["type"] == "DELETED", [e["type"] for e in events]
    phases = [e["object"]["status"].get("phase") for e in events]  # type: ignore[index]
    assert "Failed" in phases[:-1], f"no Failed phase before the pod went: {phases}"
    failed = next(e["object"] for e in events if e["object"]["status"].get("phase") == "Failed")  # type: ignore[index]
    assert failed["metadata"]["deletionTimestamp"]  # type: ignore[index]
    (container,) = failed["status"]["containerStatuses"]  # type: ignore[index]
    assert container["state"]["terminated"]["exitCode"] == 137
    assert container["ready"] is False
