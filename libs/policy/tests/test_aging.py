"""Aging within a queue (tidegate.policy.aging, docs/reservations.md "Aging")."""

import pytest

from tidegate.model import QueueAging, QueueConfig, WorkloadState
from tidegate.policy.aging import age_boost, aged_order_key, effective_priority, order_with_aging
from tidegate.policy.ordering import order_workloads, workload_order_key

NOW = 1_800_000_000.0
MINUTE = 60.0
AGING = QueueAging(step_seconds=10 * MINUTE, max_boost=3)


def workload(name: str, *, priority: int = 0, waited_minutes: float = 0.0) -> WorkloadState:
    return WorkloadState(
        namespace="ns",
        name=name,
        uid=name,
        owner_kind="Job",
        priority=priority,
        created_at=NOW - waited_minutes * MINUTE,
    )


@pytest.mark.parametrize(
    ("aging", "waited_minutes", "boost"),
    [
        (None, 1000, 0),  # off by default
        (AGING, 0, 0),
        (AGING, 9.9, 0),
        (AGING, 10, 1),
        (AGING, 25, 2),
        (AGING, 30, 3),
        (AGING, 10_000, 3),  # bounded by max_boost
        (AGING, -5, 0),  # created "in the future" (clock skew): no boost
        (QueueAging(step_seconds=60, max_boost=0), 1000, 0),
        (QueueAging(step_seconds=0, max_boost=5), 1000, 0),  # unvalidated writer: no jump
    ],
)
def test_age_boost(aging: QueueAging | None, waited_minutes: float, boost: int) -> None:
    assert age_boost(aging, waited_minutes * MINUTE) == boost


def test_without_aging_the_order_is_the_fifo_order() -> None:
    queue = QueueConfig(name="q")
    items = [
        workload("old", waited_minutes=500),
        workload("new-high", priority=5, waited_minutes=1),
        workload("mid", waited_minutes=100),
    ]
    assert order_with_aging(items, queue, now=NOW) == order_workloads(items)
    assert all(aged_order_key(w, queue, now=NOW) == workload_order_key(w) for w in items)


def test_an_old_workload_passes_newer_ones_at_most_max_boost_above_it() -> None:
    queue = QueueConfig(name="q", aging=AGING)
    old = workload("old", priority=0, waited_minutes=60)  # boost capped at 3
    within = workload("within", priority=3, waited_minutes=1)  # effective 3: tie, older first
    beyond = workload("beyond", priority=4, waited_minutes=1)  # more than max_boost above
    same = workload("same", priority=0, waited_minutes=30)  # also capped: FIFO keeps old first
    assert effective_priority(old, queue, now=NOW) == 3
    ordered = order_with_aging([same, within, beyond, old], queue, now=NOW)
    # Ties at effective priority 3 keep FIFO: old, then same (30 min), then within (1 min).
    assert [w.name for w in ordered] == ["beyond", "old", "same", "within"]


def test_a_stream_of_fresh_higher_priority_arrivals_no_longer_keeps_it_waiting() -> None:
    queue = QueueConfig(name="q", aging=AGING)
    old = workload("old", priority=0, waited_minutes=45)
    stream = [workload(f"fresh-{i}", priority=2, waited_minutes=i) for i in range(10)]
    ordered = order_with_aging([*stream, old], queue, now=NOW)
    assert ordered[0].name == "old"
