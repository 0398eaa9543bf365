"""Suspended workloads: a suspension tidegate did not make reserves nothing and releases an
admission in force (``Suspended``); one made for tidegate (Kueue's way) is admitted as usual."""

import msgspec

from tidegate.model import Admitted, QueueConfig, Released, WorkloadKey
from tidegate.policy.admission import stopped

from .test_admission import cluster, msg, only, pending_reasons, two_racks
from .test_admission_finished import admitted_ids

KEY = WorkloadKey("ns/a")


def test_a_workload_queued_for_tidegate_is_admitted_while_suspended() -> None:
    admission = cluster(*two_racks())
    queued = msg.workload(
        "a", msg.podset(count=1, gpus=8), suspended=True, resume_on_admission=True
    )
    assert not stopped(queued)
    admission.set_workload(queued)
    assert admitted_ids(admission.cycle(now=1.0)) == ["ns/a"]
    # tidegate unsuspends it: still the same admission, nothing released.
    resumed = msgspec.structs.replace(queued, suspended=False, resume_on_admission=False)
    assert admission.set_workload(resumed) == []
    assert admission.is_admitted(KEY)


def test_a_stopped_workload_is_never_admitted_and_does_not_wait() -> None:
    admission = cluster(*two_racks())
    admission.set_workload(msg.workload("a", msg.podset(count=1, gpus=8), suspended=True))
    assert admission.cycle(now=1.0) == []
    assert admission.waiting() == {}
    assert admission.quota.usage("q").resources == {}


def test_suspending_an_admitted_workload_releases_it_and_resuming_queues_it_again() -> None:
    admission = cluster(
        *two_racks(), queues=[QueueConfig(name="q", quota={"cpu": 10**6, "nvidia.com/gpu": 8})]
    )
    gang = msg.workload("a", msg.podset(count=1, gpus=8), created_at=1)
    admission.set_workload(gang)
    admission.set_workload(msg.workload("b", msg.podset(count=1, gpus=8), created_at=2))
    first = admission.cycle(now=1.0)
    assert admitted_ids(first) == ["ns/a"]
    assert pending_reasons(first) == {"ns/b": "ExceedsQuota"}
    (admitted,) = only(first, Admitted)
    assert isinstance(admitted, Admitted)

    (released,) = admission.set_workload(msgspec.structs.replace(gang, suspended=True))
    body = released.body
    assert isinstance(body, Released)
    assert (body.workload, body.uid, body.reason) == ("ns/a", "uid-a", "Suspended")
    assert body.sequence > admitted.sequence
    # Its quota went to the next one; republished suspended, it releases nothing again.
    assert admitted_ids(admission.cycle(now=2.0)) == ["ns/b"]
    assert admission.set_workload(msgspec.structs.replace(gang, suspended=True, priority=3)) == []
    # Resumed: it waits for quota like any other workload.
    admission.set_workload(gang)
    assert pending_reasons(admission.cycle(now=3.0)) == {"ns/a": "ExceedsQuota"}


def test_a_successor_releases_a_restored_admission_whose_workload_was_suspended() -> None:
    admission = cluster(*two_racks())
    gang = msg.workload("a", msg.podset(count=1, gpus=8))
    admission.set_workload(gang)
    (admitted,) = only(admission.cycle(now=1.0), Admitted)
    assert isinstance(admitted, Admitted)
    successor = cluster(*two_racks())
    # The replay shows it suspended before the ledger's admissions are restored.
    assert successor.set_workload(msgspec.structs.replace(gang, suspended=True)) == []
    successor.restore(admitted, {}, now=2.0)
    (released,) = successor.release_orphans()
    assert isinstance(released.body, Released)
    assert released.body.reason == "Suspended"


def test_a_workload_whose_namespace_is_being_deleted_is_never_admitted_and_gives_back() -> None:
    # Its objects are about to go; a Job that cannot re-create an evicted pod there (a
    # finalizer held in a namespace being deleted) would otherwise hold room for nothing.
    admission = cluster(*two_racks())
    doomed = msg.workload("b", msg.podset(count=1, gpus=8), created_at=2, namespace_deleting=True)
    assert stopped(doomed)
    gang = msg.workload("a", msg.podset(count=1, gpus=8), created_at=1)
    admission.set_workload(gang)
    admission.set_workload(doomed)
    first = admission.cycle(now=1.0)
    assert admitted_ids(first) == ["ns/a"]
    assert admission.waiting() == {}
    (released,) = admission.set_workload(msgspec.structs.replace(gang, namespace_deleting=True))
    body = released.body
    assert isinstance(body, Released)
    assert (body.workload, body.reason) == ("ns/a", "Deleted")
    assert "namespace" in body.message
    assert admission.cycle(now=2.0) == []
    assert admission.quota.usage("q").resources == {}
