"""A released pod the real kube-scheduler finds no room for, on the real control plane.

The topology-cache is killed, so the capacity view stops moving, while pods tidegate does not
manage fill every node but one per rack. A rack-required Job is then admitted by the stale
view onto a full node; kube-scheduler marks its released pod ``Unschedulable``. The
topology-cache comes back; after ``TIDEGATE_UNSCHEDULABLE_SECONDS`` the ungater asks admission
to place the slot again, admission moves it to the rack's free node, the ungater takes the
stranded pod away (it suspends the Job and unsuspends it under the new admission, so the Job
controller counts no failure) and the Job controller's new pod is released there and runs.
Every check reads the real API server or the bus.
"""

import contextlib

import pytest

from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry, queue_object, workload_object
from tidegate.kube import JOBS, NAMESPACES, PODS, QUEUES, NotFound
from tidegate.model import Admitted, ReplaceRequested
from tidegate.testing import bound_pod, until_async

from .real import RealTidegate
from .test_real_system import GPU_JOB, RACK, running_pods

TENANT = {"cpu": "1", "nvidia.com/gpu": "8"}
"""What each pod no queue names takes of its node: all 8 GPUs."""

pytestmark = [pytest.mark.real_k8s, pytest.mark.slow(20), pytest.mark.timeout(300)]


async def test_a_slot_kube_scheduler_finds_full_is_placed_again(
    real_tidegate: RealTidegate,
) -> None:
    async with real_tidegate(
        nodes="1x2x2x8gpu", env={"TIDEGATE_UNSCHEDULABLE_SECONDS": "2"}
    ) as system:
        tenants = f"{system.namespace}-tenants"  # not labelled managed: no gate
        await system.admin.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenants}}
        )
        try:
            queue = f"offline-{system.cluster}"
            await system.admin.create(
                QUEUES,
                queue_object(QueueEntry(name=queue, spec={"cardQuota": {"NVIDIA-H200": 64}})),
            )
            racks: dict[str, list[str]] = {}
            for node in await system.ready_nodes():
                labels = node["metadata"]["labels"]  # type: ignore[index]
                racks.setdefault(str(labels[RACK]), []).append(str(node["metadata"]["name"]))  # type: ignore[index]
            free = {sorted(names)[-1] for names in racks.values()}
            full = sorted(n for names in racks.values() for n in names if n not in free)

            async with system.observing():
                await system.kill("topology-cache")
                for index, node in enumerate(full):
                    await system.admin.create(
                        PODS, bound_pod(f"tenant-{index}", node, TENANT), namespace=tenants
                    )

                async def tenants_running() -> bool:
                    listed = await system.admin.list_objects(PODS, namespace=tenants)
                    phases = [p.get("status", {}).get("phase") for p in listed.items]  # type: ignore[union-attr]
                    return phases.count("Running") == len(full)

                await until_async(tenants_running, within=60.0, what="the tenants Running")
                job = WorkloadEntry(
                    name="train",
                    queue=queue,
                    pods=1,
                    requests=GPU_JOB,
                    annotations={"tidegate.io/topology-required": RACK},
                )
                await system.admin.create(
                    JOBS, workload_object(job, system.namespace), namespace=system.namespace
                )
                key = f"{system.namespace}/train"

                async def admitted() -> Admitted | None:
                    found = [
                        d for d in system.decisions if isinstance(d, Admitted) and d.workload == key
                    ]
                    return found[0] if found else None

                first = await until_async(admitted, within=60.0, what="the Job admitted")
                (domain,) = first.assignments["main"].domains
                stale = domain.values[-1]
                assert stale in full, f"placed by the stale view on a full node, not {stale}"

                async def unschedulable() -> str | None:
                    for pod in await system.pods():
                        for condition in pod.get("status", {}).get("conditions") or []:  # type: ignore[union-attr]
                            if condition.get("reason") == "Unschedulable":
                                return str(pod["metadata"]["uid"])  # type: ignore[index]
                    return None

                stuck = await until_async(
                    unschedulable, within=60.0, what="kube-scheduler marking the pod"
                )
                await system.restart("topology-cache")

                async def moved() -> list[dict[str, object]] | None:
                    pods = await running_pods(system, "train", 1)
                    if pods is None or pods[0]["metadata"]["uid"] == stuck:  # type: ignore[index]
                        return None
                    return pods

                (pod,) = await until_async(moved, within=120.0, what="the new pod Running")
            assert pod["spec"]["nodeName"] in free  # type: ignore[index]
            requests = [
                d for d in system.decisions if isinstance(d, ReplaceRequested) and d.workload == key
            ]
            assert requests
            assert requests[0].cause == "Unschedulable"
            assert requests[0].nodes == [stale]
            replaced = [
                d
                for d in system.decisions
                if isinstance(d, Admitted) and d.workload == key and d.replaces is not None
            ]
            assert replaced[0].replace_cause == "Unschedulable"
            assert replaced[0].unschedulable_moves == 1
            assert system.problems() == []
        finally:
            with contextlib.suppress(NotFound):
                await system.admin.delete(NAMESPACES, tenants)
