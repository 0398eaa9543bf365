"""A workload in a namespace being deleted is never admitted, on the simulator and on the real
control plane.

On a cluster of exactly two 8-GPU nodes (room for one 2-pod, 16-GPU gang), ``blocker`` runs and
takes it all. Job ``doomed``, written the Kueue way (created suspended: it is admitted from its
spec, with no pod to wait for), is created in a second namespace and waits (a ``pending``
decision). That namespace is then deleted: it goes Terminating, and ``doomed``, which carries a
finalizer of the test's own, stays in it with a ``deletionTimestamp`` — as a Job held by a
tracking finalizer does (docs/preemption.md). Job ``elsewhere``, the same shape, is created in
the first namespace after it, so it is behind ``doomed`` in the queue. When ``blocker`` is
deleted, ``elsewhere`` is admitted and runs; ``doomed`` is never admitted and stays suspended
(the watcher follows Namespaces and publishes it with ``namespace_deleting``;
docs/workloads.md). Once the test removes its finalizer the namespace goes.

Read from the API server (the Jobs, the namespace, pods) and the decision log; on both the
sampled invariants, on the real control plane the audit log too.
"""

import contextlib
from pathlib import Path

import pytest

from tidegate.cli.demo_trace import QueueEntry
from tidegate.kube import JOBS, NAMESPACES, NotFound
from tidegate.model import Admitted, Pending

from .invariants import gated
from .platform import JsonObject, Platform, live_pods, wait
from .real import RealTidegate
from .system import running_system
from .test_suspend import job

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODES = "1x1x2x8gpu"
HOLD = "tidegate.io/test-hold"
"""A finalizer of the test's own: it keeps ``doomed`` (and so its namespace) while it looks."""


async def scenario(platform: Platform, queue: str) -> None:
    kube, ns = platform.kube, platform.namespace
    doomed_ns = f"{ns}-doomed"
    doomed = f"{doomed_ns}/doomed"

    async def running(name: str) -> bool:
        pods = await live_pods(platform, name)
        return len(pods) == 2 and all(
            p["status"].get("phase") == "Running" and not gated(p) for p in pods
        )

    def decided(kind: type, workload: str) -> list[object]:
        return [
            d
            for d in platform.decisions
            if isinstance(d, kind) and getattr(d, "workload", None) == workload
        ]

    await kube.create(JOBS, job("blocker", queue), namespace=ns)
    await wait(platform, lambda: running("blocker"), "blocker running")

    namespace: JsonObject = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": doomed_ns, "labels": {"tidegate.io/managed": "true"}},
    }
    await kube.create(NAMESPACES, namespace)
    try:
        body = job("doomed", queue, kueue=True)
        body["metadata"]["finalizers"] = [HOLD]
        await kube.create(JOBS, body, namespace=doomed_ns)

        async def pending() -> bool:
            return bool(decided(Pending, doomed))

        await wait(platform, pending, "doomed pending (the cluster is full)")

        await kube.delete(NAMESPACES, doomed_ns)

        async def terminating() -> bool:
            stored = await kube.get(NAMESPACES, doomed_ns)
            held = await kube.get(JOBS, "doomed", namespace=doomed_ns)
            return stored["status"].get("phase") == "Terminating" and bool(
                held["metadata"].get("deletionTimestamp")
            )

        await wait(platform, terminating, "the namespace Terminating, doomed held in it")

        await kube.create(JOBS, job("elsewhere", queue, kueue=True), namespace=ns)
        await kube.delete(JOBS, "blocker", namespace=ns, propagation="Background")
        await wait(platform, lambda: running("elsewhere"), "elsewhere admitted and running")

        held = await kube.get(JOBS, "doomed", namespace=doomed_ns)
        assert held["spec"]["suspend"] is True, held
        assert decided(Admitted, doomed) == [], platform.decisions
        platform.healthy("the end")
    finally:
        with contextlib.suppress(NotFound):
            await kube.patch(
                JOBS, "doomed", {"metadata": {"finalizers": None}}, namespace=doomed_ns
            )

    async def gone() -> bool:
        try:
            await kube.get(NAMESPACES, doomed_ns)
        except NotFound:
            return True
        return False

    await wait(platform, gone, "the namespace removed once its last finalizer went")


async def test_a_workload_in_a_namespace_being_deleted_is_not_admitted_on_the_simulator(
    tmp_path: Path,
) -> None:
    async with running_system(tmp_path, nodes=NODES, time_scale=0.02, namespace="nsd") as system:
        await system.set_up(priority_classes={}, queues=[QueueEntry(name="q", spec={})])
        await scenario(Platform.of_sim(system), "q")
        assert system.admission_problems() == [], system.report()


@pytest.mark.real_k8s
async def test_a_workload_in_a_namespace_being_deleted_is_not_admitted_on_real_kubernetes(
    real_tidegate: RealTidegate,
) -> None:
    async with real_tidegate(nodes=NODES) as system:
        platform = Platform.of_real(system)
        queue = await platform.own_queue()
        async with system.observing():
            await scenario(platform, queue)
        assert system.problems() == []
