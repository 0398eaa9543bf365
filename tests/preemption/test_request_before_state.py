"""A preempt request that reaches the preemption service before its preemptor's state does.

The decision stream and the state stream are separate: while a NATS cluster elects a new
stream leader, the preemptor's workload state can reach the service seconds after admission's
request for it. The request is asked again until the view knows the preemptor, not dropped
(it used to be dropped as stale, and admission asked again only after its preemption timeout).
"""

import asyncio

from tidegate.kube import DEPLOYMENTS
from tidegate.model import Preempted, PreemptRequested, subjects
from tidegate.runtime import Service

from .conftest import NAMESPACE, Harness, inference_deployment
from .test_preemption_service import running_training_job


def requests_handled(service: Service[object]) -> float:
    """How many preempt requests (deliveries) the service handled, whatever the outcome."""
    for metric in service.metrics.registry.collect():
        if metric.name == "tidegate_preemption_requests":
            return sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return 0.0


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
    await h.publish(subjects.decision(h.cluster, "preempt-requested", NAMESPACE, "serve"), request)
    await h.until(
        lambda: requests_handled(service) >= 1,
        what="the request handled while its preemptor is unknown",
    )
    assert not h.of(Preempted)

    h.watcher = await h.start_watcher()
    await h.until(lambda: h.of(Preempted), what="the preempted decision", within=30)
    (decision,) = h.of(Preempted)
    assert decision.preemptor == f"{NAMESPACE}/serve"
    assert decision.victims == [f"{NAMESPACE}/train"]
    await asyncio.sleep(1.5)
    assert len(h.of(Preempted)) == 1, "the request was answered once"
