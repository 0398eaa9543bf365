"""The node agent ends an evicted pod as a kubelet does, held on the simulator.

On the real control plane the agent once removed a deleted pod without recording its end, and a
Job with a ``podFailurePolicy`` (which replaces a pod only once it is terminal) never replaced
an evicted gang's pods. The simulator here has no nodes and no kubelet of its own
(``SimSettings(nodes=None, kubelet=False)``): what happens to the pod is the agent's doing.
docs/simulator.md lists this catch beside the simulator's own kubelet
(libs/sim/tests/test_real_catches.py).
"""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidegate.cli.nodeagent import AgentSettings, fake_nodes
from tidegate.kube import PODS, KubeClient, KubeSettings, connect
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.store import WatchEvent
from tidegate.testing import until_async
from tidegate.testing.manifests import Builders

BARE = SimSettings(nodes=None, kubelet=False, admission_gate=False)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[SimCluster, Path, KubeClient]]:
    """A simulated cluster with no nodes and no kubelet, its kubeconfig and a client."""
    async with SimCluster.running(BARE) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        kube = await connect(KubeSettings(kubeconfig=kubeconfig, backoff_max_seconds=0.3))
        try:
            yield sim, kubeconfig, kube
        finally:
            await kube.close()


k8s = Builders(server_fields=False)


async def test_an_evicted_pod_is_marked_failed_before_the_agent_removes_it(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    sim, kubeconfig, kube = cluster
    seen: list[tuple[str, str | None, bool]] = []

    def record(event: WatchEvent) -> None:
        if event.obj.get("metadata", {}).get("name") == "victim":
            status = event.obj.get("status") or {}
            deleting = bool(event.obj["metadata"].get("deletionTimestamp"))
            seen.append((event.type, status.get("phase"), deleting))

    async def deleted() -> bool:
        return any(kind == "DELETED" for kind, _, _ in seen)

    unsubscribe = sim.store.subscribe(("", "pods"), record)
    try:
        async with fake_nodes(kubeconfig, AgentSettings(nodes="1x1x1x8gpu")) as agent:
            await agent.wait_ready(timeout_seconds=30)
            await kube.create(
                PODS,
                k8s.pod(
                    "victim",
                    gated=False,
                    containers=[k8s.container(None, None, limits=True, gpu="8")],
                    restartPolicy="Never",
                    terminationGracePeriodSeconds=1,
                ),
                namespace="default",
            )

            async def running() -> bool:
                pod = await kube.get(PODS, "victim", namespace="default")
                return pod["status"].get("phase") == "Running"  # type: ignore[union-attr]

            await until_async(running, within=30, what="the pod to run", alive=agent.check)
            await kube.evict_pod("default", "victim")
            await until_async(deleted, within=30, what="the eviction to end", alive=agent.check)
    finally:
        unsubscribe()

    ended = [phase for kind, phase, deleting in seen if kind == "MODIFIED" and deleting]
    assert "Failed" in ended, f"the agent removed the pod without marking it Failed: {seen}"
    assert seen[-1][:2] == ("DELETED", "Failed"), seen
