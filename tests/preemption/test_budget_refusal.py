"""PodDisruptionBudgets the victim search did not know (it arrived while the watcher was away):

- one that refuses evicting a victim pod at all is caught by the dry-run check before anything
  is committed: no record, no decision, no eviction (the victim keeps its admission), a
  PreemptionBlocked Warning Event on the victim and the preemptor; asked again once the budget
  is gone, the preemption goes through;
- one that allows evicting each pod alone but not the whole gang passes the dry run (each pod
  is asked alone), lets the first eviction pass and refuses the rest with 429: the preemption
  stays recorded and unfinished, says so with the same Events, retries the refused pods on
  every reconcile and is finished once the budget allows — the gang is partly evicted only for
  as long as its budget forces; with two such victims, each loses what its budget allows (one
  refused victim does not hold the other's evictions back).

``tidegate_preemption_budget_blocked_total`` counts each held preemption once, however many
times it is retried.

The victims here are training Deployments, whose pods are evicted one by one. A Job or JobSet
victim is re-queued by suspending it instead (docs/preemption.md): every pod is checked with a
dry run first, and the gang against the budgets the bus knows; a budget unknown to the bus
that spares some of its pods but not all passes both checks, and the gang goes whole.
"""

from typing import Any

from tidegate.kube import DEPLOYMENTS, EVENTS, PDBS
from tidegate.model import PodState, Preempted
from tidegate.runtime import Service
from tidegate.testing.manifests import Builders

from .conftest import NAMESPACE, Harness, inference_deployment, training_deployment
from .test_preemption_service import evicted_record, gated, gone, live


async def running_training_gang(h: Harness, name: str, nodes: list[str]) -> set[str]:
    """A training Deployment of one pod per node of ``nodes``, admitted and running."""
    await h.create(DEPLOYMENTS, training_deployment(name, pods=len(nodes)))
    await h.until(lambda: h.workload(name) is not None, what=f"{name} on the bus")

    async def all_gated() -> bool:
        return len([p for p in await h.pods(f"{name}-") if gated(p)]) == len(nodes)

    await h.until_async(all_gated, what=f"gated {name} pods")
    await h.admit(name)
    await h.ungate(f"{name}-", nodes)

    def running() -> bool:
        pods = [
            m
            for m in h.state.values()
            if isinstance(m, PodState) and m.workload == f"{NAMESPACE}/{name}"
        ]
        return len(pods) == len(nodes) and all(p.phase == "Running" and p.node_name for p in pods)

    await h.until(running, what=f"{name}'s pods running")
    return {p["metadata"]["uid"] for p in await h.pods(f"{name}-")}


def sample(service: Service[Any], name: str, labels: dict[str, str] | None = None) -> float:
    """A metric sample of ``service`` (0 when it has none yet)."""
    return service.metrics.registry.get_sample_value(name, labels or {}) or 0.0


k8s = Builders(server_fields=False)
"""The budgets the tests create."""

BLOCKED = "tidegate_preemption_budget_blocked_total"
EVICTIONS = "tidegate_preemption_pod_evictions_total"


async def blocked_events(h: Harness) -> dict[str, dict[str, Any]] | None:
    """The PreemptionBlocked Events on ``train`` and ``serve``, once both exist."""
    listed = await h.kube.list_objects(EVENTS, namespace=NAMESPACE)
    events = {
        str(e["involvedObject"]["name"]): dict(e)
        for e in listed.items
        if e.get("reason") == "PreemptionBlocked"
    }
    return events if {"train", "serve"} <= set(events) else None


async def behind_the_watchers_back(h: Harness, min_available: int) -> set[str]:
    """A running 4-pod training gang, serve on the bus, then (watcher stopped) the budget."""
    original = await running_training_gang(h, "train", [n.name for n in h.sim.layout.nodes])
    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=2))
    await h.until(lambda: h.workload("serve") is not None, what="serve on the bus", within=60)
    assert h.watcher is not None
    await h.stop(h.watcher)
    await h.create(
        PDBS, k8s.disruption_budget("train-budget", {"app": "train"}, min_available=min_available)
    )
    return original


async def test_a_budget_that_refuses_a_victim_pod_stops_the_preemption_before_it_starts(
    harness: Harness,
) -> None:
    h = harness
    original = await behind_the_watchers_back(h, min_available=4)
    service = await h.start_preemption()
    await h.request_preemption("serve")

    events = await h.until_async(
        lambda: blocked_events(h), what="PreemptionBlocked Events", within=60
    )
    assert events["train"]["type"] == "Warning"
    assert "not started" in events["serve"]["message"]
    assert "train-budget needs 4 healthy pods" in events["serve"]["message"]
    assert h.of(Preempted) == []
    assert await h.record("serve") is None
    assert {p["metadata"]["uid"] for p in live(await h.pods("train-"))} == original
    await h.until(
        lambda: (
            sample(service, "tidegate_preemption_requests_total", {"outcome": "budget-blocked"})
            == 1
        ),
        what="the outcome counted",
    )
    assert sample(service, BLOCKED) == 1
    assert sample(service, EVICTIONS, {"result": "evicted"}) == 0

    await h.kube.delete(PDBS, "train-budget", namespace=NAMESPACE)
    await h.request_preemption("serve")
    await h.until_async(lambda: evicted_record(h), what="the preemption done", within=60)
    await h.until_async(lambda: gone(h, original), what="every original pod gone", within=60)


async def test_a_budget_that_spares_one_pod_holds_the_rest_until_it_allows(
    harness: Harness,
) -> None:
    h = harness
    original = await behind_the_watchers_back(h, min_available=3)
    service = await h.start_preemption(eviction_concurrency=1, kube_max_attempts=1)
    await h.request_preemption("serve")

    await h.until(lambda: h.of(Preempted), what="the preempted decision", within=60)
    events = await h.until_async(
        lambda: blocked_events(h), what="PreemptionBlocked Events", within=60
    )
    assert "refused by a PodDisruptionBudget" in events["serve"]["message"]
    record = await h.record("serve")
    assert record is not None
    assert not record.evicted
    # Retried on every reconcile (0.2 s here), the preemption counted once.
    await h.until(
        lambda: sample(service, EVICTIONS, {"result": "refused"}) >= 9,
        what="the refused evictions retried",
    )
    assert sample(service, BLOCKED) == 1
    assert sample(service, EVICTIONS, {"result": "evicted"}) == 1
    still = original & {p["metadata"]["uid"] for p in live(await h.pods("train-"))}
    assert len(still) == 3  # only what the budget allows

    await h.kube.delete(PDBS, "train-budget", namespace=NAMESPACE)
    await h.until_async(lambda: evicted_record(h), what="the preemption finished", within=60)
    await h.until_async(lambda: gone(h, original), what="every original pod gone", within=60)
    assert sample(service, BLOCKED) == 1


async def running_pair(h: Harness) -> dict[str, set[str]]:
    """Two 2-pod training gangs, ``train-a`` on rack 0 and ``train-b`` on rack 1, admitted and
    running; their pods' UIDs by gang."""
    nodes = [n.name for n in h.sim.layout.nodes]
    return {
        job: await running_training_gang(h, job, slots)
        for job, slots in (("train-a", nodes[:2]), ("train-b", nodes[2:]))
    }


async def test_one_victim_held_by_its_budget_does_not_hold_back_another(
    harness: Harness,
) -> None:
    """Two victims, each under a budget (unknown to the search) that spares one of its two
    pods: both lose the pod their budget allows at once, the preemption waits for the rest.
    Before, the first victim's refusal stopped the evictions: the second kept both pods
    running although its quota was released."""
    h = harness
    original = await running_pair(h)
    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=4))
    await h.until(lambda: h.workload("serve") is not None, what="serve on the bus", within=60)
    assert h.watcher is not None
    await h.stop(h.watcher)
    for job in original:
        await h.create(PDBS, k8s.disruption_budget(f"{job}-budget", {"app": job}, min_available=1))
    service = await h.start_preemption(eviction_concurrency=1, kube_max_attempts=1)
    await h.request_preemption("serve")

    await h.until(lambda: h.of(Preempted), what="the preempted decision", within=60)
    (decision,) = h.of(Preempted)
    assert sorted(decision.victims) == [f"{NAMESPACE}/train-a", f"{NAMESPACE}/train-b"]

    async def each_lost_one() -> bool:
        counts = [
            len(uids & {p["metadata"]["uid"] for p in live(await h.pods(f"{job}-"))})
            for job, uids in original.items()
        ]
        return counts == [1, 1]

    await h.until_async(each_lost_one, what="one pod of each victim evicted", within=60)
    await h.until(
        lambda: sample(service, EVICTIONS, {"result": "refused"}) >= 4,
        what="the refused evictions retried",
    )
    assert sample(service, BLOCKED) == 1
    record = await h.record("serve")
    assert record is not None
    assert not record.evicted

    for job in original:
        await h.kube.delete(PDBS, f"{job}-budget", namespace=NAMESPACE)
    await h.until_async(lambda: evicted_record(h), what="the preemption finished", within=60)

    async def all_gone() -> bool:
        left = {p["metadata"]["uid"] for p in await h.pods("train-")}
        return not left & (original["train-a"] | original["train-b"])

    await h.until_async(all_gone, what="every original pod gone", within=60)
