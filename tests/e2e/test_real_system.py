"""The whole system on the real control plane: chart RBAC, the API server's own gate webhook,
the real kube-scheduler, fake nodes from ``tidegate nodes``; every check reads the real API
server's objects or its audit log."""

import pytest

from tidegate.cli.demo_trace import (
    QueueEntry,
    WorkloadEntry,
    priority_class_object,
    queue_object,
    workload_object,
)
from tidegate.kube import (
    DEPLOYMENTS,
    JOBS,
    JOBSETS,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
)
from tidegate.model import Admitted, Pending, Preempted, Released
from tidegate.model.names import RESUME_ANNOTATION
from tidegate.testing import until_async

from .invariants import gated
from .real import RealSystem, RealTidegate

pytestmark = [pytest.mark.real_k8s, pytest.mark.slow(20), pytest.mark.timeout(300)]

GPU_JOB = {"cpu": "8", "nvidia.com/gpu": 8}


RACK, BLOCK = "tidegate.io/rack", "tidegate.io/block"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


def rack_of(nodes: dict[str, dict[str, object]], pod: dict[str, object]) -> str:
    return level_of(nodes, pod, RACK)


def level_of(nodes: dict[str, dict[str, object]], pod: dict[str, object], level: str) -> str:
    """The ``level`` label of the node the pod is bound to, as the API server has it."""
    node = nodes[pod["spec"]["nodeName"]]  # type: ignore[index]
    return str(node["metadata"]["labels"][level])  # type: ignore[index]


async def running_pods(
    system: RealSystem, job: str, count: int, *, label: str = "job-name"
) -> list[dict[str, object]] | None:
    """The ``count`` running pods whose ``label`` is ``job``, or None while there are not."""
    pods = [p for p in await system.pods() if _labels(p).get(label) == job and _running(p)]
    return pods if len(pods) == count else None


async def all_nodes(system: RealSystem) -> dict[str, dict[str, object]]:
    """Every Node object by name, from the API server."""
    listed = await system.admin.list_objects(NODES)
    return {str(n["metadata"]["name"]): n for n in listed.items}  # type: ignore[index]


async def test_kueue_and_kai_jobs_land_in_one_rack_through_a_watcher_crash(
    real_tidegate: RealTidegate,
) -> None:
    async with real_tidegate(nodes="1x2x2x8gpu") as system:
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
        # This test's namespace only: the session's control plane is shared with other tests'
        # systems (a workload of a namespace being deleted is no longer admitted:
        # tests/e2e/test_namespace_deleting.py).
        admitted = {
            d.workload
            for d in system.decisions
            if isinstance(d, Admitted) and d.workload.startswith(f"{system.namespace}/")
        }
        assert admitted == {f"{system.namespace}/kueue", f"{system.namespace}/kai"}, admitted
        nodes = await all_nodes(system)
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
    real_tidegate: RealTidegate,
) -> None:
    """Inference takes a rack from a training Job (restart: checked with dry-run evictions and
    suspended for tidegate, so the Job controller deletes its pods without counting failures;
    it is admitted again and unsuspended once inference is gone); a PodGroup gang of bare pods in the other rack is left whole until a
    second inference Deployment needs that rack: then the gang is the victim, evicted whole
    (its room counted once by the topology-cache: counted twice, the search would answer "at
    best 0 of 2 pods … fit"); a malformed workload sits beside them the whole
    time."""
    async with real_tidegate(nodes="1x2x2x8gpu") as system:
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

            await start_inference(system, "serve", online, serving)
            preempted = [d for d in system.decisions if isinstance(d, Preempted)]
            victims = {v for d in preempted for v in d.victims}
            assert victims == {f"{ns}/train"}, victims

            # train is re-queued by suspending it (tidegate.io/requeued): the Job controller
            # deletes its pods itself and counts no failure (evicted, they were failures that
            # delayed the replacements by its backoff); no pod exists until it is re-admitted.
            async def train_requeued() -> bool:
                job = await system.admin.get(JOBS, "train", namespace=ns)
                annotations = job["metadata"].get("annotations") or {}
                live = [
                    p
                    for p in await system.pods()
                    if _labels(p).get("job-name") == "train"
                    and not p["metadata"].get("deletionTimestamp")  # type: ignore[union-attr]
                ]
                return (
                    job["spec"].get("suspend") is True
                    and "tidegate.io/requeued" in annotations
                    and not live
                )

            await until_async(
                train_requeued, within=90.0, what="train suspended for tidegate, its pods gone"
            )
            train_job = await system.admin.get(JOBS, "train", namespace=ns)
            assert not (train_job.get("status") or {}).get("failed"), train_job.get("status")

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
            await start_inference(system, "serve2", online, serving)
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
                pods = await running_pods(system, "train", 2)
                return pods is not None and not first_train & {
                    p["metadata"]["uid"]  # type: ignore[index]
                    for p in pods
                }

            await until_async(train_back, within=150.0, what="train re-admitted and Running")
        assert system.problems() == []
        admitted = [d.workload for d in system.decisions if isinstance(d, Admitted)]
        assert admitted.count(f"{ns}/train") == 2, admitted
        assert f"{ns}/broken" not in admitted
        # It ends pending, refused as Invalid, the bad annotation named.
        pending = [
            d for d in system.decisions if isinstance(d, Pending) and d.workload == f"{ns}/broken"
        ]
        assert pending, system.decisions
        assert pending[-1].reason == "Invalid", pending
        assert "tidegate.io/queue" in pending[-1].message, pending[-1]


def jobset(name: str, queue: str, *, replicas: int, level: str) -> dict[str, object]:
    """A JobSet of ``replicas`` one-pod Jobs of a whole 8-GPU node each, all required in one
    ``level`` domain by KAI's annotation on the JobSet itself (a per-podset setting, read from
    the pod template first, then the job template, then the top owner: docs/workloads.md)."""
    # Each Job as the demo's trace writes one (its labels, limits and Indexed completion mode).
    job = workload_object(WorkloadEntry(name=name, pods=1, requests=GPU_JOB), "")
    job_template = {"spec": job["spec"]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "labels": {"tidegate.io/queue": queue},
            "annotations": {"kai.scheduler/topology-required-placement": level},
        },
        "spec": {
            "replicatedJobs": [{"name": "workers", "replicas": replicas, "template": job_template}]
        },
    }


async def test_a_jobset_in_one_rack_and_a_kueue_job_in_one_block(
    real_tidegate: RealTidegate,
) -> None:
    """Two blocks of two racks of two 8-GPU nodes. A JobSet of two one-pod Jobs is required
    in one rack (KAI's annotation), a Kueue Job of four whole-node pods in one block (Kueue's
    ``podset-required-topology`` at block level): read from the bound pods' nodes' labels, the
    JobSet sits in one rack and the Kueue Job fills the other block. A third Job waits for its
    queue's quota (48 GPUs: both are in), though a rack is free, and is admitted once the
    JobSet is deleted (the garbage collector removes its Jobs and pods by their
    ownerReferences) and its quota is returned.

    The JobSet CRD is installed but no JobSet controller runs: the test creates the JobSet's
    child Jobs as the controller would (:meth:`RealSystem.create_jobset`); all the rest is real
    (the Job controller, the API server's call to the gate webhook, tidegate, kube-scheduler,
    garbage collection)."""
    async with real_tidegate(nodes="2x2x2x8gpu") as system:
        ns = system.namespace
        queue = f"q-{system.cluster}"
        await system.admin.create(
            QUEUES,
            queue_object(
                QueueEntry(
                    name=queue, spec={"priority": 10, "capability": {"nvidia.com/gpu": "48"}}
                )
            ),
        )
        wide = WorkloadEntry(
            name="wide",
            queue=queue,
            pods=4,
            requests=GPU_JOB,
            template_annotations={"kueue.x-k8s.io/podset-required-topology": BLOCK},
        )
        after = WorkloadEntry(
            name="after",
            queue=queue,
            pods=2,
            requests=GPU_JOB,
            annotations={"tidegate.io/topology-required": RACK},
        )
        async with system.observing():
            await system.create_jobset(jobset("js", queue, replicas=2, level=RACK))
            await system.admin.create(JOBS, workload_object(wide, ns), namespace=ns)

            async def js_runs() -> list[dict[str, object]] | None:
                return await running_pods(system, "js", 2, label=JOBSET_NAME)

            async def wide_runs() -> list[dict[str, object]] | None:
                return await running_pods(system, "wide", 4)

            js_pods = await until_async(js_runs, within=120.0, what="the JobSet's pods Running")
            wide_pods = await until_async(wide_runs, within=120.0, what="wide's pods Running")

            # Admitted: the ungater marked the JobSet (a merge patch on the custom resource).
            stored = await system.admin.get(JOBSETS, "js", namespace=ns)
            annotations = stored["metadata"].get("annotations") or {}  # type: ignore[union-attr]
            assert annotations.get(RESUME_ANNOTATION) == "manual", annotations

            # The queue's 48 GPUs are all held: after waits, gated, for quota.
            await system.admin.create(JOBS, workload_object(after, ns), namespace=ns)

            async def after_waits_for_quota() -> bool:
                return any(
                    isinstance(d, Pending)
                    and d.workload == f"{ns}/after"
                    and d.reason == "ExceedsQuota"
                    for d in system.decisions
                )

            def about_after() -> str:
                seen = [d for d in system.decisions if getattr(d, "workload", "") == f"{ns}/after"]
                return f"; decisions about after: {seen}"

            await until_async(
                after_waits_for_quota,
                within=60.0,
                what="after pending on quota",
                describe=about_after,
            )
            assert all(gated(p) for p in await system.pods() if _labels(p).get("app") == "after")

            await system.admin.delete(JOBSETS, "js", namespace=ns, propagation="Background")

            async def after_runs() -> list[dict[str, object]] | None:
                return await running_pods(system, "after", 2)

            after_pods = await until_async(
                after_runs, within=120.0, what="after admitted once the JobSet is gone"
            )

            async def child_jobs_gone() -> bool:
                listed = await system.admin.list_objects(
                    JOBS, namespace=ns, label_selector=f"{JOBSET_NAME}=js"
                )
                return not listed.items

            await until_async(child_jobs_gone, within=60.0, what="the JobSet's Jobs collected")
        assert system.problems() == []
        assert system.checks is not None
        assert system.checks.samples > 0
        mine = [d for d in system.decisions if getattr(d, "workload", "").startswith(f"{ns}/")]
        admitted = [d.workload for d in mine if isinstance(d, Admitted)]
        assert sorted(admitted) == sorted(f"{ns}/{w}" for w in ("js", "wide", "after")), admitted
        released = [d for d in mine if isinstance(d, Released)]
        assert [(d.workload, d.reason) for d in released] == [(f"{ns}/js", "Deleted")], released

        nodes = await all_nodes(system)
        js_racks = {level_of(nodes, p, RACK) for p in js_pods}
        wide_blocks = {level_of(nodes, p, BLOCK) for p in wide_pods}
        js_blocks = {level_of(nodes, p, BLOCK) for p in js_pods}
        assert len(js_racks) == 1, js_racks
        assert len(wide_blocks) == 1, wide_blocks
        assert wide_blocks != js_blocks, (wide_blocks, js_blocks)  # a block has 4 nodes
        assert len({level_of(nodes, p, RACK) for p in after_pods}) == 1
        for pod in js_pods:
            assert RACK in (pod["spec"].get("nodeSelector") or {}), pod["metadata"]  # type: ignore[union-attr, index]
        for pod in wide_pods:
            assert BLOCK in (pod["spec"].get("nodeSelector") or {}), pod["metadata"]  # type: ignore[union-attr, index]


async def start_inference(system: RealSystem, name: str, queue: str, priority_class: str) -> None:
    """An inference Deployment of two whole-node pods; returns once both run."""
    entry = WorkloadEntry(
        name=name,
        kind="Deployment",
        queue=queue,
        priority_class=priority_class,
        pods=2,
        requests=GPU_JOB,
        annotations={"volcano.sh/service.type": "inference"},
    )
    body = workload_object(entry, system.namespace)
    await system.admin.create(DEPLOYMENTS, body, namespace=system.namespace)

    async def both_run() -> bool:
        pods = [p for p in await system.pods() if _app(p) == name and _running(p)]
        return len(pods) == 2

    await until_async(both_run, within=150.0, what=f"both pods of {name} Running")


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
