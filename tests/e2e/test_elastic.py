"""Elastic workloads and rolling updates, on the simulator and on the real control plane.

One scenario on two 8-GPU nodes, one inference Deployment ``web`` of 1-GPU pods:

1. created with 2 replicas: 2 pods run, the queue's usage (its ``status.usage``, written by
   the ungater from the admissions in force) shows 2 GPUs;
2. scaled to 6: the 4 new pods are admitted as growth (a resize of the admission, the quota
   checked for the delta) and run; usage 6;
3. scaled to 1: the pods go and their slots are given back; usage 1;
4. its template changes (the default strategy: maxSurge 1, maxUnavailable 0 for 1 replica):
   the surge pod is a temporary growth, admitted and released beside the old pod, which then
   leaves; one pod of the new template runs, usage 1.

Everything is read from the API server (pods, the Deployment, the Queue's status); the
sampled invariants of tests/e2e/invariants.py and the decision log are checked throughout, on
the real control plane the audit log too (no request refused, none outside the chart's RBAC).
"""

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tidegate.cli.demo_trace import (
    QueueEntry,
    WorkloadEntry,
    priority_class_object,
    queue_object,
)
from tidegate.kube import (
    DEPLOYMENTS,
    JOBS,
    PRIORITY_CLASSES,
    QUEUES,
    AlreadyExists,
)
from tidegate.model import Admitted, Preempted

from .invariants import distinct, gated
from .platform import Platform, live_pods, submitted, wait
from .real import RealTidegate
from .system import running_system

pytestmark = [pytest.mark.slow(15), pytest.mark.timeout(300)]

NODES = "1x1x2x8gpu"
POD = {"cpu": "100m", "nvidia.com/gpu": 1}
QUEUE_SPEC = {"capability": {"nvidia.com/gpu": "16"}}


def running(
    platform: Platform, app: str, count: int, revision: str | None = None
) -> Callable[[], Awaitable[bool]]:
    """A check: ``count`` live pods of ``app`` run, released (of template ``revision``)."""

    async def check() -> bool:
        pods = await live_pods(platform, app)
        return len(pods) == count and all(
            p["status"].get("phase") == "Running"
            and not gated(p)
            and (
                revision is None or p["metadata"].get("annotations", {}).get("revision") == revision
            )
            for p in pods
        )

    return check


def usage(platform: Platform, queue: str, gpus: int) -> Callable[[], Awaitable[bool]]:
    """A check: Queue ``queue``'s ``status.usage`` shows ``gpus`` GPUs."""

    async def check() -> bool:
        stored = await platform.kube.get(QUEUES, queue)
        return stored.get("status", {}).get("usage", {}).get("nvidia.com/gpu") == str(gpus)

    return check


def rolled_out(platform: Platform, name: str, replicas: int) -> Callable[[], Awaitable[bool]]:
    """A check: Deployment ``name`` completed its rollout at ``replicas`` replicas."""

    async def check() -> bool:
        stored = await platform.kube.get(DEPLOYMENTS, name, namespace=platform.namespace)
        status = stored.get("status", {})
        return (
            status.get("observedGeneration", 0) >= stored["metadata"].get("generation", 1)
            and status.get("updatedReplicas") == replicas
            and status.get("replicas") == replicas
            and status.get("availableReplicas") == replicas
        )

    return check


async def scenario(platform: Platform, queue: str) -> None:
    kube, ns = platform.kube, platform.namespace

    async def scale(replicas: int) -> None:
        await kube.patch(DEPLOYMENTS, "web", {"spec": {"replicas": replicas}}, namespace=ns)

    # 1. two replicas.
    web = WorkloadEntry(name="web", kind="Deployment", queue=queue, pods=2, requests=POD)
    await kube.create(DEPLOYMENTS, submitted(web), namespace=ns)
    await wait(platform, running(platform, "web", 2), "2 pods of web running")
    await wait(platform, usage(platform, queue, 2), "queue usage 2 GPUs")

    # 2. grows to six: the delta is admitted.
    await scale(6)
    await wait(platform, running(platform, "web", 6), "6 pods of web running after the scale-up")
    await wait(platform, usage(platform, queue, 6), "queue usage 6 GPUs")

    # 3. shrinks to one: the slots its pods leave are given back.
    await scale(1)
    await wait(platform, running(platform, "web", 1), "1 pod of web running after the scale-down")
    await wait(platform, usage(platform, queue, 1), "queue usage back to 1 GPU")

    # 4. a template change rolls out under the gate (surge pod, then the old one goes).
    template_change = {"spec": {"template": {"metadata": {"annotations": {"revision": "2"}}}}}
    await kube.patch(DEPLOYMENTS, "web", template_change, namespace=ns)
    await wait(
        platform, rolled_out(platform, "web", 1), "the rollout of web's new template completed"
    )
    await wait(
        platform, running(platform, "web", 1, revision="2"), "web's one pod is of the new template"
    )
    await wait(platform, usage(platform, queue, 1), "queue usage 1 GPU after the rollout")
    platform.healthy("the end")


async def growth_preempts(platform: Platform, online: str, offline: str) -> None:
    """An inference Deployment that grows into a full cluster takes the room of a training
    Job: its growth (only the extra pods) is the preemptor, the Job is re-queued whole (suspended
    for tidegate) and waits again, the Deployment runs its 4 pods."""
    kube, ns = platform.kube, platform.namespace

    train = WorkloadEntry(
        name="train", queue=offline, priority_class="batch", pods=1, requests={"nvidia.com/gpu": 8}
    )
    await kube.create(JOBS, submitted(train), namespace=ns)
    await wait(platform, running(platform, "train", 1), "train running")
    serve = WorkloadEntry(
        name="serve",
        kind="Deployment",
        queue=online,
        priority_class="serving",
        pods=2,
        requests={"nvidia.com/gpu": 4},
    )
    await kube.create(DEPLOYMENTS, submitted(serve), namespace=ns)
    await wait(platform, running(platform, "serve", 2), "serve running on the other node")
    await kube.patch(DEPLOYMENTS, "serve", {"spec": {"replicas": 4}}, namespace=ns)
    await wait(platform, running(platform, "serve", 4), "serve grown to 4 pods by preempting train")

    async def train_waits() -> bool:
        # Re-queued by suspending it (its controller deleted the pod, counting no failure).
        job = await kube.get(JOBS, "train", namespace=ns)
        return (
            not await live_pods(platform, "train")
            and job["spec"].get("suspend") is True
            and "tidegate.io/requeued" in (job["metadata"].get("annotations") or {})
        )

    await wait(platform, train_waits, "train re-queued (suspended for tidegate) and waiting")
    platform.healthy("the end")


def resized(admissions: list[Admitted]) -> list[Admitted]:
    return [a for a in admissions if a.resized]


async def test_scale_up_down_and_rollout_on_the_simulator(tmp_path: Path) -> None:
    async with running_system(
        tmp_path, nodes=NODES, time_scale=0.02, namespace="elastic"
    ) as system:
        await system.set_up(
            priority_classes={}, queues=[QueueEntry(name="q", spec=dict(QUEUE_SPEC))]
        )
        await scenario(Platform.of_sim(system), "q")
        # The capacity view holds exactly the reservations of the admission in force.
        await system.until_bus_agrees(within=30.0)
        admissions = system.of(Admitted, "web")
        # First admission, then resizes only: growth to 6, give-backs, the surge and its end.
        assert admissions[0].replaces is None, system.report()
        assert len(resized(admissions)) == len(admissions) - 1 >= 3, system.report()
        assert system.admission_problems() == [], system.report()


@pytest.mark.real_k8s
async def test_scale_up_down_and_rollout_on_real_kubernetes(real_tidegate: RealTidegate) -> None:
    async with real_tidegate(nodes=NODES) as system:
        queue = f"q-{system.cluster}"
        await system.admin.create(
            QUEUES, queue_object(QueueEntry(name=queue, spec=dict(QUEUE_SPEC)))
        )
        async with system.observing():
            await scenario(Platform.of_real(system), queue)
        assert system.problems() == []
        admissions = [a for a in distinct(system.decisions) if isinstance(a, Admitted)]
        assert admissions[0].replaces is None, admissions
        assert len(resized(admissions)) == len(admissions) - 1 >= 3, admissions


async def test_growth_preempts_training_on_the_simulator(tmp_path: Path) -> None:
    async with running_system(tmp_path, nodes=NODES, time_scale=0.02, namespace="grow") as system:
        await system.set_up(
            priority_classes={"serving": 100000, "batch": 10000},
            queues=[
                QueueEntry(name="online", spec={"priority": 100, "reclaimable": False}),
                QueueEntry(name="offline", spec={"priority": 10}),
            ],
        )
        await growth_preempts(Platform.of_sim(system), "online", "offline")
        (preempted,) = system.of(Preempted, "serve")
        assert preempted.victims == ["grow/train"], system.report()
        assert system.admission_problems() == [], system.report()


@pytest.mark.real_k8s
async def test_growth_preempts_training_on_real_kubernetes(real_tidegate: RealTidegate) -> None:
    async with real_tidegate(nodes=NODES) as system:
        run = system.cluster
        online, offline = f"online-{run}", f"offline-{run}"
        for name, value in (("serving", 100000), ("batch", 10000)):
            with contextlib.suppress(AlreadyExists):  # cluster-wide, shared by the session
                await system.admin.create(PRIORITY_CLASSES, priority_class_object(name, value))
        for name, spec in (
            (online, {"priority": 100, "reclaimable": False}),
            (offline, {"priority": 10}),
        ):
            await system.admin.create(QUEUES, queue_object(QueueEntry(name=name, spec=spec)))
        async with system.observing():
            await growth_preempts(Platform.of_real(system), online, offline)
        assert system.problems() == []
        preempted = [d for d in distinct(system.decisions) if isinstance(d, Preempted)]
        assert [p.victims for p in preempted] == [[f"{system.namespace}/train"]]
