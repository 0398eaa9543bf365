"""Which preemption records give a new leader a nomination, and with what time."""

import msgspec

from tidegate.admission.nominations import restore_nominations
from tidegate.model import (
    Admitted,
    CapacityNode,
    PodSetSpec,
    Preempted,
    QueueConfig,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model.ledger import PreemptionRecord, VictimRecord
from tidegate.policy.admission import Admission, AdmissionSettings

GPU = "nvidia.com/gpu"
SERVE = WorkloadKey("ns/serve")


def workload(name: str, service_type: str = "training") -> WorkloadState:
    """One pod of 8 GPUs."""
    return WorkloadState(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        owner_kind="Job",
        queue="q",
        created_at=1.0,
        service_type=service_type,  # type: ignore[arg-type]
        podsets=[PodSetSpec(name="workers", count=1, requests={"cpu": 1000, GPU: 8})],
    )


def scene() -> Admission:
    """A victim admitted on the only node (8 GPUs), an inference preemptor waiting."""
    admission = Admission(AdmissionSettings(nomination_timeout_seconds=100), epoch=2)
    admission.capacity.set_topology(TopologyConfig(name="default", levels=["rack", "host"]))
    node = {"cpu": 64_000, GPU: 8, "pods": 110}
    admission.capacity.update(
        CapacityNode(
            topology="default", node="n1", domain=["r1", "n1"], allocatable=node, free=node
        )
    )
    admission.set_queue(QueueConfig(name="q"))
    admission.set_workload(workload("victim"))
    (decision,) = admission.cycle(now=1.0)
    assert isinstance(decision.body, Admitted)
    admission.set_workload(workload("serve", service_type="inference"))
    return admission


def record(
    *,
    published_at: float | None = 10.0,
    evicted_at: float | None = 20.0,
    preemptor_uid: str = "uid-serve",
) -> PreemptionRecord:
    """A record of preempting the victim for serve (abort mode)."""
    decision = Preempted(
        preemptor="ns/serve",
        preemptor_uid=preemptor_uid,
        victims=["ns/victim"],
        mode={"ns/victim": "abort"},
        nominated={"n1": {GPU: 8, "cpu": 1000, "pods": 1}},
    )
    return PreemptionRecord(
        preemptor="ns/serve",
        preemptor_uid=preemptor_uid,
        request_sequence=3,
        decision=decision,
        victims=[VictimRecord(key="ns/victim", uid="uid-victim", mode="abort", owner_kind="Job")],
        recorded_at=5.0,
        event_id=f"preemption-{preemptor_uid}-3",
        published_at=published_at,
        evicted_at=evicted_at,
    )


def test_a_live_nomination_is_restored_with_its_time_from_the_end_of_evictions() -> None:
    admission = scene()
    assert restore_nominations(admission, [record()], now=50.0) == [SERVE]
    assert admission.nominations()[SERVE].at == 20.0
    # The victim is still admitted here: its release comes with the decision, not from this.
    assert admission.is_admitted(WorkloadKey("ns/victim"))
    admission.cycle(now=119.0)
    assert SERVE in admission.nominations()
    admission.cycle(now=120.0)
    assert admission.nominations() == {}


def test_the_time_counts_from_publishing_while_evictions_are_unfinished() -> None:
    admission = scene()
    assert restore_nominations(admission, [record(evicted_at=None)], now=50.0) == [SERVE]
    assert admission.nominations()[SERVE].at == 10.0


def test_expired_unpublished_recreated_or_admitted_preemptors_get_none() -> None:
    admission = scene()
    stale = [
        record(evicted_at=None, published_at=None),
        record(evicted_at=20.0),  # 100 s later: timed out
        record(preemptor_uid="uid-older-serve"),
    ]
    assert restore_nominations(admission, stale[:1], now=50.0) == []
    assert restore_nominations(admission, stale[1:2], now=120.0) == []
    assert restore_nominations(admission, stale[2:], now=50.0) == []
    assert admission.nominations() == {}


def test_an_aborted_victim_already_released_is_not_admitted_again() -> None:
    admission = scene()
    admission.release(WorkloadKey("ns/victim"), "Evicted")
    assert restore_nominations(admission, [record()], now=50.0) == [SERVE]
    decisions = admission.cycle(now=51.0)
    assert WorkloadKey("ns/victim") not in {d.key for d in decisions}


def growth_scene(*, grown: bool) -> Admission:
    """serve (inference) admitted with one pod on n1, the victim on n2; serve then scaled to
    two pods (``grown``) or not."""
    admission = Admission(AdmissionSettings(nomination_timeout_seconds=100), epoch=2)
    admission.capacity.set_topology(TopologyConfig(name="default", levels=["rack", "host"]))
    node = {"cpu": 64_000, GPU: 8, "pods": 110}
    for name in ("n1", "n2"):
        admission.capacity.update(
            CapacityNode(
                topology="default", node=name, domain=["r1", name], allocatable=node, free=node
            )
        )
    admission.set_queue(QueueConfig(name="q"))
    serve = workload("serve", service_type="inference")
    admission.set_workload(serve)
    admission.set_workload(workload("victim"))
    decisions = admission.cycle(now=1.0)
    assert {d.key for d in decisions if isinstance(d.body, Admitted)} == {SERVE, "ns/victim"}
    if grown:
        podset = msgspec.structs.replace(serve.podsets[0], count=2)
        admission.set_workload(msgspec.structs.replace(serve, podsets=[podset]))
    return admission


def test_a_nomination_for_an_admitted_workloads_growth_is_restored() -> None:
    """A successor restores the room nominated for a growth (skipping every admitted
    preemptor would leave the growth to compete for the freed room)."""
    admission = growth_scene(grown=True)
    assert restore_nominations(admission, [record()], now=50.0) == [SERVE]
    assert admission.nominations()[SERVE].at == 20.0


def test_an_admitted_preemptor_that_does_not_grow_gets_none() -> None:
    admission = growth_scene(grown=False)
    assert restore_nominations(admission, [record()], now=50.0) == []
    assert admission.nominations() == {}
