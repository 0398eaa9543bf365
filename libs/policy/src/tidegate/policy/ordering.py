"""The order in which admission considers workloads, and what a queue's strategy allows.

Across queues, higher queue priority goes first (Volcano: online queues at 80000 before
offline ones at 20000), ties by queue name. Within a queue, higher workload priority first,
then earlier creation time, then the workload key, so the order is total and every admission
instance computes the same one.

A queue's strategy says what happens when a workload cannot be admitted:

- ``StrictFIFO``: it blocks its queue; nothing behind it is admitted this cycle.
- ``BestEffortFIFO``: later workloads of the queue may still be admitted.

A workload that is ``Invalid`` never blocks its queue, since it can never be admitted.

This module only orders; it does not decide admission (:mod:`tidegate.policy.admission`).
"""

from collections.abc import Iterable

from tidegate.model import PendingReason, QueueConfig, WorkloadKey, WorkloadState, workload_key

QueueOrderKey = tuple[int, str]
"""Sort key of a queue: (-priority, name)."""

WorkloadOrderKey = tuple[int, float, str]
"""Sort key of a workload within its queue: (-priority, created_at, key)."""


def queue_order_key(queue: QueueConfig) -> QueueOrderKey:
    """Sort key that puts higher-priority queues first, ties by name."""
    return (-queue.priority, queue.name)


def workload_order_key(workload: WorkloadState) -> WorkloadOrderKey:
    """Sort key that puts higher priority first, then older, then by key."""
    return (-workload.priority, workload.created_at, key_of(workload))


def order_queues(queues: Iterable[QueueConfig]) -> list[QueueConfig]:
    """``queues`` in admission order."""
    return sorted(queues, key=queue_order_key)


def order_workloads(workloads: Iterable[WorkloadState]) -> list[WorkloadState]:
    """``workloads`` (of one queue) in admission order."""
    return sorted(workloads, key=workload_order_key)


def blocks_queue(queue: QueueConfig, reason: PendingReason) -> bool:
    """Whether a workload left pending for ``reason`` stops the rest of ``queue`` this cycle."""
    return queue.strategy == "StrictFIFO" and reason != "Invalid"


def key_of(workload: WorkloadState) -> WorkloadKey:
    """The workload's key, ``namespace/name``."""
    return workload_key(workload.namespace, workload.name)
