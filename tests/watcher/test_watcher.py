"""The watcher end to end: a simulated API server over HTTP, a real nats-server, the state stream.

Each annotation family is recognised from objects written through the Kubernetes API; a
malformed annotation marks its workload and nothing else; a restarted watcher publishes
tombstones for what was deleted while it was down and nothing for what did not change.
"""

import asyncio
import contextlib
from pathlib import Path

import aiohttp

from tidegate.bus import BusSettings, connect
from tidegate.kube import (
    DEPLOYMENTS,
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    REPLICASETS,
    TOPOLOGIES,
    KubeSettings,
)
from tidegate.kube import connect as connect_kube
from tidegate.model import (
    NodeState,
    PodState,
    QueueConfig,
    Tombstone,
    TopologyConfig,
    WorkloadState,
    subjects,
)
from tidegate.sim import SimCluster, SimSettings
from tidegate.watcher.app import Watcher
from tidegate.watcher.config import WatcherSettings

from .conftest import NAMESPACE, TEMPLATE, Harness, k8s


def workload(harness: Harness, name: str) -> WorkloadState:
    message = harness.workload(name)
    assert isinstance(message, WorkloadState), f"workload {name}: {message!r}"
    return message


async def test_cluster_and_config_objects_are_mirrored(harness: Harness) -> None:
    await harness.create(
        QUEUES,
        {
            "metadata": {"name": "online"},
            "spec": {"priority": 80000, "reclaimable": False, "capability": {"cpu": "64"}},
        },
        namespace=None,
    )
    await harness.start_watcher()
    await harness.until(
        lambda: len([m for m in harness.last.values() if isinstance(m, NodeState)]) == 4,
        what="4 nodes",
    )
    nodes = [m for m in harness.last.values() if isinstance(m, NodeState)]
    assert all(n.allocatable.get("nvidia.com/gpu") == 8 and n.ready for n in nodes)
    topology = harness.last[subjects.topology(harness.cluster, "default")]
    assert isinstance(topology, TopologyConfig)
    assert topology.levels == harness.sim.levels
    queue = harness.last[subjects.queue(harness.cluster, "online")]
    assert isinstance(queue, QueueConfig)
    assert (queue.priority, queue.reclaimable, queue.quota) == (80000, False, {"cpu": 64000})


async def test_kueue_job_end_to_end(harness: Harness) -> None:
    await harness.start_watcher()
    rack = harness.sim.levels[1]
    job = await harness.create(
        JOBS,
        k8s.job(
            "train",
            parallelism=2,
            completions=2,
            completionMode="Indexed",
            annotations={"kueue.x-k8s.io/queue-name": "research"},
            template=k8s.template(
                annotations={"kueue.x-k8s.io/podset-required-topology": rack},
                containers=[k8s.container(memory=None)],
                restartPolicy="Never",
            ),
        ),
    )
    for i in range(2):
        await harness.create(
            PODS,
            k8s.pod(
                f"train-{i}",
                owner=k8s.owner_of(job),
                annotations={"batch.kubernetes.io/job-completion-index": str(i)},
            ),
        )
    await harness.until(lambda: workload(harness, "train"), what="workload train")
    w = workload(harness, "train")
    assert w.invalid_reason is None
    assert (w.queue, w.service_type, w.owner_kind) == ("research", "training", "Job")
    assert [(ps.name, ps.count, ps.topology.required) for ps in w.podsets] == [("main", 2, rack)]
    await harness.until(
        lambda: isinstance(harness.pod("train-1"), PodState) and harness.pod("train-1").rank == 1,
        what="pod rank",
    )  # type: ignore[union-attr]
    p = harness.pod("train-1")
    assert isinstance(p, PodState)
    assert (p.workload, p.podset, p.scheduling_gates) == (
        f"{NAMESPACE}/train",
        "main",
        ["tidegate.io/admission"],
    )


async def test_jobset_and_kai_end_to_end(harness: Harness) -> None:
    await harness.start_watcher()
    block, rack = harness.sim.levels[0], harness.sim.levels[1]
    jobset = await harness.create(
        JOBSETS,
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": "llm",
                "annotations": {
                    "kai.scheduler/topology": "default",
                    "kai.scheduler/topology-required-placement": block.rsplit("/", 1)[-1],
                    "kai.scheduler/topology-preferred-placement": rack,
                },
            },
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 2,
                        "template": {
                            "spec": {"parallelism": 2, "completions": 2, "template": TEMPLATE}
                        },
                    }
                ]
            },
        },
    )
    child = k8s.job(
        "llm-workers-1",
        parallelism=2,
        completions=2,
        completionMode="Indexed",
        annotations={},
        template=TEMPLATE,
    )
    child["metadata"]["ownerReferences"] = [k8s.owner_of(jobset)]
    child = await harness.create(JOBS, child)
    await harness.create(
        PODS,
        k8s.pod(
            "llm-workers-1-1",
            owner=k8s.owner_of(child),
            labels={
                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/job-index": "1",
                "batch.kubernetes.io/job-completion-index": "1",
            },
        ),
    )
    await harness.until(lambda: workload(harness, "llm"), what="workload llm")
    w = workload(harness, "llm")
    assert w.invalid_reason is None
    assert (w.owner_kind, w.topology, w.service_type) == ("JobSet", "default", "training")
    [ps] = w.podsets
    assert (ps.name, ps.count, ps.pods_per_index_group) == ("workers", 4, 2)
    assert (ps.topology.required, ps.topology.preferred) == (block, rack)
    await harness.until(lambda: isinstance(harness.pod("llm-workers-1-1"), PodState), what="pod")
    p = harness.pod("llm-workers-1-1")
    assert isinstance(p, PodState)
    assert (p.workload, p.podset, p.rank) == (f"{NAMESPACE}/llm", "workers", 3)


async def test_volcano_deployment_end_to_end(harness: Harness) -> None:
    await harness.create(
        PRIORITY_CLASSES, {"metadata": {"name": "pc-high"}, "value": 80000}, namespace=None
    )
    await harness.start_watcher()
    deployment = await harness.create(
        DEPLOYMENTS,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "ai-service",
                "annotations": {
                    "volcano.sh/preemptable": "false",
                    "volcano.sh/card.request": '{"NVIDIA-H200/mig-1g.18gb-mixed": 2}',
                },
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "ai"}},
                "template": {
                    "metadata": {
                        "labels": {"app": "ai"},
                        "annotations": {
                            "scheduling.volcano.sh/queue-name": "queue-inference",
                            "volcano.sh/card.name": "NVIDIA-H200",
                        },
                    },
                    "spec": {
                        "priorityClassName": "pc-high",
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "resources": {
                                    "requests": {"nvidia.com/gpu": "1"},
                                    "limits": {"nvidia.com/gpu": "1"},
                                },
                            }
                        ],
                    },
                },
            },
        },
    )
    rs_body = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "ai-service-7d9", "ownerReferences": [k8s.owner_of(deployment)]},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "ai"}},
            "template": deployment["spec"]["template"],
        },
    }
    replicaset = await harness.create(REPLICASETS, rs_body)
    await harness.create(
        PODS,
        k8s.pod(
            "ai-service-7d9-a",
            owner=k8s.owner_of(replicaset),
            containers=[k8s.container(gpu="1", limits=True)],
        ),
    )
    await harness.until(lambda: workload(harness, "ai-service"), what="workload ai-service")
    w = workload(harness, "ai-service")
    assert w.invalid_reason is None
    assert (w.service_type, w.preemptable, w.queue) == ("inference", False, "queue-inference")
    assert (w.priority, w.priority_class) == (80000, "pc-high")
    assert w.card_request == {"NVIDIA-H200/mig-1g.18gb-mixed": 2}
    assert [(ps.count, ps.card_name, ps.requests) for ps in w.podsets] == [
        (2, "NVIDIA-H200", {"nvidia.com/gpu": 1})
    ]
    assert harness.workload("ai-service-7d9") is None


async def test_podgroup_with_tidegate_annotations_end_to_end(harness: Harness) -> None:
    await harness.start_watcher()
    rack = harness.sim.levels[1]
    await harness.create(
        PODGROUPS,
        {
            "apiVersion": "tidegate.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {
                "name": "gang",
                "annotations": {
                    "tidegate.io/topology-required": rack,
                    "tidegate.io/on-preemption": "abort",
                },
            },
            "spec": {"minMember": 3, "queue": "training"},
        },
    )
    for i in range(3):
        await harness.create(
            PODS,
            k8s.pod(
                f"gang-{i}",
                labels={
                    "scheduling.k8s.io/group-name": "gang",
                    "tidegate.io/role": "worker",
                    "tidegate.io/pod-index": str(i),
                },
            ),
        )
    await harness.until(
        lambda: sum(ps.count for ps in workload(harness, "gang").podsets) == 3, what="3 members"
    )
    w = workload(harness, "gang")
    assert w.invalid_reason is None
    assert (w.owner_kind, w.min_members, w.queue, w.on_preemption) == (
        "PodGroup",
        3,
        "training",
        "abort",
    )
    assert [(ps.name, ps.topology.required) for ps in w.podsets] == [("worker", rack)]


async def test_malformed_annotations_mark_that_workload_and_nothing_else(harness: Harness) -> None:
    await harness.start_watcher()
    bad = await harness.create(
        JOBS,
        k8s.job(
            "bad",
            parallelism=1,
            completions=1,
            completionMode="Indexed",
            annotations={"volcano.sh/card.request": "{not json"},
            template=TEMPLATE,
        ),
    )
    good = await harness.create(
        JOBS,
        k8s.job(
            "good",
            parallelism=1,
            completions=1,
            completionMode="Indexed",
            annotations={},
            template=TEMPLATE,
        ),
    )
    await harness.create(PODS, k8s.pod("bad-0", owner=k8s.owner_of(bad)))
    await harness.create(PODS, k8s.pod("good-0", owner=k8s.owner_of(good)))
    await harness.until(
        lambda: workload(harness, "bad") and workload(harness, "good"), what="both workloads"
    )
    reason = workload(harness, "bad").invalid_reason
    assert reason is not None
    assert (
        f"annotation volcano.sh/card.request on Job {NAMESPACE}/bad: '{{not json' is not valid JSON"
        in reason
    )
    assert workload(harness, "good").invalid_reason is None
    # The watcher keeps going: a later object is still mirrored.
    await harness.create(PODS, k8s.pod("solo", labels={"tidegate.io/queue": "q"}))
    await harness.until(lambda: workload(harness, "solo"), what="workload solo")


async def test_deletions_publish_tombstones(harness: Harness) -> None:
    await harness.start_watcher()
    job = await harness.create(
        JOBS,
        k8s.job(
            "short",
            parallelism=1,
            completions=1,
            completionMode="Indexed",
            annotations={},
            template=TEMPLATE,
        ),
    )
    await harness.create(PODS, k8s.pod("short-0", owner=k8s.owner_of(job)))
    await harness.until(lambda: workload(harness, "short"), what="workload")
    await harness.delete(PODS, "short-0")
    await harness.delete(JOBS, "short")
    await harness.until(
        lambda: isinstance(harness.workload("short"), Tombstone), what="workload tombstone"
    )
    tomb = harness.workload("short")
    assert isinstance(tomb, Tombstone)
    assert (tomb.object_kind, tomb.namespace, tomb.name, tomb.uid) == (
        "workload",
        NAMESPACE,
        "short",
        job["metadata"]["uid"],
    )
    assert isinstance(harness.pod("short-0"), Tombstone)


async def test_restart_publishes_tombstones_for_deletions_made_while_down(harness: Harness) -> None:
    await harness.create(
        TOPOLOGIES,
        {"metadata": {"name": "extra"}, "spec": {"levels": [{"nodeLabel": "x"}]}},
        namespace=None,
    )
    first = await harness.start_watcher()
    job = await harness.create(
        JOBS,
        k8s.job(
            "gone",
            parallelism=1,
            completions=1,
            completionMode="Indexed",
            annotations={},
            template=TEMPLATE,
        ),
    )
    await harness.create(PODS, k8s.pod("gone-0", owner=k8s.owner_of(job)))
    kept = await harness.create(
        JOBS,
        k8s.job(
            "kept",
            parallelism=1,
            completions=1,
            completionMode="Indexed",
            annotations={},
            template=TEMPLATE,
        ),
    )
    await harness.create(PODS, k8s.pod("kept-0", owner=k8s.owner_of(kept)))
    await harness.until(
        lambda: workload(harness, "gone") and workload(harness, "kept"), what="workloads"
    )
    await harness.until(lambda: isinstance(harness.pod("kept-0"), PodState), what="pods")
    assert first.stats.snapshots > 0
    await harness.stop_watcher()

    node = next(m.name for m in harness.last.values() if isinstance(m, NodeState))
    await harness.delete(PODS, "gone-0")
    await harness.delete(JOBS, "gone")
    await harness.delete(NODES, node, namespace=None)
    await harness.delete(TOPOLOGIES, "extra", namespace=None)
    before = dict(harness.published)

    second = await harness.start_watcher()
    await harness.until(
        lambda: isinstance(harness.workload("gone"), Tombstone), what="workload tombstone"
    )
    await harness.until(lambda: isinstance(harness.pod("gone-0"), Tombstone), what="pod tombstone")
    await harness.until(
        lambda: isinstance(harness.last[subjects.node(harness.cluster, node)], Tombstone),
        what="node tombstone",
    )
    await harness.until(
        lambda: isinstance(harness.last[subjects.topology(harness.cluster, "extra")], Tombstone),
        what="topology tombstone",
    )
    assert second.stats.tombstones == 4
    # What did not change is not republished: the restart cost exactly the four tombstones.
    assert second.stats.snapshots == 0
    for subject in (
        subjects.workload(harness.cluster, NAMESPACE, "kept"),
        subjects.pod(harness.cluster, NAMESPACE, "kept-0"),
    ):
        assert harness.published[subject] == before[subject]


async def test_missing_crds_do_not_stop_the_watcher(
    tmp_path: Path, nats_url: str, cluster_id: str
) -> None:
    settings = SimSettings(
        nodes="1x1x2x8gpu",
        controllers=False,
        scheduler=False,
        kubelet=False,
        admission_gate=False,
        install_crds=False,
    )
    async with SimCluster.running(settings) as sim:
        kube = await connect_kube(KubeSettings(kubeconfig=sim.write_kubeconfig(tmp_path / "kc")))
        bus = await connect(BusSettings(servers=(nats_url,)))
        watcher = Watcher(
            bus=bus,
            kube=kube,
            settings=WatcherSettings(cluster=cluster_id, absent_retry_seconds=60),
        )
        task = asyncio.create_task(watcher.run())
        try:
            await asyncio.wait_for(watcher.ready.wait(), 20)
            assert set(watcher.unavailable) == {
                "JobSet",
                "PodGroup",
                "Topology",
                "KueueTopology",
                "Queue",
                "Cohort",
                "KueueClusterQueue",
                "KueueLocalQueue",
                "KueueCohort",
                "KueueResourceFlavor",
                "VolcanoQueue",
                "KaiQueue",
            }
            assert "is not served" in watcher.unavailable["Queue"]
            assert watcher.stats.snapshots == 2  # the two nodes
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await bus.drain()
            await kube.close()


async def test_a_relist_after_410_publishes_tombstones_for_what_vanished(harness: Harness) -> None:
    watcher = await harness.start_watcher()
    job = await harness.create(
        JOBS,
        k8s.job(
            "j",
            parallelism=2,
            completions=2,
            completionMode="Indexed",
            annotations={},
            template=TEMPLATE,
        ),
    )
    for i in range(2):
        await harness.create(PODS, k8s.pod(f"j-{i}", owner=k8s.owner_of(job)))
    await harness.until(lambda: isinstance(harness.pod("j-1"), PodState), what="pods")

    # Cut the pods watch and keep it from reconnecting while a pod is deleted and the API
    # server's history is compacted: on reconnecting, the resourceVersion is gone (410).
    async with aiohttp.ClientSession() as http:
        fault = {"code": 500, "count": 1000, "method": "GET", "pathPrefix": "/api/v1/pods"}
        async with http.post(f"{harness.sim.url}/sim/v1/faults", json=fault) as response:
            assert response.status == 201
        harness.sim.api.store.close_watchers()
        await harness.delete(PODS, "j-0")
        async with http.post(f"{harness.sim.url}/sim/v1/compact") as response:
            assert response.status == 200
        await asyncio.sleep(0.5)
        assert isinstance(harness.pod("j-0"), PodState)  # not seen yet
        async with http.delete(f"{harness.sim.url}/sim/v1/faults") as response:
            assert response.status == 200

    await harness.until(lambda: isinstance(harness.pod("j-0"), Tombstone), what="pod tombstone")
    assert watcher.stats.relists.get("Pod", 0) >= 1
    assert isinstance(harness.pod("j-1"), PodState)


async def test_a_namespace_being_deleted_marks_its_workloads(harness: Harness) -> None:
    # Nothing empties the namespace here (no controllers), so it stays Terminating with its
    # Job, as a namespace held by a finalizer does: admission must not admit what it holds.
    await harness.start_watcher()
    job = await harness.create(
        JOBS,
        k8s.job(
            "doomed",
            parallelism=1,
            completions=1,
            completionMode="Indexed",
            annotations={"tidegate.io/queue": "q"},
            template=TEMPLATE,
        ),
    )
    await harness.create(PODS, k8s.pod("doomed-0", owner=k8s.owner_of(job)))
    await harness.until(lambda: workload(harness, "doomed"), what="workload doomed")
    assert not workload(harness, "doomed").namespace_deleting
    await harness.kube.delete(NAMESPACES, NAMESPACE)
    await harness.until(
        lambda: workload(harness, "doomed").namespace_deleting, what="namespace_deleting set"
    )
