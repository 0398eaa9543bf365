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

Everything is read from the API server (pods, the Jobs, Events); on the simulator the sampled
invariants (tests/e2e/invariants.py) and the decision log are checked too, on the real control
plane the audit log (no request refused, none outside the chart's RBAC).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry, queue_object, workload_object
from tidegate.kube import EVENTS, JOBS, PODS, QUEUES, KubeClient
from tidegate.model import Released
from tidegate.model.names import RESUME_ANNOTATION
from tidegate.testing import until_async
from tidegate.testing.controlplane import ControlPlane

from .real import real_system
from .system import running_system

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODES = "1x1x2x8gpu"
GANG = {"cpu": "4", "nvidia.com/gpu": 8}
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
TIDEGATE_QUEUE = "tidegate.io/queue"

JsonObject = dict[str, Any]


@dataclass
class Platform:
    """What the scenario needs of the cluster it runs on."""

    kube: KubeClient
    namespace: str
    queue: str
    healthy: Callable[[str], None]
    """Fails (naming ``what``) when a service died or an invariant broke."""


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


async def pods_of(platform: Platform, name: str) -> list[JsonObject]:
    """The Job's live pods (not being deleted), from the API server."""
    listed = await platform.kube.list_objects(
        PODS,
        namespace=platform.namespace,
        label_selector=f"app={name}",
    )
    return [dict(p) for p in listed.items if not p["metadata"].get("deletionTimestamp")]


def is_gated(pod: JsonObject) -> bool:
    return any(
        g.get("name") == "tidegate.io/admission" for g in pod["spec"].get("schedulingGates") or []
    )


async def wait(
    platform: Platform, check: Callable[[], Awaitable[object]], what: str, within: float = 120.0
) -> Any:
    async def checked() -> object:
        platform.healthy(what)
        return await check()

    return await until_async(checked, within=within, what=what, interval=0.25)


async def scenario(platform: Platform) -> None:
    kube, ns = platform.kube, platform.namespace

    async def running(name: str) -> bool:
        pods = await pods_of(platform, name)
        return len(pods) == 2 and all(
            p["status"].get("phase") == "Running" and not is_gated(p) for p in pods
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
    await kube.create(JOBS, job("held", platform.queue), namespace=ns)
    await wait(platform, lambda: running("held"), "held running")

    async def marked() -> bool:
        stored = await kube.get(JOBS, "held", namespace=ns)
        return stored["metadata"].get("annotations", {}).get(RESUME_ANNOTATION) == "manual"

    # Admitted: from now on a suspension of it is its user's (docs/workloads.md).
    await wait(platform, marked, "held marked tidegate.io/resume: manual on admission")

    # 2. suspended by its user: pods gone, admission released (Event on the Job).
    await kube.patch(JOBS, "held", {"spec": {"suspend": True}}, namespace=ns)
    await wait(platform, lambda: _none(pods_of(platform, "held")), "held's pods deleted")
    suspended = await wait(platform, lambda: event("held", "Suspended"), "Suspended Event")
    assert "was suspended" in suspended["message"]

    # 3. Kueue's way: created suspended with only Kueue's queue label; runs on the whole room.
    await kube.create(JOBS, job("kq", platform.queue, kueue=True), namespace=ns)
    await wait(platform, lambda: running("kq"), "the Kueue-style Job unsuspended and running")
    stored = await kube.get(JOBS, "kq", namespace=ns)
    assert stored["spec"]["suspend"] is False
    assert stored["metadata"]["annotations"][RESUME_ANNOTATION] == "manual"
    assert await pods_of(platform, "held") == []  # still suspended: respected

    # 4. resumed: gated while kq holds the room, runs once kq is gone.
    await kube.patch(JOBS, "held", {"spec": {"suspend": False}}, namespace=ns)

    async def held_gated() -> bool:
        pods = await pods_of(platform, "held")
        return len(pods) == 2 and all(is_gated(p) for p in pods)

    await wait(platform, held_gated, "held's new pods gated while kq runs")
    await kube.delete(JOBS, "kq", namespace=ns, propagation="Background")
    await wait(platform, lambda: running("held"), "held running again after kq left")
    platform.healthy("the end")


async def _none(pods: Awaitable[list[JsonObject]]) -> bool:
    return not await pods


async def test_suspend_resume_and_kueue_style_jobs_on_the_simulator(tmp_path: Path) -> None:
    async with running_system(tmp_path, nodes=NODES, time_scale=0.02, namespace="sus") as system:
        await system.set_up(priority_classes={}, queues=[QueueEntry(name="q", spec={})])
        await scenario(Platform(system.kube, "sus", "q", system.assert_healthy))
        released = [r for r in system.of(Released, "held") if r.reason == "Suspended"]
        assert len(released) == 1, system.report()
        assert system.admission_problems() == [], system.report()


@pytest.mark.real_k8s
async def test_suspend_resume_and_kueue_style_jobs_on_real_kubernetes(
    real_cluster: ControlPlane, nats_url: str, tmp_path: Path
) -> None:
    async with real_system(real_cluster, nats_url, tmp_path, nodes=NODES) as system:

        async def both_nodes() -> bool:
            return len(await system.ready_nodes()) == 2

        await until_async(both_nodes, within=90.0, what="2 fake nodes Ready")
        queue = f"q-{system.cluster}"
        await system.admin.create(
            QUEUES, queue_object(QueueEntry(name=queue, spec={"cardQuota": {"NVIDIA-H200": 64}}))
        )

        def healthy(what: str) -> None:
            for process in system.services.values():
                process.check()
            assert system.forbidden() == [], what

        await scenario(Platform(system.admin, system.namespace, queue, healthy))
        missing, _ = system.rbac_report()
        assert {s: m for s, m in missing.items() if m} == {}
