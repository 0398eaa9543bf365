"""Elastic workloads: growth admitted as a delta (quota, placement next to its pods, inside its
required domain, per pod), and slots given back as a workload shrinks."""

import msgspec

from tidegate.model import (
    Admitted,
    DomainCount,
    Pending,
    Preempted,
    PreemptRequested,
    QueueConfig,
    TopologyAssignment,
    WorkloadKey,
    WorkloadState,
)
from tidegate.policy.admission import Admission
from tidegate.policy.elastic import (
    common_prefix,
    gives_back,
    growth,
    growth_still_wanted,
    shrunk,
    surplus,
)

from .test_admission import GPU, RACK, cluster, msg, only

KEY = WorkloadKey("ns/a")


def admit(admission: Admission, state: WorkloadState) -> Admitted:
    admission.set_workload(state)
    (body,) = only(admission.cycle(now=1.0), Admitted)
    assert isinstance(body, Admitted)
    return body


def scaled(state: WorkloadState, count: int) -> WorkloadState:
    podset = msgspec.structs.replace(state.podsets[0], count=count)
    return msgspec.structs.replace(state, podsets=[podset])


def hosts(admitted: Admitted) -> dict[str, int]:
    return {d.values[-1]: d.count for d in admitted.assignments["workers"].domains}


def racks(admitted: Admitted) -> set[str]:
    return {d.values[1] for d in admitted.assignments["workers"].domains}


def four_racks() -> Admission:
    """Racks r1 and r2 with two 8-GPU nodes each."""
    return cluster(
        msg.capacity_node("n1", "b1", "r1"),
        msg.capacity_node("n2", "b1", "r1"),
        msg.capacity_node("n3", "b1", "r2"),
        msg.capacity_node("n4", "b1", "r2"),
    )


def test_growth_is_a_resize_of_the_delta_next_to_the_pods_it_has() -> None:
    admission = four_racks()
    state = msg.workload("a", msg.podset(count=2, gpus=4, required=RACK), service_type="inference")
    first = admit(admission, state)
    assert sum(hosts(first).values()) == 2
    admission.set_workload(scaled(state, 4))
    (decision,) = admission.cycle(now=2.0)
    body = decision.body
    assert isinstance(body, Admitted)
    assert body.replaces == first.sequence
    assert body.resized
    assert body.sequence > first.sequence
    assert sum(hosts(body).values()) == 4
    assert racks(body) == racks(first)  # next to the pods it has
    assert body.charged[GPU] == 16
    # Only the delta is taken from the capacity view (the first two pods are there already).
    assert sum(u[GPU] for u in decision.node_usage.values()) == 8
    assert admission.quota.usage("q").resources[GPU] == 16
    # Nothing more to grow: no further decision.
    assert admission.cycle(now=3.0) == []


def test_growth_is_seen_after_cycles_that_found_the_workload_not_growing() -> None:
    # Cycles remember an admitted workload that does not grow (so they skip comparing it
    # again); a new size must still be seen, each time.
    admission = four_racks()
    state = msg.workload("a", msg.podset(count=2, gpus=4, required=RACK), service_type="inference")
    first = admit(admission, state)
    assert admission.cycle(now=1.5) == []
    assert admission.cycle(now=1.6) == []
    admission.set_workload(scaled(state, 4))
    (decision,) = admission.cycle(now=2.0)
    grown = decision.body
    assert isinstance(grown, Admitted)
    assert grown.replaces == first.sequence
    assert sum(hosts(grown).values()) == 4
    assert admission.cycle(now=2.5) == []
    admission.set_workload(scaled(state, 6))  # beyond its rack: it asks for preemption
    assert [type(d.body) for d in admission.cycle(now=3.0)] == [PreemptRequested, Pending]


def test_growth_beyond_the_required_rack_is_admitted_per_pod_and_the_rest_waits() -> None:
    admission = four_racks()  # a rack holds four 4-GPU pods
    state = msg.workload("a", msg.podset(count=2, gpus=4, required=RACK))
    first = admit(admission, state)
    admission.set_workload(scaled(state, 6))
    (decision,) = admission.cycle(now=2.0)
    grown = decision.body
    assert isinstance(grown, Admitted)
    assert sum(hosts(grown).values()) == 4
    assert racks(grown) == racks(first)
    (pending,) = admission.cycle(now=3.0)
    assert isinstance(pending.body, Pending)
    assert pending.body.reason == "RequiredDomainFull"
    assert "2 more pods of workers must stay inside" in pending.body.message
    assert admission.is_admitted(KEY)
    # The reason is published once, not every cycle.
    assert admission.cycle(now=4.0) == []


def test_growth_checks_the_quota_for_the_delta_only() -> None:
    admission = four_racks()
    admission.set_queue(QueueConfig(name="q", quota={GPU: 12}))
    state = msg.workload("a", msg.podset(count=2, gpus=4))
    admit(admission, state)
    admission.set_workload(scaled(state, 4))
    (grown, pending) = (d.body for d in admission.cycle(now=2.0) + admission.cycle(now=3.0))
    assert isinstance(grown, Admitted)
    assert sum(hosts(grown).values()) == 3
    assert grown.charged[GPU] == 12
    assert isinstance(pending, Pending)
    assert pending.reason == "ExceedsQuota"
    assert "1 more pods of workers" in pending.message


def test_a_workload_without_a_required_level_grows_elsewhere_when_its_rack_is_full() -> None:
    admission = four_racks()
    state = msg.workload("a", msg.podset(count=2, gpus=8))
    first = admit(admission, state)
    admission.set_workload(scaled(state, 3))
    (decision,) = admission.cycle(now=2.0)
    body = decision.body
    assert isinstance(body, Admitted)
    assert len(racks(body)) == 2
    assert racks(first) < racks(body)


def test_a_shrink_gives_back_only_the_surplus_of_the_slots_named_and_its_quota() -> None:
    admission = four_racks()
    state = msg.workload("a", msg.podset(count=4, gpus=4), service_type="inference")
    first = admit(admission, state)
    admission.set_workload(scaled(state, 1))
    assert admission.cycle(now=2.0) == []  # the shrink follows the pods, not the spec
    freed = first.assignments["workers"].domains
    (decision,) = admission.replace(
        msg.replace_requested(
            "a", {"workers": freed}, admitted_sequence=first.sequence, give_back=True
        ),
        now=3.0,
    )
    body = decision.body
    assert isinstance(body, Admitted)
    assert body.replaces == first.sequence
    assert body.resized
    assert sum(hosts(body).values()) == 1  # four named, three surplus: one slot kept
    assert body.charged[GPU] == 4
    assert admission.quota.usage("q").resources[GPU] == 4
    # A repeated request names the admission it was about: ignored.
    assert (
        admission.replace(
            msg.replace_requested(
                "a", {"workers": freed}, admitted_sequence=first.sequence, give_back=True
            ),
            now=4.0,
        )
        == []
    )
    # Nothing surplus any more: a request about the new admission changes nothing.
    assert (
        admission.replace(
            msg.replace_requested(
                "a",
                {"workers": body.assignments["workers"].domains},
                admitted_sequence=body.sequence,
                give_back=True,
            ),
            now=5,
        )
        == []
    )


def test_freed_quota_admits_a_waiting_workload() -> None:
    admission = four_racks()
    admission.set_queue(QueueConfig(name="q", quota={GPU: 16}))
    state = msg.workload("a", msg.podset(count=4, gpus=4))
    first = admit(admission, state)
    admission.set_workload(msg.workload("b", msg.podset(count=2, gpus=4), created_at=1.0))
    assert only(admission.cycle(now=2.0), Pending)
    admission.set_workload(scaled(state, 2))
    admission.replace(
        msg.replace_requested(
            "a",
            {"workers": first.assignments["workers"].domains},
            admitted_sequence=first.sequence,
            give_back=True,
        ),
        now=3.0,
    )
    (admitted,) = only(admission.cycle(now=4.0), Admitted)
    assert isinstance(admitted, Admitted)
    assert admitted.workload == "ns/b"


def test_a_restored_resize_charges_the_new_size() -> None:
    admission = four_racks()
    state = msg.workload("a", msg.podset(count=2, gpus=4))
    admit(admission, state)
    admission.set_workload(scaled(state, 3))
    (decision,) = admission.cycle(now=2.0)
    assert isinstance(decision.body, Admitted)
    successor = four_racks()
    successor.set_workload(scaled(state, 3))
    successor.restore(decision.body, decision.node_usage, now=3.0)
    assert successor.quota.usage("q").resources[GPU] == 12
    assert successor.cycle(now=4.0) == []  # nothing admitted twice


def test_pure_helpers() -> None:
    levels = ["b", "r", "h"]
    assignment = TopologyAssignment(
        levels=levels,
        domains=[
            DomainCount(values=["b1", "r1", "n1"], count=2),
            DomainCount(values=["b1", "r1", "n2"], count=1),
        ],
    )
    assert common_prefix(assignment) == ["b1", "r1"]
    left, removed = shrunk(assignment, [DomainCount(values=["b1", "r1", "n1"], count=5)], 1)
    assert removed == 1
    assert [d.count for d in left.domains] == [1, 1]
    left, removed = shrunk(assignment, [DomainCount(values=["b1", "r9", "n1"], count=1)], 3)
    assert removed == 0
    assert left.domains == assignment.domains
    admitted = Admitted(
        workload="ns/a",
        uid="u",
        queue="q",
        sequence=1,
        epoch=1,
        assignments={"workers": assignment},
    )
    state = msg.workload("a", msg.podset(count=5, gpus=1))
    assert growth(state, admitted) == {"workers": 2}
    assert surplus(state, admitted) == {}
    state = msg.workload("a", msg.podset(count=1, gpus=1))
    assert growth(state, admitted) == {}
    assert surplus(state, admitted) == {"workers": 2}


def test_inference_growth_short_of_room_asks_preemption_for_the_delta_in_its_rack() -> None:
    admission = cluster(msg.capacity_node("n1", "b1", "r1"), msg.capacity_node("n2", "b1", "r1"))
    state = msg.workload("a", msg.podset(count=2, gpus=4, required=RACK), service_type="inference")
    first = admit(admission, state)
    (mine,) = set(hosts(first))  # best fit: both pods on one node
    theirs = "n2" if mine == "n1" else "n1"
    train = msg.workload("t", msg.podset(count=1, gpus=8), created_at=1.0)
    train = msgspec.structs.replace(
        train, podsets=[msgspec.structs.replace(train.podsets[0], node_selector={})]
    )
    admission.set_workload(train)
    (taken,) = only(admission.cycle(now=1.5), Admitted)
    assert set(hosts(taken)) == {theirs}
    admission.set_workload(scaled(state, 4))
    request, pending = (d.body for d in admission.cycle(now=2.0))
    assert isinstance(request, PreemptRequested)
    assert request.admitted_sequence == first.sequence
    (delta,) = request.podsets
    assert delta.count == 2  # only the extra pods, pinned to its rack
    assert delta.node_selector["example.com/rack"] == "r1"
    assert isinstance(pending, Pending)
    assert pending.reason == "WaitingForPreemption"
    assert admission.is_admitted(KEY)
    assert admission.cycle(now=2.5) == []  # not asked again while outstanding
    # The training Job is preempted; its room on n2 is held for a's growth.
    preempted = Preempted(
        preemptor="ns/a",
        preemptor_uid="uid-a",
        victims=["ns/t"],
        nominated={theirs: {GPU: 8, "cpu": 1000, "pods": 1}},
    )
    (released,) = admission.preempted(preempted, now=3.0)
    assert released.body.workload == "ns/t"
    admission.capacity.update(msg.capacity_node(theirs, "b1", "r1", applied=released.body.sequence))
    # A newcomer does not get the held room; a's growth does.
    admission.set_workload(msg.workload("b", msg.podset(count=1, gpus=8), created_at=2.0))
    decisions = admission.cycle(now=4.0)
    (grown,) = only(decisions, Admitted)
    assert isinstance(grown, Admitted)
    assert grown.workload == "ns/a"
    assert grown.resized
    assert hosts(grown) == {mine: 2, theirs: 2}
    assert not admission.nominations()


def test_only_workloads_sized_by_their_spec_give_slots_back() -> None:
    job = msg.workload("a", msg.podset(count=1, gpus=1))
    assert gives_back(job)
    for kind in ("Deployment", "ReplicaSet", "JobSet"):
        assert gives_back(msgspec.structs.replace(job, owner_kind=kind))
    for kind in ("PodGroup", "Pod", "StatefulSet"):
        assert not gives_back(msgspec.structs.replace(job, owner_kind=kind))


def test_a_growth_request_still_wanted_only_while_its_admission_is_in_force_and_it_grows() -> None:
    """A stale growth request is wanted no more (the service test:
    tests/preemption/test_stale_growth.py)."""
    admission = four_racks()
    state = msg.workload("a", msg.podset(count=2, gpus=4, required=RACK), service_type="inference")
    first = admit(admission, state)
    grown = scaled(state, 5)
    extra = msgspec.structs.replace(grown.podsets[0], count=3)
    request = PreemptRequested(
        workload="ns/a",
        uid=first.uid,
        queue="q",
        sequence=first.sequence + 1,
        podsets=[extra],
        admitted_sequence=first.sequence,
    )
    assert growth_still_wanted(request, grown, first) == [extra]
    # The workload scaled back part of the way, or all the way.
    (partly,) = growth_still_wanted(request, scaled(state, 3), first) or []
    assert partly.count == 1
    assert growth_still_wanted(request, state, first) == []
    # A later admission is in force (the growth admitted, a resize, a move): stale.
    later = msgspec.structs.replace(first, sequence=first.sequence + 2, replaces=first.sequence)
    assert growth_still_wanted(request, grown, later) == []
    # An older one: the caller has not seen the admission the request grows yet.
    older = msgspec.structs.replace(first, sequence=first.sequence - 1)
    assert growth_still_wanted(request, grown, older) is None
    # Without admitted_sequence (an older writer): by the growth alone.
    legacy = msgspec.structs.replace(request, admitted_sequence=None)
    assert growth_still_wanted(legacy, grown, later) == [extra]
