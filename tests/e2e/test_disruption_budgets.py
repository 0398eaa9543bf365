"""PodDisruptionBudgets and tidal preemption, on the simulator and on the real control plane.

Four 8-GPU nodes, full: training Jobs ``a`` (lowest priority: the victim the search would pick)
and ``b`` run 2 × 8 GPUs each, and a PodDisruptionBudget (``minAvailable: 2``) protects ``a``'s
pods. An inference Deployment ``serve`` of 2 × 8 GPUs arrives: the preemption must take ``b``
whole and leave ``a`` untouched — not one of ``a``'s pods is deleted, so ``a`` is never half
evicted — and ``serve`` runs.

Read from the API server: pods (by uid), Events (``Preempted`` on ``b`` only); on both also
the decision log (the ``preempted`` decision names ``b`` and says ``a`` was skipped for its
budget) and the sampled invariants (tests/e2e/invariants.py: whole gangs, evicted whole, no
overcommit, …); on the real control plane the audit log (no request refused, none outside the
chart's RBAC: the watcher's new grant on poddisruptionbudgets is used).
"""

from pathlib import Path

import pytest

from tidegate.bus import Received, layout
from tidegate.cli.demo_trace import (
    QueueEntry,
    WorkloadEntry,
    priority_class_object,
    queue_object,
    workload_object,
)
from tidegate.kube import DEPLOYMENTS, EVENTS, JOBS, PDBS, PRIORITY_CLASSES, QUEUES
from tidegate.model import DisruptionBudgetState, Preempted, subjects
from tidegate.testing import connected, following

from .invariants import distinct
from .platform import JsonObject, Platform, live_pods, wait
from .real import RealTidegate
from .system import running_system

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODES = "1x2x2x8gpu"
GANG = {"cpu": "4", "nvidia.com/gpu": 8}


def running(pods: list[JsonObject], count: int) -> bool:
    return len(pods) == count and all(
        p["status"].get("phase") == "Running" and not p["spec"].get("schedulingGates") for p in pods
    )


async def scenario(platform: Platform) -> None:
    kube, ns, sfx = platform.kube, platform.namespace, platform.suffix
    for name, value in (("low", 5_000), ("mid", 10_000), ("serving", 100_000)):
        await kube.create(PRIORITY_CLASSES, priority_class_object(f"{name}{sfx}", value))
    for entry in (
        QueueEntry(name=f"online{sfx}", spec={"priority": 100, "reclaimable": False}),
        QueueEntry(name=f"offline{sfx}", spec={"priority": 10, "reclaimable": True}),
    ):
        await kube.create(QUEUES, queue_object(entry))
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-a"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "a"}}},
    }
    await kube.create(PDBS, budget, namespace=ns)
    for name, priority in (("a", "low"), ("b", "mid")):
        entry = WorkloadEntry(
            name=name, queue=f"offline{sfx}", priority_class=f"{priority}{sfx}", pods=2,
            requests=GANG,
        )  # fmt: skip
        body = workload_object(entry, ns)
        await kube.create(JOBS, body, namespace=ns)
    for name in ("a", "b"):

        async def up(name: str = name) -> bool:
            return running(await live_pods(platform, name), 2)

        await wait(platform, up, f"training Job {name} running")
    a_uids = {p["metadata"]["uid"] for p in await live_pods(platform, "a")}

    # The budget, as preemption sees it, covers a's two pods.
    covered: dict[str, DisruptionBudgetState] = {}

    async def remember(received: Received) -> None:
        if isinstance(received.envelope.body, DisruptionBudgetState):
            covered["pdb"] = received.envelope.body

    async with (
        connected(platform.nats_url, platform.cluster, name="e2e-pdb") as bus,
        following(
            bus,
            stream=layout.state_stream(platform.cluster),
            subjects=[subjects.disruption_budget(platform.cluster, ns, "keep-a")],
            handler=remember,
        ),
    ):

        async def mirrored() -> bool:
            seen = covered.get("pdb")
            return seen is not None and seen.workloads.get(f"{ns}/a") == 2

        await wait(platform, mirrored, "the budget mirrored with a's two pods")

    serve = WorkloadEntry(
        name="serve", kind="Deployment", queue=f"online{sfx}", priority_class=f"serving{sfx}",
        pods=2, requests=GANG,
    )  # fmt: skip
    await kube.create(DEPLOYMENTS, workload_object(serve, ns), namespace=ns)

    async def served() -> bool:
        return running(await live_pods(platform, "serve"), 2)

    await wait(platform, served, "serve running after a preemption", within=180.0)
    a_pods = await live_pods(platform, "a")
    assert {p["metadata"]["uid"] for p in a_pods} == a_uids, "a lost a pod"
    assert running(a_pods, 2)
    assert not [p for p in await live_pods(platform, "b") if p["status"].get("phase") == "Running"]

    listed = await kube.list_objects(EVENTS, namespace=ns)
    preempted = {
        e["involvedObject"]["name"]
        for e in listed.items
        if e.get("reason") == "Preempted" and e.get("reportingComponent") == "tidegate-ungater"
    }
    assert preempted == {"b"}
    platform.healthy("the end")


async def test_a_budget_protected_gang_is_skipped_on_the_simulator(tmp_path: Path) -> None:
    async with running_system(tmp_path, nodes=NODES, time_scale=0.02, namespace="pdb") as system:
        await system.set_up(priority_classes={}, queues=[])
        await scenario(Platform.of_sim(system))
        (decision,) = system.of(Preempted)
        assert decision.victims == ["pdb/b"]
        assert "skipped for their PodDisruptionBudget: pdb/a (PodDisruptionBudget pdb/keep-a" in (
            decision.message
        )
        assert system.admission_problems() == [], system.report()


@pytest.mark.real_k8s
async def test_a_budget_protected_gang_is_skipped_on_real_kubernetes(
    real_tidegate: RealTidegate,
) -> None:
    async with real_tidegate(nodes=NODES) as system:
        ns = system.namespace
        async with system.observing():
            await scenario(Platform.of_real(system))
        assert system.problems() == []
        (decision,) = [d for d in distinct(system.decisions) if isinstance(d, Preempted)]
        assert decision.victims == [f"{ns}/b"]
        assert (
            f"skipped for their PodDisruptionBudget: {ns}/a (PodDisruptionBudget {ns}/keep-a"
            in decision.message
        )
