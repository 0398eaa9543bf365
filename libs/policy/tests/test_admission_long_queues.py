"""Admission cycles over long queues in a cohort: what a cycle skips because it cannot change
(gangs asking no less than one that just waited for quota), and a cycle cut short by its time
budget (docs/admission.md, "A cycle")."""

import msgspec

from tidegate.model import (
    Admitted,
    CohortConfig,
    Pending,
    PreemptRequested,
    QueueConfig,
    QueuePreemption,
    WorkloadState,
)
from tidegate.policy.admission import Admission

from .test_admission import GPU, bodies, cluster, msg, only, two_racks


def team(name: str, nominal: int) -> QueueConfig:
    return QueueConfig(name=name, parent="research", nominal={GPU: nominal})


def gang(name: str, pods: int, gpus: int, *, queue: str, created_at: float) -> WorkloadState:
    return msg.workload(name, msg.podset(count=pods, gpus=gpus), queue=queue, created_at=created_at)


def cohort_of_two() -> Admission:
    """Two racks of 2 × 8 GPUs shared by teams a (nominal 16) and b (nominal 0)."""
    admission = cluster(*two_racks(), queues=[team("a", 16), team("b", 0)])
    admission.set_cohort(CohortConfig(name="research"))
    return admission


def reasons(decisions: list[object]) -> dict[str, str]:
    return {b.workload: b.reason for b in decisions if isinstance(b, Pending)}


def test_a_smaller_gang_behind_gangs_waiting_for_quota_is_admitted_in_the_same_cycle() -> None:
    admission = cohort_of_two()
    admission.set_workload(gang("hold", 1, 8, queue="a", created_at=0))
    assert [type(b) for b in bodies(admission.cycle(now=1.0))] == [Admitted]
    # 8 of the cohort's 16 GPUs are left: gangs of 16 wait, the gang of 8 behind them fits.
    for index in range(5):
        admission.set_workload(gang(f"big-{index}", 2, 8, queue="a", created_at=1 + index))
    admission.set_workload(gang("small", 1, 8, queue="a", created_at=10))
    decided = bodies(admission.cycle(now=2.0))
    assert reasons(decided) == {f"ns/big-{i}": "ExceedsQuota" for i in range(5)}
    assert [b.workload for b in decided if isinstance(b, Admitted)] == ["ns/small"]


def test_a_gang_like_those_waiting_for_quota_is_still_told_when_its_own_reason_changes() -> None:
    admission = cohort_of_two()
    admission.set_workload(gang("hold", 2, 8, queue="a", created_at=0))
    admission.cycle(now=1.0)
    for index in range(4):
        admission.set_workload(gang(f"wait-{index}", 1, 8, queue="a", created_at=1 + index))
    assert set(reasons(bodies(admission.cycle(now=2.0))).values()) == {"ExceedsQuota"}
    # The last one now names a Topology that does not exist and a node came, so every gang is
    # tried again: the gangs before it still wait for quota, and it is told its own reason.
    last = admission.workload(msg.key("wait-3"))
    assert last is not None
    admission.set_workload(msgspec.structs.replace(last, topology="nowhere"))
    admission.capacity.update(msg.capacity_node("n5", "b1", "r2", gpus=8))  # all are tried
    assert reasons(bodies(admission.cycle(now=3.0))) == {"ns/wait-3": "TopologyPlacementFailed"}


def test_a_cycle_out_of_time_stops_and_the_next_goes_on_with_the_rest() -> None:
    admission = cohort_of_two()
    for index in range(4):
        admission.set_workload(gang(f"job-{index}", 1, 4, queue="a", created_at=index))
    calls = 0

    def after_two() -> bool:
        nonlocal calls
        calls += 1
        return calls > 2

    first = bodies(admission.cycle(now=1.0, out_of_time=after_two))
    assert admission.cut_short
    assert [b.workload for b in first if isinstance(b, Admitted)] == ["ns/job-0", "ns/job-1"]
    second = bodies(admission.cycle(now=2.0))
    assert not admission.cut_short
    assert [b.workload for b in second if isinstance(b, Admitted)] == ["ns/job-2", "ns/job-3"]


def test_a_queue_asks_for_one_reclaim_at_a_time() -> None:
    """b borrows a's 16 GPUs as two gangs; a submits two gangs of 8 that could each reclaim
    one. The first asks; the second waits for quota while that reclaim is outstanding (as
    Kueue keeps a preempting head at the head of its ClusterQueue)."""
    admission = cluster(
        *two_racks(),
        queues=[
            QueueConfig(
                name="a",
                parent="research",
                nominal={GPU: 16},
                preemption=QueuePreemption(reclaim_within_cohort="Any"),
            ),
            team("b", 16),
        ],
    )
    admission.set_workload(gang("b-own", 2, 8, queue="b", created_at=0))
    admission.set_workload(gang("b-borrow-1", 1, 8, queue="b", created_at=1))
    admission.set_workload(gang("b-borrow-2", 1, 8, queue="b", created_at=2))
    admission.cycle(now=1.0)
    assert len(admission.admitted()) == 3
    admission.set_workload(gang("a1", 1, 8, queue="a", created_at=3))
    admission.set_workload(gang("a2", 1, 8, queue="a", created_at=4))
    decided = bodies(admission.cycle(now=2.0))
    assert [b.workload for b in decided if isinstance(b, PreemptRequested)] == ["ns/a1"]
    assert reasons(decided) == {"ns/a1": "WaitingForPreemption", "ns/a2": "ExceedsQuota"}
    # Still one while that request is outstanding.
    assert only(admission.cycle(now=3.0), PreemptRequested) == []


def test_a_gang_waiting_for_quota_is_tried_again_only_when_its_tree_moves() -> None:
    """A gang waiting for its cohort's quota is not tried again when capacity or another
    tree's usage changes (nothing it depends on moved), and is when its own tree's does."""
    admission = cohort_of_two()
    admission.set_queue(QueueConfig(name="other", nominal={GPU: 8}, parent="elsewhere"))
    admission.set_workload(gang("hold", 2, 8, queue="a", created_at=0))
    admission.cycle(now=1.0)
    admission.set_workload(gang("waits", 1, 8, queue="a", created_at=1))
    assert reasons(bodies(admission.cycle(now=2.0))) == {"ns/waits": "ExceedsQuota"}
    record = admission.records[msg.key("waits")]
    tries = record.tries
    admission.capacity.update(msg.capacity_node("n5", "b1", "r2", gpus=8))
    admission.set_workload(gang("elsewhere", 1, 8, queue="other", created_at=2))
    decided = bodies(admission.cycle(now=3.0))
    assert [b.workload for b in decided if isinstance(b, Admitted)] == ["ns/elsewhere"]
    assert record.tries == tries  # not tried again
    # Its own tree moves: the gang holding the cohort's quota is deleted.
    admission.remove_workload(msg.key("hold"))
    decided = bodies(admission.cycle(now=4.0))
    assert [b.workload for b in decided if isinstance(b, Admitted)] == ["ns/waits"]


def test_a_gang_judged_by_one_like_it_counts_as_tried_on_that_quota() -> None:
    """A gang left waiting because an earlier one of its queue asking no more waits for quota
    is remembered as tried on that quota, like the earlier one: in later cycles where only
    another tree moves, both are skipped by that memory alone (the earlier one is skipped
    first, so no comparison with it could vouch for the later one)."""
    admission = cluster(*two_racks(), queues=[team("a", 16), team("b", 8)])
    admission.set_cohort(CohortConfig(name="research"))
    admission.set_queue(QueueConfig(name="other", nominal={GPU: 8}, parent="elsewhere"))
    admission.set_workload(gang("hold", 2, 8, queue="a", created_at=0))
    admission.set_workload(gang("b-job", 1, 8, queue="b", created_at=0))
    admission.cycle(now=1.0)
    admission.set_workload(gang("first", 2, 8, queue="a", created_at=1))
    admission.set_workload(gang("like-it", 2, 8, queue="a", created_at=2))
    admission.cycle(now=2.0)
    # Their tree moves, not enough: the first is tried again, the other is judged by it.
    admission.remove_workload(msg.key("b-job"))
    admission.cycle(now=3.0)
    first, like_it = (admission.records[msg.key(n)] for n in ("first", "like-it"))
    assert first.reason == like_it.reason == "ExceedsQuota"
    assert first.quota_tried is not None
    assert like_it.quota_tried == first.quota_tried
    # Only another tree moves: neither is tried again.
    tries = (first.tries, like_it.tries)
    admission.set_workload(gang("elsewhere", 1, 8, queue="other", created_at=4))
    decided = bodies(admission.cycle(now=4.0))
    assert [b.workload for b in decided if isinstance(b, Admitted)] == ["ns/elsewhere"]
    assert (first.tries, like_it.tries) == tries
