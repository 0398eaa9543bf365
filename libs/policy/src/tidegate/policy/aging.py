"""Aging: a waiting workload's effective order within its queue improves with its wait.

The rule (docs/reservations.md, "Aging"), per queue and off by default (``QueueConfig.aging``
None: FIFO by priority and creation time, :func:`tidegate.policy.ordering.workload_order_key`):

    effective priority = priority + min(max_boost, ⌊waited / step_seconds⌋)

where ``waited`` is the time since the workload was created. Ties keep the FIFO order (older
first, then by key). So an older workload A goes before a newer one B exactly when
``priority(A) + boost(A) >= priority(B) + boost(B)``. Two consequences:

- bounded: a workload never passes one whose priority is more than ``max_boost`` above its
  own, so priorities keep their meaning;
- no starvation by a stream: a workload at its cap goes before every newer workload of
  priority up to ``max_boost - j`` above its own that has waited less than ``j + 1`` steps
  (so a stream of fresh higher-priority arrivals, at most ``max_boost`` above it, no longer
  keeps it waiting); newer workloads of its own priority are always behind it.

Pure: no I/O, no clock (``now`` is passed in).
"""

import math
from collections.abc import Iterable

from tidegate.model import QueueAging, QueueConfig, WorkloadState
from tidegate.policy.ordering import WorkloadOrderKey, key_of


def age_boost(aging: QueueAging | None, waited_seconds: float) -> int:
    """The priority boost after ``waited_seconds`` of waiting: 0 without aging, else one per
    full ``step_seconds``, at most ``max_boost``."""
    if aging is None or waited_seconds <= 0 or aging.max_boost <= 0:
        return 0
    if not aging.step_seconds > 0:
        return 0  # a writer that skipped validation must not make every workload jump
    return min(aging.max_boost, math.floor(waited_seconds / aging.step_seconds))


def effective_priority(workload: WorkloadState, queue: QueueConfig | None, *, now: float) -> int:
    """``workload``'s priority plus its age boost under ``queue``'s aging at ``now``."""
    aging = queue.aging if queue is not None else None
    return workload.priority + age_boost(aging, now - workload.created_at)


def aged_order_key(
    workload: WorkloadState, queue: QueueConfig | None, *, now: float
) -> WorkloadOrderKey:
    """Sort key within a queue: higher effective priority first, then older, then by key.
    Without aging it equals :func:`tidegate.policy.ordering.workload_order_key`."""
    return (-effective_priority(workload, queue, now=now), workload.created_at, key_of(workload))


def order_with_aging(
    workloads: Iterable[WorkloadState], queue: QueueConfig | None, *, now: float
) -> list[WorkloadState]:
    """``workloads`` (of ``queue``) in admission order with aging applied."""
    return sorted(workloads, key=lambda w: aged_order_key(w, queue, now=now))
