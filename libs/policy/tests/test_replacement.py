"""Replacement slots after node failures: inside the required domain, or the gang is evicted."""

import msgspec
import pytest

from tidegate.model import (
    Admitted,
    DomainCount,
    PodSetSpec,
    Released,
    ReplaceRequested,
    TopologyRequest,
    WorkloadKey,
)
from tidegate.policy.admission import Admission
from tidegate.policy.replacement import (
    ReplacementError,
    merged_assignments,
    replacement_podsets,
    required_prefix,
)

from .test_admission import GPU, cluster, msg, only

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"


def admitted_on(admission: Admission) -> Admitted:
    """Admit ``ns/a`` (four 4-GPU workers, required rack) and return the admission."""
    admission.set_workload(msg.workload("a", msg.podset(count=4, gpus=4, required=RACK)))
    (body,) = only(admission.cycle(now=1.0), Admitted)
    assert isinstance(body, Admitted)
    return body


def lost_in(admitted: Admitted, *hosts: str) -> ReplaceRequested:
    """The request for the slots of ``hosts``."""
    domains = [d for d in admitted.assignments["workers"].domains if d.values[-1] in hosts]
    return msg.replace_requested(
        "a", {"workers": domains}, admitted_sequence=admitted.sequence, nodes=list(hosts)
    )


def three_racks() -> Admission:
    """Rack r1: three 8-GPU nodes; rack r2: one (too small for the gang)."""
    return cluster(
        msg.capacity_node("n1", "b1", "r1"),
        msg.capacity_node("n2", "b1", "r1"),
        msg.capacity_node("n3", "b1", "r1"),
        msg.capacity_node("n4", "b1", "r2"),
    )


def evicted_without_room() -> tuple[Admission, str, Released]:
    """Two racks of two nodes: ``ns/a`` admitted, then one host found full by the scheduler,
    and no room left in its rack: the admission, that host and the eviction."""
    admission = cluster(
        msg.capacity_node("n1", "b1", "r1"),
        msg.capacity_node("n2", "b1", "r1"),
        msg.capacity_node("n3", "b1", "r2"),
        msg.capacity_node("n4", "b1", "r2"),
    )
    first = admitted_on(admission)
    host = first.assignments["workers"].domains[0].values[-1]
    request = msgspec.structs.replace(lost_in(first, host), cause="Unschedulable")
    (evicted,) = admission.replace(request, now=2.0)
    assert isinstance(evicted.body, Released)
    return admission, host, evicted.body


def test_required_prefix_per_kind_of_request() -> None:
    target = msg.assignment({("b1", "r1", "n1"): 2, ("b1", "r1", "n2"): 1})
    rack = PodSetSpec(name="w", count=3, topology=TopologyRequest(required=RACK))
    auto = PodSetSpec(name="w", count=3, topology=TopologyRequest(required="auto"))
    free = PodSetSpec(name="w", count=3)
    assert required_prefix(rack, target) == ["b1", "r1"]
    assert required_prefix(auto, target) == ["b1", "r1"]
    assert required_prefix(free, target) == []
    with pytest.raises(ReplacementError, match="not a level"):
        required_prefix(
            PodSetSpec(name="w", count=1, topology=TopologyRequest(required="x")), target
        )


def test_lost_slots_are_placed_again_inside_the_rack_avoiding_failed_nodes() -> None:
    admission = three_racks()
    admitted = admitted_on(admission)
    hosts = {d.values[-1] for d in admitted.assignments["workers"].domains}
    assert {d.values[1] for d in admitted.assignments["workers"].domains} == {"r1"}
    failed = sorted(hosts)[:1]  # one of its two hosts; the rack's third node has room for 2
    (decision,) = admission.replace(lost_in(admitted, *failed), now=2.0)
    body = decision.body
    assert isinstance(body, Admitted)
    assert body.replaces == admitted.sequence
    assert body.sequence > admitted.sequence
    assert body.charged == admitted.charged
    domains = body.assignments["workers"].domains
    assert sum(d.count for d in domains) == 4
    assert all(d.values[1] == "r1" for d in domains)
    assert not {d.values[-1] for d in domains} & set(failed)
    assert admission.admitted()[WorkloadKey("ns/a")] == body
    # Taken from the view: a second identical request is about an old admission, ignored.
    assert admission.replace(lost_in(admitted, *failed), now=3.0) == []


def test_slots_the_scheduler_found_full_are_moved_and_say_why() -> None:
    admission = three_racks()
    admitted = admitted_on(admission)
    full = sorted({d.values[-1] for d in admitted.assignments["workers"].domains})[:1]
    request = msgspec.structs.replace(lost_in(admitted, *full), cause="Unschedulable")
    (decision,) = admission.replace(request, now=2.0)
    body = decision.body
    assert isinstance(body, Admitted)
    assert (body.replaces, body.replace_cause) == (admitted.sequence, "Unschedulable")
    assert not {d.values[-1] for d in body.assignments["workers"].domains} & set(full)
    # Without room, the eviction's message says the scheduler found no room, not that nodes
    # failed.
    _, host, evicted = evicted_without_room()
    assert f"the scheduler found no room for released pods on nodes {host}" in evicted.message


def test_unschedulable_moves_are_counted_along_the_chain_and_across_an_eviction() -> None:
    admission = cluster(
        msg.capacity_node("n1", "b1", "r1"),
        msg.capacity_node("n2", "b1", "r1"),
        msg.capacity_node("n3", "b1", "r1"),
        msg.capacity_node("n4", "b1", "r1"),
        msg.capacity_node("n5", "b1", "r2"),
    )
    first = admitted_on(admission)
    assert first.unschedulable_moves == 0
    hosts = sorted({d.values[-1] for d in first.assignments["workers"].domains})
    request = msgspec.structs.replace(lost_in(first, hosts[0]), cause="Unschedulable")
    (moved,) = admission.replace(request, now=2.0)
    assert isinstance(moved.body, Admitted)
    assert moved.body.unschedulable_moves == 1
    # A node failure moves slots too but is not the scheduler's refusal: the count stays.
    failed = sorted({d.values[-1] for d in moved.body.assignments["workers"].domains})[:1]
    (again,) = admission.replace(lost_in(moved.body, *failed), now=3.0)
    assert isinstance(again.body, Admitted)
    assert again.body.unschedulable_moves == 1
    # No room left in the rack: evicted and re-queued, and the next admission goes on counting.
    full = sorted({d.values[-1] for d in again.body.assignments["workers"].domains})
    request = msgspec.structs.replace(lost_in(again.body, *full), cause="Unschedulable")
    (evicted,) = admission.replace(request, now=4.0)
    assert isinstance(evicted.body, Released)
    assert evicted.body.evict_pods
    for name, rack in (("n1", "r1"), ("n2", "r1"), ("n3", "r1"), ("n4", "r1"), ("n5", "r2")):
        admission.capacity.update(
            msg.capacity_node(name, "b1", rack, applied=admission.sequence)
        )  # pods gone
    (readmitted,) = only(admission.cycle(now=5.0), Admitted)
    assert isinstance(readmitted, Admitted)
    assert (readmitted.replaces, readmitted.unschedulable_moves) == (None, 2)


def test_a_new_object_of_the_same_name_starts_counting_moves_from_nought() -> None:
    admission, _, _ = evicted_without_room()
    admission.set_workload(
        msgspec.structs.replace(
            msg.workload("a", msg.podset(count=4, gpus=4, required=RACK)), uid="uid-b"
        )
    )
    (fresh,) = only(admission.cycle(now=3.0), Admitted)
    assert isinstance(fresh, Admitted)
    assert (fresh.uid, fresh.unschedulable_moves) == ("uid-b", 0)


def test_no_room_in_the_required_domain_evicts_the_gang_and_requeues_it() -> None:
    admission = cluster(
        msg.capacity_node("n1", "b1", "r1"),
        msg.capacity_node("n2", "b1", "r1"),
        msg.capacity_node("n3", "b1", "r2"),
        msg.capacity_node("n4", "b1", "r2"),
    )
    admitted = admitted_on(admission)
    rack = admitted.assignments["workers"].domains[0].values[1]
    failed = sorted({d.values[-1] for d in admitted.assignments["workers"].domains})
    (decision,) = admission.replace(lost_in(admitted, failed[0]), now=2.0)
    body = decision.body
    assert isinstance(body, Released)
    assert (body.reason, body.evict_pods) == ("Evicted", True)
    assert "no room for 2 replacement pods" in body.message
    assert not admission.is_admitted(WorkloadKey("ns/a"))
    assert admission.quota.usage("q").resources == {}
    # Back in its queue: admitted again in the other rack once the failed node is gone.
    admission.capacity.remove("default", failed[0])
    admission.capacity.update(msg.capacity_node(failed[0], "b1", rack, free_gpus=0))
    (again,) = only(admission.cycle(now=3.0), Admitted)
    assert isinstance(again, Admitted)
    assert again.replaces is None


def test_merge_keeps_the_rest_and_adds_the_new_domains() -> None:
    admitted = Admitted(
        workload="ns/a",
        uid="u",
        queue="q",
        sequence=4,
        epoch=1,
        assignments={"workers": msg.assignment({("b1", "r1", "n1"): 2, ("b1", "r1", "n2"): 2})},
    )
    lost = [DomainCount(values=["b1", "r1", "n2"], count=2)]
    request = msg.replace_requested("a", {"workers": lost}, admitted_sequence=4, uid="u")
    placed = {"workers": msg.assignment({("b1", "r1", "n1"): 1, ("b1", "r1", "n3"): 1})}
    merged = merged_assignments(admitted, request, placed)
    assert merged["workers"].domains == [
        DomainCount(values=["b1", "r1", "n1"], count=3),
        DomainCount(values=["b1", "r1", "n3"], count=1),
    ]
    gang = msg.workload("a", msg.podset(count=4, gpus=4, required=RACK))
    (podset,) = replacement_podsets(gang, admitted, request)
    assert (podset.count, podset.node_selector) == (2, {BLOCK: "b1", RACK: "r1"})
    assert podset.topology.required == RACK
    assert podset.requests[GPU] == 4
