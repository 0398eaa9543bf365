"""Suspend and resume, the Kueue way too, on the simulator and on the real control plane.

One scenario on a cluster of exactly two 8-GPU nodes (room for one 2-pod, 16-GPU gang):

1. Job ``held`` (tidegate's queue label) is admitted (and marked ``tidegate.io/resume:
   manual``) and runs.
2. A user suspends it: its Job controller deletes the pods, admission releases it with reason
   ``Suspended`` and the ungater records a ``Suspended`` Event on the Job.
3. Job ``kq``, written as Kueue users write them (created ``suspend: true`` with only
   ``kueue.x-k8s.io/queue-name``), is admitted on the whole cluster — so the suspended ``held``
   reserves nothing — unsuspended by tidegate (``tidegate.io/resume: manual``) and runs.
4. The user resumes ``held``: its pods come back gated and wait; once ``kq`` is deleted,
   ``held`` runs again.

On the real control plane only (the simulator's counterpart is tests/ungater/test_resume.py),
a Kueue-style JobSet created suspended is admitted from its spec, unsuspended by tidegate and
runs.

Everything is read from the API server (pods, the Jobs, Events); on both the sampled invariants
(tests/e2e/invariants.py) and the decision log are checked too (``held`` released once, as
``Suspended``), on the real control plane the audit log (no request refused, none outside the
chart's RBAC).
"""

from collections.abc import Awaitable
from pathlib import Path

import pytest

from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry, queue_object, workload_object
from tidegate.kube import EVENTS, JOBS, JOBSETS, QUEUES
from tidegate.model import Admitted, Released
from tidegate.model.names import RESUME_ANNOTATION

from .invariants import distinct, gated
from .platform import JsonObject, Platform, live_pods, wait
from .real import RealTidegate
from .system import running_system

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODES = "1x1x2x8gpu"
GANG = {"cpu": "4", "nvidia.com/gpu": 8}
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
TIDEGATE_QUEUE = "tidegate.io/queue"


def job(name: str, queue: str, *, kueue: bool = False) -> JsonObject:
    """A 2-pod, 16-GPU Job that runs until deleted; ``kueue``: written the Kueue way."""
    body = workload_object(WorkloadEntry(name=name, queue=queue, pods=2, requests=GANG), "")
    del body["metadata"]["namespace"]
    if kueue:
        for meta in (body["metadata"], body["spec"]["template"]["metadata"]):
            meta["labels"].pop(TIDEGATE_QUEUE)
        body["metadata"]["labels"][KUEUE_QUEUE] = queue
        body["spec"]["suspend"] = True
    return body


async def scenario(platform: Platform, queue: str) -> None:
    kube, ns = platform.kube, platform.namespace

    async def running(name: str) -> bool:
        pods = await live_pods(platform, name)
        return len(pods) == 2 and all(
            p["status"].get("phase") == "Running" and not gated(p) for p in pods
        )

    async def event(name: str, reason: str) -> JsonObject | None:
        listed = await kube.list_objects(EVENTS, namespace=ns)
        for item in listed.items:
            if (
                item["involvedObject"].get("name") == name
                and item.get("reason") == reason
                and item.get("reportingComponent") == "tidegate-ungater"  # not the Job controller's
            ):
                return dict(item)
        return None

    # 1. held runs.
    await kube.create(JOBS, job("held", queue), namespace=ns)
    await wait(platform, lambda: running("held"), "held running")

    async def marked() -> bool:
        stored = await kube.get(JOBS, "held", namespace=ns)
        return stored["metadata"].get("annotations", {}).get(RESUME_ANNOTATION) == "manual"

    # Admitted: from now on a suspension of it is its user's (docs/workloads.md).
    await wait(platform, marked, "held marked tidegate.io/resume: manual on admission")

    # 2. suspended by its user: pods gone, admission released (Event on the Job).
    await kube.patch(JOBS, "held", {"spec": {"suspend": True}}, namespace=ns)
    await wait(platform, lambda: _none(live_pods(platform, "held")), "held's pods deleted")
    suspended = await wait(platform, lambda: event("held", "Suspended"), "Suspended Event")
    assert "was suspended" in suspended["message"]

    # 3. Kueue's way: created suspended with only Kueue's queue label; runs on the whole room.
    await kube.create(JOBS, job("kq", queue, kueue=True), namespace=ns)
    await wait(platform, lambda: running("kq"), "the Kueue-style Job unsuspended and running")
    stored = await kube.get(JOBS, "kq", namespace=ns)
    assert stored["spec"]["suspend"] is False
    assert stored["metadata"]["annotations"][RESUME_ANNOTATION] == "manual"
    assert await live_pods(platform, "held") == []  # still suspended: respected

    # 4. resumed: gated while kq holds the room, runs once kq is gone.
    await kube.patch(JOBS, "held", {"spec": {"suspend": False}}, namespace=ns)

    async def held_gated() -> bool:
        pods = await live_pods(platform, "held")
        return len(pods) == 2 and all(gated(p) for p in pods)

    await wait(platform, held_gated, "held's new pods gated while kq runs")
    await kube.delete(JOBS, "kq", namespace=ns, propagation="Background")
    await wait(platform, lambda: running("held"), "held running again after kq left")
    platform.healthy("the end")


async def _none(pods: Awaitable[list[JsonObject]]) -> bool:
    return not await pods


async def test_suspend_resume_and_kueue_style_jobs_on_the_simulator(tmp_path: Path) -> None:
    async with running_system(tmp_path, nodes=NODES, time_scale=0.02, namespace="sus") as system:
        await system.set_up(priority_classes={}, queues=[QueueEntry(name="q", spec={})])
        await scenario(Platform.of_sim(system), "q")
        released = [r for r in system.of(Released, "held") if r.reason == "Suspended"]
        assert len(released) == 1, system.report()
        assert system.admission_problems() == [], system.report()


@pytest.mark.real_k8s
async def test_suspend_resume_and_kueue_style_jobs_on_real_kubernetes(
    real_tidegate: RealTidegate,
) -> None:
    async with real_tidegate(nodes=NODES) as system:
        platform = Platform.of_real(system)
        queue = await platform.own_queue()
        async with system.observing():
            await scenario(platform, queue)
        assert system.problems() == []
        held = f"{system.namespace}/held"
        released = [
            d
            for d in distinct(system.decisions)
            if isinstance(d, Released) and d.workload == held and d.reason == "Suspended"
        ]
        assert len(released) == 1, system.decisions


def kueue_jobset(name: str, queue: str) -> JsonObject:
    """A JobSet written as Kueue users write them: created ``suspend: true`` with only
    ``kueue.x-k8s.io/queue-name``; one replicated Job of 2 pods × 8 GPUs (the whole cluster)."""
    child = workload_object(WorkloadEntry(name=name, pods=2, requests=GANG), "")
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {KUEUE_QUEUE: queue}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": "workers", "replicas": 1, "template": {"spec": child["spec"]}}
            ],
        },
    }


@pytest.mark.real_k8s
async def test_a_kueue_style_suspended_jobset_is_admitted_and_unsuspended_on_real_kubernetes(
    real_tidegate: RealTidegate,
) -> None:
    """Its child Job is created suspended (no pods yet): tidegate admits the JobSet from its
    spec and unsuspends it (``tidegate.io/resume: manual``); once its child Job is resumed
    too (the test plays the JobSet controller: :meth:`RealSystem.sync_jobset_suspend`) the Job
    controller creates the pods, the API server's webhook gates them, the ungater releases
    them and kube-scheduler binds them."""
    async with real_tidegate(nodes=NODES) as system:
        platform = Platform.of_real(system)
        ns, queue = system.namespace, f"q{platform.suffix}"
        await system.admin.create(
            QUEUES, queue_object(QueueEntry(name=queue, spec={"cardQuota": {"NVIDIA-H200": 64}}))
        )
        async with system.observing():
            await system.create_jobset(kueue_jobset("kjs", queue))
            assert await live_pods(platform, "kjs") == []  # suspended: no pods to gate

            async def unsuspended() -> JsonObject | None:
                stored = await system.admin.get(JOBSETS, "kjs", namespace=ns)
                return dict(stored) if stored["spec"].get("suspend") is False else None

            stored = await wait(platform, unsuspended, "the JobSet unsuspended on admission")
            assert stored["metadata"]["annotations"][RESUME_ANNOTATION] == "manual"
            await system.sync_jobset_suspend("kjs")

            async def running() -> bool:
                pods = await live_pods(platform, "kjs")
                return len(pods) == 2 and all(
                    p["status"].get("phase") == "Running" and not gated(p) for p in pods
                )

            await wait(platform, running, "the JobSet's pods running")
        assert system.problems() == []
        admitted = [
            d.workload
            for d in distinct(system.decisions)
            if isinstance(d, Admitted) and d.workload.startswith(f"{ns}/")
        ]
        assert admitted == [f"{ns}/kjs"], system.decisions
