"""A preempt request that reaches the preemption service before what it depends on does.

The service's view follows the state stream and the decisions; the requests come through a
durable consumer of their own. While a NATS cluster elects a new stream leader, the preemptor's
workload state (or, for a growth, its admission) can reach the view seconds after admission's
request. The request is asked again until the view knows it, not dropped (it used to be dropped
as stale, and admission asked again only after its preemption timeout).
"""

import asyncio
from typing import Any

import msgspec

from tidegate.kube import DEPLOYMENTS
from tidegate.model import Preempted, PreemptRequested, subjects
from tidegate.runtime import Service

from .conftest import NAMESPACE, Harness, inference_deployment
from .test_preemption_service import running_training_job


def requests_handled(service: Service[Any]) -> float:
    """How many preempt requests (deliveries) the service handled, whatever the outcome."""
    for metric in service.metrics.registry.collect():
        if metric.name == "tidegate_preemption_requests":
            return sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return 0.0


async def asked_too_early(h: Harness, service: Service[Any], request: PreemptRequested) -> None:
    """Publish ``request`` for ``serve`` and wait until the service handled it, preempting no
    one (it cannot answer yet)."""
    subject = subjects.decision(h.cluster, "preempt-requested", NAMESPACE, "serve")
    await h.publish(subject, request)
    await h.until(lambda: requests_handled(service) >= 1, what="the request handled")
    assert not h.of(Preempted)


async def answered_at_last(h: Harness) -> None:
    """Wait for the one preemption the request asked for: serve evicts train."""
    await h.until(lambda: h.of(Preempted), what="the preempted decision", within=30)
    (decision,) = h.of(Preempted)
    assert decision.preemptor == f"{NAMESPACE}/serve"
    assert decision.victims == [f"{NAMESPACE}/train"]


async def test_a_request_for_a_preemptor_not_in_the_view_yet_is_answered_once_it_is(
    harness: Harness,
) -> None:
    h = harness
    await running_training_job(h)
    service = await h.start_preemption()
    assert h.watcher is not None
    await h.stop(h.watcher)
    # The Deployment exists, but no watcher tells the bus: the preemption view lacks it.
    deployment = await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=2))
    h.sequence += 1
    request = PreemptRequested(
        workload=f"{NAMESPACE}/serve",
        uid=deployment["metadata"]["uid"],
        queue="online",
        sequence=h.sequence,
        message="no room",
    )
    await asked_too_early(h, service, request)

    h.watcher = await h.start_watcher()
    await answered_at_last(h)
    await asyncio.sleep(1.5)
    assert len(h.of(Preempted)) == 1, "the request was answered once"


async def test_a_growth_request_before_its_admission_is_seen_is_answered_once_it_is(
    harness: Harness,
) -> None:
    h = harness
    await running_training_job(h)
    service = await h.start_preemption()
    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=1))
    await h.until(lambda: h.workload("serve") is not None, what="serve on the bus")
    serve = h.workload("serve")
    assert serve is not None
    # Admission asks for room for one more replica of an admitted serve; the request reaches
    # the preemption service before the admission does.
    (podset,) = serve.podsets
    h.sequence += 1
    growth = PreemptRequested(
        workload=f"{NAMESPACE}/serve",
        uid=serve.uid,
        queue="online",
        sequence=h.sequence,
        message="grows by one replica",
        podsets=[msgspec.structs.replace(podset, count=1)],
    )
    await asked_too_early(h, service, growth)

    await h.admit("serve")
    await answered_at_last(h)
