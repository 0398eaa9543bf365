"""A growth preempt request that is no longer true evicts no one.

Admission asks for room for the extra pods of an admitted inference workload that grew, naming
the admission that grows (``admitted_sequence``). The request can reach the preemption service
late — redelivered, or left to a new leader after a failover — when the growth was admitted
meanwhile, or the workload scaled back: then it asks for room nobody needs, and answering it
would evict a training gang for nothing.
"""

import asyncio
from typing import Any

import msgspec
import pytest

from tidegate.kube import DEPLOYMENTS
from tidegate.model import (
    Admitted,
    DomainCount,
    Preempted,
    PreemptRequested,
    TopologyAssignment,
    subjects,
)
from tidegate.runtime import Service

from .conftest import NAMESPACE, Harness, inference_deployment
from .test_preemption_service import running_training_job


def outcomes(service: Service[Any], outcome: str) -> float:
    """How many requests the service answered with ``outcome``."""
    value = service.metrics.registry.get_sample_value(
        "tidegate_preemption_requests_total", {"outcome": outcome}
    )
    return value or 0.0


@pytest.mark.parametrize("why", ["growth-admitted", "scaled-back"])
async def test_a_stale_growth_request_evicts_no_one(harness: Harness, why: str) -> None:
    """The service reads ``admitted_sequence``: one that searched for room for the
    request's extra pods as long as the workload was admitted at all would evict the
    training Job here in both cases."""
    h = harness
    await running_training_job(h)
    service = await h.start_preemption()
    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=1))
    await h.until(lambda: h.workload("serve") is not None, what="serve on the bus")
    serve = h.workload("serve")
    assert serve is not None
    (podset,) = serve.podsets
    node = h.sim.layout.nodes[0]
    one_slot = {
        podset.name: TopologyAssignment(
            levels=h.sim.levels,
            domains=[DomainCount(values=[node.labels[lv] for lv in h.sim.levels], count=1)],
        )
    }
    await h.admit("serve", assignments=one_slot)
    await h.until(lambda: h.of(Admitted), what="serve admitted")
    (admitted,) = h.of(Admitted)[-1:]
    if why == "growth-admitted":
        # The growth was admitted meanwhile: a newer admission is in force.
        await h.admit("serve", assignments=one_slot)
        await h.until(lambda: len(h.of(Admitted)) == 3, what="the growth admitted")
    # (scaled-back: serve wants its one replica again, as admitted.)
    await asyncio.sleep(0.5)  # the service's view follows the decisions
    h.sequence += 1
    request = PreemptRequested(
        workload=f"{NAMESPACE}/serve",
        uid=serve.uid,
        queue="online",
        sequence=h.sequence,
        message="grows by one replica",
        podsets=[msgspec.structs.replace(podset, count=1)],
        admitted_sequence=admitted.sequence,
    )
    subject = subjects.decision(h.cluster, "preempt-requested", NAMESPACE, "serve")
    await h.publish(subject, request)
    answered = ("stale", "preempts")
    await h.until(
        lambda: sum(outcomes(service, o) for o in answered) >= 1, what="the request answered"
    )
    await asyncio.sleep(1.0)
    assert not h.of(Preempted), "a training gang was evicted for a stale growth"
    assert outcomes(service, "stale") == 1
