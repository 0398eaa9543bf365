"""PodDisruptionBudgets the victim search did not know (it arrived while the watcher was away):

- one that refuses evicting a victim pod at all is caught by the dry-run check before anything
  is committed: no record, no decision, no eviction (the victim keeps its admission), a
  PreemptionBlocked Warning Event on the victim and the preemptor; asked again once the budget
  is gone, the preemption goes through;
- one that allows evicting each pod alone but not the whole gang lets the first eviction pass
  and refuses the rest: the preemption stays recorded and unfinished, says so with the same
  Events, and is finished once the budget allows — the gang is partly evicted only for as long
  as its budget forces.
"""

from typing import Any

from tidegate.kube import DEPLOYMENTS, EVENTS, PDBS
from tidegate.model import Preempted

from .conftest import NAMESPACE, Harness, inference_deployment
from .test_preemption_service import evicted_record, gone, live, running_training_job


def budget(min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train-budget"},
        "spec": {
            "minAvailable": min_available,
            "selector": {"matchLabels": {"batch.kubernetes.io/job-name": "train"}},
        },
    }


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
    """A running 4-pod training Job, serve on the bus, then (watcher stopped) the budget."""
    original = await running_training_job(h)
    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=2))
    await h.until(lambda: h.workload("serve") is not None, what="serve on the bus", within=60)
    assert h.watcher is not None
    await h.stop(h.watcher)
    await h.create(PDBS, budget(min_available))
    return original


async def test_a_budget_that_refuses_a_victim_pod_stops_the_preemption_before_it_starts(
    harness: Harness,
) -> None:
    h = harness
    original = await behind_the_watchers_back(h, min_available=4)
    await h.start_preemption()
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

    await h.kube.delete(PDBS, "train-budget", namespace=NAMESPACE)
    await h.request_preemption("serve")
    await h.until_async(lambda: evicted_record(h), what="the preemption done", within=60)
    await h.until_async(lambda: gone(h, original), what="every original pod gone", within=60)


async def test_a_budget_that_spares_one_pod_holds_the_rest_until_it_allows(
    harness: Harness,
) -> None:
    h = harness
    original = await behind_the_watchers_back(h, min_available=3)
    await h.start_preemption(eviction_concurrency=1)
    await h.request_preemption("serve")

    await h.until(lambda: h.of(Preempted), what="the preempted decision", within=60)
    events = await h.until_async(
        lambda: blocked_events(h), what="PreemptionBlocked Events", within=60
    )
    assert "refused by a PodDisruptionBudget" in events["serve"]["message"]
    record = await h.record("serve")
    assert record is not None
    assert not record.evicted

    await h.kube.delete(PDBS, "train-budget", namespace=NAMESPACE)
    await h.until_async(lambda: evicted_record(h), what="the preemption finished", within=60)
    await h.until_async(lambda: gone(h, original), what="every original pod gone", within=60)
