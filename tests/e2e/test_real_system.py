"""The whole system on the real control plane: chart RBAC, the API server's own gate webhook,
the real kube-scheduler, fake nodes from ``tidegate nodes``; every check reads the real API
server's objects or its audit log."""

from pathlib import Path

import pytest

from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry, queue_object, workload_object
from tidegate.kube import JOBS, NODES, QUEUES
from tidegate.testing import until_async
from tidegate.testing.controlplane import ControlPlane

from .real import RealSystem, real_system

pytestmark = [pytest.mark.real_k8s, pytest.mark.slow, pytest.mark.timeout(300)]

GPU_JOB = {"cpu": "8", "nvidia.com/gpu": 8}


def rack_of(nodes: dict[str, dict[str, object]], pod: dict[str, object]) -> str:
    node = nodes[pod["spec"]["nodeName"]]  # type: ignore[index]
    return str(node["metadata"]["labels"]["tidegate.io/rack"])  # type: ignore[index]


async def running_pods(system: RealSystem, job: str, count: int) -> list[dict[str, object]] | None:
    pods = [
        p
        for p in await system.pods()
        if p["metadata"].get("labels", {}).get("job-name") == job  # type: ignore[union-attr]
        and p["status"].get("phase") == "Running"  # type: ignore[union-attr]
        and not p["metadata"].get("deletionTimestamp")  # type: ignore[union-attr]
    ]
    return pods if len(pods) == count else None


async def test_kueue_and_kai_jobs_land_in_one_rack_with_the_charts_rbac(
    real_cluster: ControlPlane, nats_url: str, tmp_path: Path
) -> None:
    async with real_system(real_cluster, nats_url, tmp_path, nodes="1x2x2x8gpu") as system:

        async def all_nodes_ready() -> bool:
            return len(await system.ready_nodes()) == 4

        await until_async(all_nodes_ready, within=90.0, what="4 fake nodes Ready")
        queue = f"offline-{system.cluster}"
        await system.admin.create(
            QUEUES,
            queue_object(
                QueueEntry(
                    name=queue,
                    spec={"priority": 10, "reclaimable": True, "cardQuota": {"NVIDIA-H200": 64}},
                )
            ),
        )
        kueue = WorkloadEntry(
            name="kueue",
            queue=queue,
            pods=2,
            requests=GPU_JOB,
            template_annotations={"kueue.x-k8s.io/podset-required-topology": "tidegate.io/rack"},
        )
        kai = WorkloadEntry(
            name="kai",
            queue=queue,
            pods=2,
            requests=GPU_JOB,
            annotations={"kai.scheduler/topology-required-placement": "tidegate.io/rack"},
        )
        for entry in (kueue, kai):
            await system.admin.create(
                JOBS, workload_object(entry, system.namespace), namespace=system.namespace
            )

        placed: dict[str, list[dict[str, object]]] = {}
        for job in ("kueue", "kai"):

            async def running(job: str = job) -> list[dict[str, object]] | None:
                return await running_pods(system, job, 2)

            placed[job] = await until_async(
                running, within=120.0, what=f"both pods of {job} Running"
            )
        nodes = {
            str(n["metadata"]["name"]): n  # type: ignore[index]
            for n in (await system.admin.list_objects(NODES)).items
        }
        racks = {job: {rack_of(nodes, p) for p in pods} for job, pods in placed.items()}
        assert all(len(r) == 1 for r in racks.values()), racks
        assert racks["kueue"] != racks["kai"], racks  # 16 GPUs each: one whole rack apiece
        for pods in placed.values():
            for pod in pods:
                # Gated by the API server's call to the webhook, released by the ungater with
                # the rack as a node selector, bound by kube-scheduler.
                selector = pod["spec"].get("nodeSelector") or {}  # type: ignore[union-attr]
                assert "tidegate.io/rack" in selector, pod["metadata"]  # type: ignore[index]
                assert not pod["spec"].get("schedulingGates")  # type: ignore[union-attr]
        for service, process in system.services.items():
            process.check()
            assert service

        assert system.forbidden() == []
        missing, unused = system.rbac_report()
        print("RBAC granted but not used in this run:")
        for service, grants in sorted(unused.items()):
            for grant in sorted(grants):
                print(f"  {service}: {grant}")
        assert {s: m for s, m in missing.items() if m} == {}
