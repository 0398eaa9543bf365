"""Finished workloads: their quota comes back once, they are never admitted again, and a
successor that restores them from the ledger releases them exactly once."""

import msgspec
import pytest

from tidegate.model import Admitted, Pending, PreemptRequested, QueueConfig, Released, WorkloadKey
from tidegate.policy.admission import Admission, Decision

from .test_admission import cluster, msg, only, pending_reasons, two_racks

KEY = WorkloadKey("ns/a")


def admitted_ids(decisions: list[Decision]) -> list[str]:
    return [b.workload for b in only(decisions, Admitted) if isinstance(b, Admitted)]


def one_gang_queue() -> Admission:
    """Room for two 8-GPU gangs, quota for one."""
    return cluster(
        *two_racks(), queues=[QueueConfig(name="q", quota={"cpu": 10**6, "nvidia.com/gpu": 8})]
    )


@pytest.mark.parametrize("outcome", ["Completed", "Failed"])
def test_a_finished_workload_releases_its_quota_and_the_next_one_is_admitted(
    outcome: str,
) -> None:
    admission = one_gang_queue()
    gang = msg.workload("a", msg.podset(count=1, gpus=8), created_at=1)
    admission.set_workload(gang)
    admission.set_workload(msg.workload("b", msg.podset(count=1, gpus=8), created_at=2))
    first = admission.cycle(now=1.0)
    assert admitted_ids(first) == ["ns/a"]
    assert pending_reasons(first) == {"ns/b": "ExceedsQuota"}
    (admitted,) = only(first, Admitted)
    assert isinstance(admitted, Admitted)

    (released,) = admission.set_workload(msgspec.structs.replace(gang, finished=outcome))
    body = released.body
    assert isinstance(body, Released)
    assert (body.workload, body.uid, body.queue, body.reason) == ("ns/a", "uid-a", "q", outcome)
    assert body.message == f"Job ns/a {outcome.lower()}"
    assert body.sequence > admitted.sequence
    assert released.workload is not None
    assert released.workload.finished == outcome  # for the trace context and the name
    assert not admission.is_admitted(KEY)
    assert admitted_ids(admission.cycle(now=2.0)) == ["ns/b"]


def test_a_finished_workload_is_released_once_and_never_admitted_again() -> None:
    admission = cluster(*two_racks())
    gang = msg.workload("a", msg.podset(count=1, gpus=8))
    admission.set_workload(gang)
    admission.cycle(now=1.0)
    done = msgspec.structs.replace(gang, finished="Completed")
    assert len(admission.set_workload(done)) == 1
    # The watcher republishes it (another field changed), a replay delivers it again.
    assert admission.set_workload(msgspec.structs.replace(done, priority=5)) == []
    assert admission.set_workload(done) == []
    assert admission.cycle(now=2.0) == []  # room and quota for it, but it is done
    # Another release, by another service, of the same admission changes nothing either.
    assert admission.release_if(KEY, uid="uid-a", before=0, reason="Completed") is None
    assert admission.quota.usage("q").resources == {}


def test_a_workload_that_finished_while_waiting_stops_waiting_and_publishes_nothing() -> None:
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=0))
    serve = msg.workload("a", msg.podset(count=1, gpus=8), service_type="inference")
    admission.set_workload(serve)
    waiting = admission.cycle(now=1.0)
    assert [type(d.body) for d in waiting] == [PreemptRequested, Pending]
    # E.g. a Job whose activeDeadlineSeconds ran out while its pods were gated.
    assert admission.set_workload(msgspec.structs.replace(serve, finished="Failed")) == []
    admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=8, applied=10))
    assert admission.cycle(now=100.0) == []  # not admitted, no new preemption request
    assert admission.last_reason(KEY) is None


def test_a_successor_releases_a_workload_that_finished_while_nobody_led_exactly_once() -> None:
    leader = cluster(*two_racks())
    gang = msg.workload("a", msg.podset(count=1, gpus=8))
    leader.set_workload(gang)
    (decision,) = leader.cycle(now=1.0)
    assert isinstance(decision.body, Admitted)

    # The standby followed the state stream: it saw the workload finish, but restores the
    # admission from the ledger only when it takes over.
    successor = cluster(*two_racks())
    assert successor.set_workload(msgspec.structs.replace(gang, finished="Completed")) == []
    successor.restore(decision.body, decision.node_usage, now=2.0)
    (released,) = successor.release_orphans()
    assert isinstance(released.body, Released)
    assert (released.body.reason, released.body.uid) == ("Completed", "uid-a")
    assert successor.release_orphans() == []
    assert successor.cycle(now=3.0) == []
    assert successor.quota.usage("q").resources == {}


def test_finished_applies_to_its_own_uid_only() -> None:
    admission = cluster(*two_racks())
    admission.set_workload(msg.workload("a", msg.podset()))
    admission.cycle(now=1.0)
    # The old object is replaced by a new one that has already finished (a bare Pod re-created
    # and run to the end while admission was not looking): the old admission is Deleted.
    recreated = msgspec.structs.replace(
        msg.workload("a", msg.podset()), uid="new", finished="Completed"
    )
    (released,) = admission.set_workload(recreated)
    assert isinstance(released.body, Released)
    assert (released.body.uid, released.body.reason) == ("uid-a", "Deleted")
    assert admission.cycle(now=2.0) == []
    # A third object under the name, not finished, is admitted: "done" belonged to a uid.
    admission.set_workload(msgspec.structs.replace(msg.workload("a", msg.podset()), uid="third"))
    assert admitted_ids(admission.cycle(now=3.0)) == ["ns/a"]
