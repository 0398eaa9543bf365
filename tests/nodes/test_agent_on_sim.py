"""The node agent (``tidegate nodes``) against the simulator with its own kubelets off.

The simulated cluster starts with no nodes and no kubelet (``SimSettings(nodes=None,
kubelet=False)``); its scheduler and controllers run. Everything the pods go through here is
therefore the agent's doing, seen from the API server's objects.
"""

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.cli.nodeagent import (
    AGENT_ANNOTATION,
    LEASE_NAMESPACE,
    LEASES,
    AgentError,
    AgentSettings,
    NodeAgent,
    fake_nodes,
    node_ready_and_untainted,
)
from tidegate.kube import JOBS, NODES, PODS, KubeClient, KubeSettings, NotFound, connect
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.names import parse_rfc3339
from tidegate.testing import until_async
from tidegate.testing.manifests import Builders

BARE = SimSettings(nodes=None, kubelet=False, admission_gate=False)
SHAPE = "1x2x2x8gpu"


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
GPU_FULL = [k8s.container(None, None, limits=True, gpu="8")]
"""A container asking for a whole node's 8 GPUs."""


async def pods_of(kube: KubeClient, name: str) -> list[Any]:
    """The pods of Job ``name`` in the default namespace."""
    listed = await kube.list_objects(PODS, namespace="default", label_selector=f"job-name={name}")
    return listed.items


async def test_nodes_are_the_simulators_nodes_and_become_ready(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    _, kubeconfig, kube = cluster
    async with SimCluster.running(SimSettings(nodes=SHAPE, controllers=False)) as reference:
        expected = {
            n["metadata"]["name"]: (n["metadata"]["labels"], n["status"]["allocatable"])
            for n in reference.api.store.objects(NODES_KEY)
        }
    async with fake_nodes(kubeconfig, AgentSettings(nodes=SHAPE)) as agent:
        await agent.wait_ready(timeout_seconds=30)
        nodes = (await kube.list_objects(NODES)).items
    got = {
        n["metadata"]["name"]: (n["metadata"]["labels"], n["status"]["allocatable"]) for n in nodes
    }
    assert got == expected
    assert all(n["metadata"]["annotations"][AGENT_ANNOTATION] == "true" for n in nodes)
    assert all(node_ready_and_untainted(n) for n in nodes)


NODES_KEY = ("", "nodes")


async def test_job_pods_run_then_succeed_or_fail_following_restart_policy(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    _, kubeconfig, kube = cluster
    async with fake_nodes(kubeconfig, AgentSettings(nodes=SHAPE)) as agent:
        await agent.wait_ready(timeout_seconds=30)
        await kube.create(
            JOBS,
            k8s.job(
                "ok",
                parallelism=2,
                completions=2,
                backoffLimit=0,
                template=k8s.template(
                    annotations=k8s.runs(1), containers=GPU_FULL, restartPolicy="Never"
                ),
            ),
            namespace="default",
        )
        await kube.create(
            JOBS,
            k8s.job(
                "bad",
                parallelism=1,
                completions=1,
                backoffLimit=0,
                template=k8s.template(
                    annotations=k8s.runs(1, exit_code=3), containers=GPU_FULL, restartPolicy="Never"
                ),
            ),
            namespace="default",
        )
        await kube.create(
            JOBS,
            k8s.job(
                "flaky",
                parallelism=1,
                completions=1,
                backoffLimit=0,
                template=k8s.template(
                    annotations=k8s.runs(0.5, exit_code=1),
                    containers=GPU_FULL,
                    restartPolicy="OnFailure",
                ),
            ),
            namespace="default",
        )

        async def phases(name: str) -> list[str]:
            return sorted(p["status"].get("phase", "") for p in await pods_of(kube, name))

        seen_running: set[str] = set()

        async def finished() -> bool:
            for name in ("ok", "bad"):
                if "Running" in await phases(name):
                    seen_running.add(name)
            return await phases("ok") == ["Succeeded", "Succeeded"] and await phases("bad") == [
                "Failed"
            ]

        await until_async(finished, within=30, what="the Jobs' pods to finish", alive=agent.check)
        assert seen_running == {"ok", "bad"}
        [bad] = await pods_of(kube, "bad")
        terminated = bad["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == 3

        async def restarted() -> bool:
            [pod] = await pods_of(kube, "flaky")
            statuses = pod["status"].get("containerStatuses") or [{}]
            return (
                pod["status"].get("phase") == "Running" and statuses[0].get("restartCount", 0) >= 2
            )

        await until_async(restarted, within=30, what="the OnFailure pod to restart twice")
        assert agent.stats.finished >= 3
        assert agent.stats.restarted >= 2


async def test_a_graceful_deletion_stays_terminating_for_its_grace_then_ends(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    _, kubeconfig, kube = cluster
    async with fake_nodes(kubeconfig, AgentSettings(nodes=SHAPE)) as agent:
        await agent.wait_ready(timeout_seconds=30)
        await kube.create(
            JOBS,
            k8s.job(
                "svc",
                parallelism=1,
                completions=1,
                backoffLimit=0,
                template=k8s.template(
                    annotations=k8s.runs(3600), containers=GPU_FULL, restartPolicy="Never"
                ),
            ),
            namespace="default",
        )

        async def running_pod() -> Any:
            pods = await pods_of(kube, "svc")
            return pods and pods[0]["status"].get("phase") == "Running" and pods[0]

        pod = await until_async(running_pod, within=30, what="the pod to run")
        name = pod["metadata"]["name"]
        await kube.delete(PODS, name, namespace="default", grace_seconds=2)
        terminating = await kube.get(PODS, name, namespace="default")
        assert terminating["metadata"]["deletionTimestamp"]

        async def gone() -> bool:
            try:
                await kube.get(PODS, name, namespace="default")
            except NotFound:
                return True
            return False

        await until_async(gone, within=30, what="the graceful deletion to finish")
        assert agent.stats.removed == 1


async def test_leases_are_renewed(cluster: tuple[SimCluster, Path, KubeClient]) -> None:
    _, kubeconfig, kube = cluster
    settings = AgentSettings(nodes=SHAPE, renew_interval_seconds=0.5)
    async with fake_nodes(kubeconfig, settings) as agent:
        first = {
            lease["metadata"]["name"]: parse_rfc3339(lease["spec"]["renewTime"])
            for lease in (await kube.list_objects(LEASES, namespace=LEASE_NAMESPACE)).items
        }
        assert sorted(first) == sorted(agent.node_names)

        async def renewed() -> bool:
            leases = (await kube.list_objects(LEASES, namespace=LEASE_NAMESPACE)).items
            return all(
                parse_rfc3339(lease["spec"]["renewTime"]) > first[lease["metadata"]["name"]]
                for lease in leases
            )

        await until_async(renewed, within=20, what="every lease to be renewed", interval=0.2)
        owners = [
            lease["metadata"]["ownerReferences"][0]["kind"]
            for lease in (await kube.list_objects(LEASES, namespace=LEASE_NAMESPACE)).items
        ]
        assert owners == ["Node"] * len(agent.node_names)


async def test_watch_history_lost_is_answered_by_a_relist(tmp_path: Path) -> None:
    # Watches end every second and the history is compacted under them: the agent's next
    # resume gets 410 Gone, relists, and keeps running pods.
    settings = SimSettings(nodes=None, kubelet=False, admission_gate=False, max_watch_seconds=1.0)
    async with SimCluster.running(settings) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        async with (
            await connect(KubeSettings(kubeconfig=kubeconfig)) as kube,
            fake_nodes(kubeconfig, AgentSettings(nodes=SHAPE)) as agent,
        ):
            await agent.wait_ready(timeout_seconds=30)
            await kube.create(
                JOBS,
                k8s.job(
                    "before",
                    parallelism=1,
                    completions=1,
                    backoffLimit=0,
                    template=k8s.template(
                        annotations=k8s.runs(0.5), containers=GPU_FULL, restartPolicy="Never"
                    ),
                ),
                namespace="default",
            )
            sim.store.compact()

            async def relisted() -> bool:
                sim.store.compact()
                return agent.stats.relists >= 2

            await until_async(relisted, within=30, what="both watches to relist", interval=0.3)
            await kube.create(
                JOBS,
                k8s.job(
                    "after",
                    parallelism=2,
                    completions=2,
                    backoffLimit=0,
                    template=k8s.template(
                        annotations=k8s.runs(0.5), containers=GPU_FULL, restartPolicy="Never"
                    ),
                ),
                namespace="default",
            )

            async def done() -> bool:
                phases = [p["status"].get("phase") for p in await pods_of(kube, "after")]
                phases += [p["status"].get("phase") for p in await pods_of(kube, "before")]
                return phases == ["Succeeded"] * 3

            await until_async(done, within=30, what="pods to finish after the relist")


async def test_a_node_it_did_not_register_is_not_adopted(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    _, kubeconfig, kube = cluster
    await kube.create(
        NODES,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "block0-rack0-node0"}},
    )
    with pytest.raises(AgentError, match="not registered by tidegate nodes"):
        async with fake_nodes(kubeconfig, AgentSettings(nodes=SHAPE)):
            pass


async def test_a_restarted_agent_adopts_its_nodes_and_keeps_their_pods(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    _, kubeconfig, kube = cluster
    async with fake_nodes(kubeconfig, AgentSettings(nodes=SHAPE)) as agent:
        await agent.wait_ready(timeout_seconds=30)
        await kube.create(
            JOBS,
            k8s.job(
                "long",
                parallelism=1,
                completions=1,
                backoffLimit=0,
                template=k8s.template(
                    annotations=k8s.runs(3), containers=GPU_FULL, restartPolicy="Never"
                ),
            ),
            namespace="default",
        )

        async def running() -> bool:
            pods = await pods_of(kube, "long")
            return bool(pods) and pods[0]["status"].get("phase") == "Running"

        await until_async(running, within=30, what="the pod to run")
    # The agent is gone; a new one adopts the nodes and finishes the pod on time.
    async with fake_nodes(kubeconfig, AgentSettings(nodes=SHAPE)) as again:
        assert again.stats.registered == len(again.node_names)

        async def succeeded() -> bool:
            pods = await pods_of(kube, "long")
            return pods[0]["status"].get("phase") == "Succeeded"

        await until_async(succeeded, within=30, what="the adopted pod to finish")
        assert again.stats.started == 0


async def test_cli_stops_on_sigterm_and_deletes_its_nodes(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    _, kubeconfig, kube = cluster
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tidegate.cli",
        "nodes",
        "--kubeconfig",
        str(kubeconfig),
        "--nodes",
        SHAPE,
        "--delete-nodes",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    try:
        lines: list[str] = []
        while not any("Ready and untainted" in line for line in lines):
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            assert line, f"tidegate nodes exited early: {''.join(lines)}"
            lines.append(line.decode())
        assert len((await kube.list_objects(NODES)).items) == 4
        process.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    output = "".join(lines) + rest.decode()
    assert process.returncode == 0, output
    assert "deleted 4 nodes" in output
    assert (await kube.list_objects(NODES)).items == []


async def test_bad_settings_are_refused_with_the_setting_named(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    _, _, kube = cluster
    with pytest.raises(AgentError, match="renew_interval_seconds"):
        NodeAgent(kube, AgentSettings(renew_interval_seconds=60))


async def test_a_prefix_keeps_two_agents_apart(
    cluster: tuple[SimCluster, Path, KubeClient],
) -> None:
    _, kubeconfig, kube = cluster
    one = AgentSettings(nodes="1x1x2x8gpu", prefix="a-", labels={"test": "a"})
    two = AgentSettings(nodes="1x1x2x8gpu", prefix="b-")
    async with fake_nodes(kubeconfig, one), fake_nodes(kubeconfig, two) as second:
        await second.wait_ready(timeout_seconds=30)
        nodes = {n["metadata"]["name"]: n for n in (await kube.list_objects(NODES)).items}
    assert sorted(nodes) == [
        "a-block0-rack0-node0",
        "a-block0-rack0-node1",
        "b-block0-rack0-node0",
        "b-block0-rack0-node1",
    ]
    labels = nodes["a-block0-rack0-node1"]["metadata"]["labels"]
    assert labels["tidegate.io/rack"] == "a-block0-rack0"
    assert labels["tidegate.io/block"] == "a-block0"
    assert labels["kubernetes.io/hostname"] == "a-block0-rack0-node1"
    assert labels["test"] == "a"
    assert nodes["b-block0-rack0-node0"]["metadata"]["labels"]["tidegate.io/rack"] == (
        "b-block0-rack0"
    )
