"""Queue metrics read from the real policy object, and what committed decisions add."""

from prometheus_client import CollectorRegistry

from tidegate.admission.metrics import QueueMetrics, in_unit, pending_counts, usage_samples
from tidegate.model import (
    CapacityNode,
    QueueConfig,
    Released,
    TopologyConfig,
    WorkloadKey,
)
from tidegate.policy.admission import Admission, AdmissionSettings, Decision
from tidegate.testing.messages import Messages

msg = Messages(namespace="ns")


GPU = "nvidia.com/gpu"


def one_node(admission: Admission) -> None:
    admission.capacity.set_topology(TopologyConfig(name="default", levels=["h"]))
    resources = {"cpu": 8000, GPU: 8}
    admission.capacity.update(
        CapacityNode(
            topology="default", node="n", domain=["n"], allocatable=resources, free=resources
        )
    )


def test_pending_counts_every_reason_of_every_queue_and_unknown_queues() -> None:
    admission = Admission(AdmissionSettings())
    one_node(admission)
    admission.set_queue(QueueConfig(name="q", quota={GPU: 4}))
    admission.set_workload(msg.workload("fits", msg.podset("w", gpus=2, cpu=500), queue="q"))
    admission.set_workload(msg.workload("over", msg.podset("w", gpus=4, cpu=500), queue="q"))
    admission.set_workload(msg.workload("lost", msg.podset("w", gpus=1, cpu=500), queue="nope"))
    admission.set_workload(msg.workload("none", msg.podset("w", gpus=1, cpu=500), queue=None))
    admission.cycle(now=1.0)
    counts = pending_counts(admission)
    assert counts[("q", "ExceedsQuota")] == 1
    assert counts[("nope", "QueueNotFound")] == 1
    assert counts[("", "QueueNotFound")] == 1
    assert counts[("q", "WaitingForCapacity")] == 0
    assert sum(counts.values()) == 3
    assert {reason for queue, reason in counts if queue == "q"} == {
        "QueueNotFound",
        "Invalid",
        "ExceedsQuota",
        "CardQuotaExceeded",
        "TopologyPlacementFailed",
        "WaitingForCapacity",
        "WaitingForPreemption",
        "RequiredDomainFull",
    }

    samples = usage_samples(admission)
    assert samples["resource_usage"] == [("q", "cpu", 0.5), ("q", GPU, 2.0)]
    assert samples["resource_quota"] == [("q", GPU, 4.0)]
    assert samples["card_usage"] == samples["card_quota"] == []

    admission.remove_workload(WorkloadKey("ns/over"))
    assert pending_counts(admission)[("q", "ExceedsQuota")] == 0


def test_a_default_queue_labels_workloads_that_name_none() -> None:
    admission = Admission(AdmissionSettings(default_queue="fallback"))
    one_node(admission)
    admission.set_workload(msg.workload("none", msg.podset("w", gpus=1, cpu=500), queue=None))
    admission.cycle(now=1.0)
    assert pending_counts(admission) == {("fallback", "QueueNotFound"): 1}


def test_card_quota_and_usage_of_a_queue() -> None:
    admission = Admission()
    admission.set_queue(QueueConfig(name="q", card_quota={"NVIDIA-H200": 8, "NVIDIA-A100": 2}))
    samples = usage_samples(admission)
    assert samples["card_usage"] == [("q", "NVIDIA-A100", 0.0), ("q", "NVIDIA-H200", 0.0)]
    assert samples["card_quota"] == [("q", "NVIDIA-A100", 2.0), ("q", "NVIDIA-H200", 8.0)]
    assert samples["resource_usage"] == samples["resource_quota"] == []


def test_amounts_are_in_the_resources_own_unit() -> None:
    assert in_unit("cpu", 1500) == 1.5
    assert in_unit("memory", 2**30) == 2**30
    assert in_unit(GPU, 8) == 8


def test_wait_time_is_observed_at_a_workloads_first_admission_only() -> None:
    registry = CollectorRegistry()
    metrics = QueueMetrics(registry, Admission())
    state = msg.workload("w", msg.podset("w", gpus=1, cpu=500), queue="q", created_at=100.0)
    metrics.restored([msg.admitted("ns/w", sequence=1, uid="uid-restored")])
    metrics.committed(
        [
            Decision(
                key=WorkloadKey("ns/w"),
                body=msg.admitted("ns/w", sequence=2, uid="uid-w"),
                workload=state,
            ),
            Decision(
                key=WorkloadKey("ns/w"),
                body=msg.admitted("ns/w", sequence=3, uid="uid-w", replaces=2),
                workload=state,
            ),
            Decision(
                key=WorkloadKey("ns/w"),
                body=msg.admitted("ns/w", sequence=4, uid="uid-restored"),
                workload=state,
            ),
        ],
        now=103.0,
    )
    metrics.committed(
        [
            Decision(
                key=WorkloadKey("ns/w"),
                body=msg.admitted("ns/w", sequence=5, uid="uid-w"),
                workload=state,
            )
        ],
        now=500.0,
    )
    count = registry.get_sample_value("tidegate_admission_wait_time_seconds_count", {"queue": "q"})
    total = registry.get_sample_value("tidegate_admission_wait_time_seconds_sum", {"queue": "q"})
    assert (count, total) == (1, 3.0)


def test_evictions_are_counted_by_queue_and_reason() -> None:
    registry = CollectorRegistry()
    metrics = QueueMetrics(registry, Admission())

    def released(reason: str, evict_pods: bool = False) -> Decision:
        body = Released(
            workload="ns/w",
            uid="u",
            queue="q",
            reason=reason,  # type: ignore[arg-type]
            evict_pods=evict_pods,
        )
        return Decision(key=WorkloadKey("ns/w"), body=body)

    metrics.committed(
        [released("Evicted"), released("Evicted", True), released("Completed")], now=1.0
    )
    value = registry.get_sample_value
    assert value("tidegate_evicted_workloads_total", {"queue": "q", "reason": "Preempted"}) == 1
    assert value("tidegate_evicted_workloads_total", {"queue": "q", "reason": "NodeFailure"}) == 1


def test_gauges_have_samples_only_while_leading() -> None:
    registry = CollectorRegistry()
    admission = Admission()
    admission.set_queue(QueueConfig(name="q", quota={"cpu": 1000}))
    metrics = QueueMetrics(registry, admission)
    labels = {"queue": "q", "resource": "cpu"}
    assert registry.get_sample_value("tidegate_queue_resource_quota", labels) is None
    metrics.leading = True
    assert registry.get_sample_value("tidegate_queue_resource_quota", labels) == 1.0
    assert (
        registry.get_sample_value(
            "tidegate_pending_workloads", {"queue": "q", "reason": "ExceedsQuota"}
        )
        == 0
    )
