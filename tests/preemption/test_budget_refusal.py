"""An eviction a PodDisruptionBudget refuses after the search chose the victim (the budget
was not known to preemption yet): the preemption is finished later, when the budget allows,
and says so meanwhile with a PreemptionBlocked Warning Event on the victim and the
preemptor; the victim is not half evicted."""

from typing import Any

from tidegate.kube import DEPLOYMENTS, EVENTS, PDBS
from tidegate.model import Preempted

from .conftest import NAMESPACE, Harness, inference_deployment
from .test_preemption_service import evicted_record, gone, live, running_training_job


async def blocked_events(h: Harness) -> dict[str, dict[str, Any]]:
    listed = await h.kube.list_objects(EVENTS, namespace=NAMESPACE)
    return {
        str(e["involvedObject"]["name"]): dict(e)
        for e in listed.items
        if e.get("reason") == "PreemptionBlocked"
    }


async def test_a_refused_eviction_is_reported_and_finished_when_the_budget_allows(
    harness: Harness,
) -> None:
    h = harness
    original = await running_training_job(h)
    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=2))
    await h.until(lambda: h.workload("serve") is not None, what="serve on the bus")
    # The budget arrives while the watcher is away: the search does not know it.
    assert h.watcher is not None
    await h.stop(h.watcher)
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "all-of-train"},
        "spec": {
            "minAvailable": 4,
            "selector": {"matchLabels": {"batch.kubernetes.io/job-name": "train"}},
        },
    }
    await h.create(PDBS, budget)
    await h.start_preemption()
    await h.request_preemption("serve")

    await h.until(lambda: h.of(Preempted), what="the preempted decision")
    events = await h.until_async(
        lambda: _both(h), what="PreemptionBlocked Events on train and serve"
    )
    assert events["train"]["type"] == "Warning"
    assert "refused by a PodDisruptionBudget" in events["serve"]["message"]
    assert "all-of-train needs 4 healthy pods" in events["serve"]["message"]
    record = await h.record("serve")
    assert record is not None
    assert not record.evicted
    # Not one pod of the gang went: it is not half evicted.
    assert {p["metadata"]["uid"] for p in live(await h.pods("train-"))} == original

    await h.kube.delete(PDBS, "all-of-train", namespace=NAMESPACE)
    await h.until_async(lambda: evicted_record(h), what="the preemption finished")
    await h.until_async(lambda: gone(h, original), what="every original pod gone")


async def _both(h: Harness) -> dict[str, dict[str, Any]] | None:
    events = await blocked_events(h)
    return events if {"train", "serve"} <= set(events) else None
