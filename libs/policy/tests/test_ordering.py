"""Queue and workload order, and which waiting workloads stop their queue."""

import pytest

from tidegate.model import PendingReason, QueueConfig
from tidegate.policy.ordering import blocks_queue, key_of, order_queues, order_workloads
from tidegate.testing.messages import Messages

msg = Messages(namespace="ns", queue=None)


def test_queues_by_priority_then_name() -> None:
    queues = [
        QueueConfig(name="offline-b", priority=20000),
        QueueConfig(name="online", priority=80000),
        QueueConfig(name="offline-a", priority=20000),
    ]
    assert [q.name for q in order_queues(queues)] == ["online", "offline-a", "offline-b"]


def test_workloads_by_priority_then_creation_then_key() -> None:
    workloads = [
        msg.workload("late-low", uid="late-low", priority=1, created_at=5),
        msg.workload("b", uid="b", priority=2, created_at=3),
        msg.workload("a", uid="a", priority=2, created_at=3),
        msg.workload("early", uid="early", priority=2, created_at=1),
        msg.workload("a", uid="a", namespace="aa", priority=2, created_at=3),
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
