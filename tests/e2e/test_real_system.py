"""The whole system on the real control plane: chart RBAC, the API server's own gate webhook,
the real kube-scheduler, fake nodes from ``tidegate nodes``; every check reads the real API
server's objects or its audit log."""

from pathlib import Path

import pytest

from tidegate.cli.demo_trace import (
    QueueEntry,
    WorkloadEntry,
    priority_class_object,
    queue_object,
    workload_object,
)
from tidegate.kube import DEPLOYMENTS, JOBS, NODES, PODGROUPS, PODS, PRIORITY_CLASSES, QUEUES
from tidegate.model import Admitted, Preempted
from tidegate.testing import until_async
from tidegate.testing.controlplane import ControlPlane

from .real import RbacUsage, RealSystem, real_system

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


async def test_kueue_and_kai_jobs_land_in_one_rack_through_a_watcher_crash(
    real_cluster: ControlPlane, nats_url: str, tmp_path: Path, rbac_usage: RbacUsage
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
        placed: dict[str, list[dict[str, object]]] = {}
        async with system.observing():
            await system.admin.create(
                JOBS, workload_object(kueue, system.namespace), namespace=system.namespace
            )
            # The watcher dies with the first Job half seen; its successor carries on.
            await system.crash("watcher")
            await system.admin.create(
                JOBS, workload_object(kai, system.namespace), namespace=system.namespace
            )
            for job in ("kueue", "kai"):

                async def running(job: str = job) -> list[dict[str, object]] | None:
                    return await running_pods(system, job, 2)

                placed[job] = await until_async(
                    running, within=120.0, what=f"both pods of {job} Running"
                )
        assert system.problems() == []
        assert system.checks is not None
        assert system.checks.samples > 0
        admitted = {d.workload for d in system.decisions if isinstance(d, Admitted)}
        assert admitted == {f"{system.namespace}/kueue", f"{system.namespace}/kai"}, admitted
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
        missing, _ = system.rbac_report()
        assert {s: m for s, m in missing.items() if m} == {}
        rbac_usage.add(system)


def gang_pod(name: str, group: str, queue: str, priority_class: str) -> dict[str, object]:
    """A bare pod of PodGroup ``group`` asking for a whole 8-GPU node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"scheduling.k8s.io/group-name": group, "tidegate.io/queue": queue},
        },
        "spec": {
            "restartPolicy": "Never",
            "priorityClassName": priority_class,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {
                        "requests": {"cpu": "8", "nvidia.com/gpu": "8"},
                        "limits": {"nvidia.com/gpu": "8"},
                    },
                }
            ],
        },
    }


async def test_tidal_preemption_through_the_eviction_api(
    real_cluster: ControlPlane, nats_url: str, tmp_path: Path, rbac_usage: RbacUsage
) -> None:
    """Inference takes a rack from a training Job (restart: evicted through the Eviction API,
    the Job controller re-creates its pods, the gate holds them, it is admitted again once
    inference is gone); a PodGroup gang of bare pods in the other rack is left whole until a
    second inference Deployment needs that rack: then the gang is the victim, evicted whole
    (its room counted once by the topology-cache: before finding 10b's watcher fix the search
    answered "at best 0 of 2 pods … fit"); a malformed workload sits beside them the whole
    time."""
    async with real_system(real_cluster, nats_url, tmp_path, nodes="1x2x2x8gpu") as system:

        async def all_nodes_ready() -> bool:
            return len(await system.ready_nodes()) == 4

        await until_async(all_nodes_ready, within=90.0, what="4 fake nodes Ready")
        ns, run = system.namespace, system.cluster
        serving, batch = f"serving-{run}", f"batch-{run}"
        # The gang ranks above train, so the first preemption takes train and the second the gang.
        batch_high = f"batch-high-{run}"
        online, offline = f"online-{run}", f"offline-{run}"
        for name, value in ((serving, 100000), (batch, 10000), (batch_high, 20000)):
            await system.admin.create(PRIORITY_CLASSES, priority_class_object(name, value))
        for name, spec in (
            (online, {"priority": 100, "reclaimable": False, "cardQuota": {"NVIDIA-H200": 64}}),
            (offline, {"priority": 10, "reclaimable": True, "cardQuota": {"NVIDIA-H200": 64}}),
        ):
            await system.admin.create(QUEUES, queue_object(QueueEntry(name=name, spec=spec)))

        async with system.observing():
            train = WorkloadEntry(
                name="train",
                queue=offline,
                priority_class=batch,
                pods=2,
                requests=GPU_JOB,
                annotations={"tidegate.io/topology-required": "tidegate.io/rack"},
            )
            await system.admin.create(JOBS, workload_object(train, ns), namespace=ns)
            await system.admin.create(
                PODGROUPS,
                {
                    "apiVersion": "tidegate.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {
                        "name": "gang",
                        # bare pods have no owner kind that says "training"
                        "annotations": {"volcano.sh/service.type": "training"},
                    },
                    "spec": {"minMember": 2, "queue": offline, "priorityClassName": batch_high},
                },
                namespace=ns,
            )
            for index in range(2):
                await system.admin.create(
                    PODS, gang_pod(f"gang-{index}", "gang", offline, batch_high), namespace=ns
                )
            # Malformed: a blank queue name. It must be refused without disturbing the rest.
            broken = WorkloadEntry(
                name="broken", pods=1, requests={"cpu": "1"}, annotations={"tidegate.io/queue": " "}
            )
            await system.admin.create(JOBS, workload_object(broken, ns), namespace=ns)

            async def training_runs() -> bool:
                return (
                    await running_pods(system, "train", 2) is not None
                    and len(
                        [p for p in await system.pods() if _running(p) and _in_group(p, "gang")]
                    )
                    == 2
                )

            await until_async(training_runs, within=120.0, what="train and gang Running")
            first_train = {
                p["metadata"]["uid"]  # type: ignore[index]
                for p in await system.pods()
                if p["metadata"].get("labels", {}).get("job-name") == "train"  # type: ignore[union-attr]
            }

            serve = WorkloadEntry(
                name="serve",
                kind="Deployment",
                queue=online,
                priority_class=serving,
                pods=2,
                requests=GPU_JOB,
                annotations={"volcano.sh/service.type": "inference"},
            )
            await system.admin.create(DEPLOYMENTS, workload_object(serve, ns), namespace=ns)

            async def serving_runs() -> bool:
                pods = [p for p in await system.pods() if _app(p) == "serve" and _running(p)]
                return len(pods) == 2

            await until_async(serving_runs, within=150.0, what="both inference pods Running")
            preempted = [d for d in system.decisions if isinstance(d, Preempted)]
            victims = {v for d in preempted for v in d.victims}
            assert victims == {f"{ns}/train"}, victims
            # The Job controller re-created train's pods; the gate holds them.
            pods = await system.pods()
            again = [
                p
                for p in pods
                if p["metadata"].get("labels", {}).get("job-name") == "train"  # type: ignore[union-attr]
                and not p["metadata"].get("deletionTimestamp")  # type: ignore[union-attr]
            ]
            assert again
            assert all(p["metadata"]["uid"] not in first_train for p in again)  # type: ignore[index]
            assert all(
                {"name": "tidegate.io/admission"} in (p["spec"].get("schedulingGates") or [])  # type: ignore[union-attr]
                for p in again
            ), again

            # The PodGroup was not needed: it runs on, whole.
            assert (
                len([p for p in await system.pods() if _in_group(p, "gang") and _running(p)]) == 2
            )

            # A second inference Deployment needs the other rack: the PodGroup gang of bare pods
            # is the victim, evicted whole through the Eviction API (bare pods: none come back).
            gang_uids = {
                p["metadata"]["uid"]  # type: ignore[index]
                for p in await system.pods()
                if _in_group(p, "gang")
            }
            more = WorkloadEntry(
                name="serve2",
                kind="Deployment",
                queue=online,
                priority_class=serving,
                pods=2,
                requests=GPU_JOB,
                annotations={"volcano.sh/service.type": "inference"},
            )
            await system.admin.create(DEPLOYMENTS, workload_object(more, ns), namespace=ns)

            async def more_serving_runs() -> bool:
                pods = [p for p in await system.pods() if _app(p) == "serve2" and _running(p)]
                return len(pods) == 2

            await until_async(more_serving_runs, within=150.0, what="serve2's pods Running")
            preempted = [d for d in system.decisions if isinstance(d, Preempted)]
            assert [d.victims for d in preempted] == [[f"{ns}/train"], [f"{ns}/gang"]], preempted
            assert not [
                p
                for p in await system.pods()
                if p["metadata"]["uid"] in gang_uids and _running(p)  # type: ignore[index]
            ]
            await system.admin.delete(DEPLOYMENTS, "serve2", namespace=ns)

            # The tide goes out: inference leaves, training comes back.
            await system.admin.delete(DEPLOYMENTS, "serve", namespace=ns)

            async def train_back() -> bool:
                return await running_pods(system, "train", 2) is not None

            await until_async(train_back, within=150.0, what="train re-admitted and Running")
            for process in system.services.values():
                process.check()
        assert system.problems() == []
        admitted = [d.workload for d in system.decisions if isinstance(d, Admitted)]
        assert admitted.count(f"{ns}/train") == 2, admitted
        assert f"{ns}/broken" not in admitted
        assert system.forbidden() == []
        missing, _ = system.rbac_report()
        assert {s: m for s, m in missing.items() if m} == {}
        rbac_usage.add(system)


def _labels(pod: dict[str, object]) -> dict[str, str]:
    return pod["metadata"].get("labels") or {}  # type: ignore[union-attr, no-any-return]


def _app(pod: dict[str, object]) -> str | None:
    return _labels(pod).get("app")


def _in_group(pod: dict[str, object], group: str) -> bool:
    return _labels(pod).get("scheduling.k8s.io/group-name") == group


def _running(pod: dict[str, object]) -> bool:
    return pod["status"].get("phase") == "Running" and not pod["metadata"].get(  # type: ignore[union-attr]
        "deletionTimestamp"
    )
