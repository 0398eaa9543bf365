"""Queue and workload order, and which waiting workloads stop their queue."""

import pytest

from tidegate.model import PendingReason, QueueConfig, WorkloadState
from tidegate.policy.ordering import blocks_queue, key_of, order_queues, order_workloads


def wl(name: str, *, priority: int = 0, created_at: float = 0.0, ns: str = "ns") -> WorkloadState:
    return WorkloadState(
        namespace=ns,
        name=name,
        uid=name,
        owner_kind="Job",
        priority=priority,
        created_at=created_at,
    )


def test_queues_by_priority_then_name() -> None:
    queues = [
        QueueConfig(name="offline-b", priority=20000),
        QueueConfig(name="online", priority=80000),
        QueueConfig(name="offline-a", priority=20000),
    ]
    assert [q.name for q in order_queues(queues)] == ["online", "offline-a", "offline-b"]


def test_workloads_by_priority_then_creation_then_key() -> None:
    workloads = [
        wl("late-low", priority=1, created_at=5),
        wl("b", priority=2, created_at=3),
        wl("a", priority=2, created_at=3),
        wl("early", priority=2, created_at=1),
        wl("a", priority=2, created_at=3, ns="aa"),
    ]
    ordered = [key_of(w) for w in order_workloads(workloads)]
    assert ordered == ["ns/early", "aa/a", "ns/a", "ns/b", "ns/late-low"]


@pytest.mark.parametrize(
    ("strategy", "reason", "blocks"),
    [
        ("StrictFIFO", "WaitingForCapacity", True),
        ("StrictFIFO", "ExceedsQuota", True),
        ("StrictFIFO", "WaitingForPreemption", True),
        ("StrictFIFO", "Invalid", False),
        ("BestEffortFIFO", "WaitingForCapacity", False),
        ("BestEffortFIFO", "ExceedsQuota", False),
    ],
)
def test_only_strict_fifo_blocks_and_never_on_invalid(
    strategy: str, reason: PendingReason, blocks: bool
) -> None:
    queue = QueueConfig(
        name="q", strategy="StrictFIFO" if strategy == "StrictFIFO" else "BestEffortFIFO"
    )
    assert blocks_queue(queue, reason) is blocks
