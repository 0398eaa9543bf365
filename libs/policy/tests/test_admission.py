"""The admission cycle: gang, quota, cards, topology, FIFO strategies, preemption, nominations."""

from collections.abc import Iterable

import msgspec
import pytest

from tidegate.model import (
    Admitted,
    CapacityNode,
    LostAdmission,
    NodeState,
    Pending,
    PodSetSpec,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    TopologyConfig,
    TopologyRequest,
    WorkloadKey,
    WorkloadState,
)
from tidegate.policy.admission import Admission, AdmissionSettings, Decision, minimum_podsets
from tidegate.testing.messages import Messages

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"

msg = Messages(
    namespace="ns", levels=[BLOCK, RACK, HOST], defaults={"workload": {"service_type": "training"}}
)
"""This suite's messages: workloads in namespace ns, queue q, of training."""


def cluster(
    *nodes: CapacityNode,
    queues: Iterable[QueueConfig] = (QueueConfig(name="q"),),
    settings: AdmissionSettings | None = None,
) -> Admission:
    admission = Admission(settings, epoch=3)
    admission.capacity.set_topology(msg.topology())
    for report in nodes:
        admission.capacity.update(report)
    for queue in queues:
        admission.set_queue(queue)
    return admission


def two_racks(gpus: int = 8) -> list[CapacityNode]:
    """Two racks of two nodes with ``gpus`` GPUs each."""
    return [
        msg.capacity_node("n1", "b1", "r1", gpus=gpus),
        msg.capacity_node("n2", "b1", "r1", gpus=gpus),
        msg.capacity_node("n3", "b1", "r2", gpus=gpus),
        msg.capacity_node("n4", "b1", "r2", gpus=gpus),
    ]


def bodies(decisions: list[Decision]) -> list[object]:
    return [d.body for d in decisions]


def only(decisions: list[Decision], kind: type) -> list[object]:
    return [d.body for d in decisions if isinstance(d.body, kind)]


def pending_reasons(decisions: list[Decision]) -> dict[str, str]:
    return {d.key: d.body.reason for d in decisions if isinstance(d.body, Pending)}


def test_a_gang_that_fits_is_admitted_with_assignments_charge_sequence_and_epoch() -> None:
    admission = cluster(*two_racks())
    admission.set_workload(msg.workload("a", msg.podset(count=2, gpus=8, required=RACK)))
    (decision,) = admission.cycle(now=1.0)
    body = decision.body
    assert isinstance(body, Admitted)
    assert (body.workload, body.uid, body.queue, body.sequence, body.epoch) == (
        "ns/a",
        "uid-a",
        "q",
        1,
        3,
    )
    assignment = body.assignments["workers"]
    assert assignment.levels == [BLOCK, RACK, HOST]
    assert sum(d.count for d in assignment.domains) == 2
    assert len({tuple(d.values[:2]) for d in assignment.domains}) == 1
    assert body.charged == {"cpu": 2000, GPU: 16}
    assert sum(u[GPU] for u in decision.node_usage.values()) == 16
    assert admission.quota.usage("q").resources == {"cpu": 2000, GPU: 16}
    assert admission.cycle(now=2.0) == []


def test_capacity_taken_in_a_cycle_is_gone_for_the_next_workload() -> None:
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8))
    admission.set_workload(msg.workload("a", msg.podset(count=1, gpus=8), created_at=1))
    admission.set_workload(msg.workload("b", msg.podset(count=1, gpus=8), created_at=2))
    decisions = admission.cycle(now=1.0)
    assert [type(b).__name__ for b in bodies(decisions)] == ["Admitted", "Pending"]
    assert pending_reasons(decisions) == {"ns/b": "WaitingForCapacity"}
    free = admission.capacity.view("default")
    assert free is not None
    assert free.free("n1")[GPU] == 0


def test_gang_is_all_or_nothing_across_podsets() -> None:
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=16, free_gpus=8))
    launcher = PodSetSpec(name="launcher", count=1, requests={"cpu": 1000})
    gang = msg.workload("a", launcher, msg.podset(count=2, gpus=8))
    admission.set_workload(gang)
    decisions = admission.cycle(now=1.0)
    assert pending_reasons(decisions) == {"ns/a": "WaitingForCapacity"}
    view = admission.capacity.view("default")
    assert view is not None
    assert view.free("n1")["cpu"] == 64_000
    assert admission.quota.usage("q").resources == {}


def test_min_members_admits_the_minimum_when_the_whole_gang_does_not_fit() -> None:
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8))
    admission.set_workload(msg.workload("a", msg.podset(count=4, gpus=4), min_members=2))
    (decision,) = admission.cycle(now=1.0)
    assert isinstance(decision.body, Admitted)
    assert sum(d.count for d in decision.body.assignments["workers"].domains) == 2
    assert decision.body.charged == {"cpu": 2000, GPU: 8}


def test_minimum_podsets_cuts_from_the_last_podset() -> None:
    gang = msg.workload(
        "a",
        PodSetSpec(name="launcher", count=1),
        PodSetSpec(name="workers", count=4, min_count=3),
        PodSetSpec(name="evaluators", count=2),
        min_members=3,
    )
    minimum = minimum_podsets(gang)
    assert minimum is not None
    assert [(p.name, p.count) for p in minimum] == [("launcher", 1), ("workers", 2)]
    assert minimum_podsets(msg.workload("b", PodSetSpec(name="w", count=2))) is None
    with pytest.raises(ValueError, match="min_members: 5 is not between 1 and the workload's 2"):
        minimum_podsets(msg.workload("c", PodSetSpec(name="w", count=2), min_members=5))


def test_exceeds_quota_with_numbers() -> None:
    queue = QueueConfig(name="online", quota={"cpu": 100_000, GPU: 16})
    admission = cluster(*two_racks(), queues=[queue])
    admission.set_workload(
        msg.workload("a", msg.podset(count=3, gpus=4), queue="online", created_at=1)
    )
    admission.set_workload(
        msg.workload("b", msg.podset(count=2, gpus=4), queue="online", created_at=2)
    )
    decisions = admission.cycle(now=1.0)
    (pending,) = only(decisions, Pending)
    assert isinstance(pending, Pending)
    assert pending.reason == "ExceedsQuota"
    assert pending.message == "queue online: nvidia.com/gpu 12 in use + 8 requested > quota 16"


def test_card_quota_and_card_restriction_with_mig_names() -> None:
    mig = "nvidia.com/mig-1g.18gb"
    model = "NVIDIA-H200/mig-1g.18gb-mixed"
    queue = QueueConfig(name="online", quota={"cpu": 10**6}, card_quota={model: 4})
    admission = cluster(queues=[queue])
    for name, product in (("h1", "NVIDIA-H200"), ("a1", "NVIDIA-A100")):
        admission.capacity.set_node(NodeState(name=name, labels={PRODUCT: product}))
        admission.capacity.update(
            CapacityNode(
                topology="default",
                node=name,
                domain=["b1", "r1", name],
                allocatable={"cpu": 64_000, mig: 7},
                free={"cpu": 64_000, mig: 7},
            )
        )
    serve = PodSetSpec(name="serve", count=3, requests={"cpu": 100, mig: 1}, card_name=model)
    admission.set_workload(msg.workload("a", serve, queue="online", created_at=1))
    admission.set_workload(msg.workload("b", serve, queue="online", created_at=2))
    decisions = admission.cycle(now=1.0)
    admitted, pending = bodies(decisions)
    assert isinstance(admitted, Admitted)
    assert admitted.charged_cards == {model: 3}
    assert admitted.card_model == model
    assert [d.values[-1] for d in admitted.assignments["serve"].domains] == ["h1"]
    assert isinstance(pending, Pending)
    assert pending.reason == "CardQuotaExceeded"
    assert pending.message == f"queue online: {model} cards 3 in use + 3 requested > card quota 4"


def test_card_model_missing_from_card_quota_has_quota_zero() -> None:
    queue = QueueConfig(name="q", card_quota={"NVIDIA-A100": 8})
    admission = cluster(*two_racks(), queues=[queue])
    admission.set_workload(
        msg.workload("a", msg.podset(count=1, gpus=1), card_request={"NVIDIA-H200": 1})
    )
    decisions = admission.cycle(now=1.0)
    assert pending_reasons(decisions) == {"ns/a": "CardQuotaExceeded"}


def test_never_fits_in_this_topology_versus_waiting_for_capacity() -> None:
    admission = cluster(*two_racks())
    admission.set_workload(msg.workload("huge", msg.podset(count=3, gpus=8, required=RACK)))
    admission.set_workload(
        msg.workload("busy", msg.podset(count=2, gpus=8, required=RACK), created_at=1)
    )
    admission.set_workload(msg.workload("first", msg.podset(count=4, gpus=8), created_at=0))
    decisions = admission.cycle(now=1.0)
    reasons = pending_reasons(decisions)
    assert reasons == {"ns/huge": "TopologyPlacementFailed", "ns/busy": "WaitingForCapacity"}
    (huge,) = [
        b for b in only(decisions, Pending) if isinstance(b, Pending) and b.workload == "ns/huge"
    ]
    assert huge.message.startswith("cannot fit in topology default even with all 4 nodes empty: ")


def test_invalid_workloads_queues_and_unknown_queues_wait_with_a_reason() -> None:
    queues = [
        QueueConfig(name="q"),
        QueueConfig(name="broken", invalid_reason="spec.capability.cpu: 'x' is not a quantity"),
    ]
    admission = cluster(*two_racks(), queues=queues)
    admission.set_workload(
        msg.workload("bad", msg.podset(), invalid_reason="volcano.sh/card.request: not JSON")
    )
    admission.set_workload(msg.workload("lost", msg.podset(), queue="nope"))
    admission.set_workload(msg.workload("none", msg.podset(), queue=None))
    admission.set_workload(msg.workload("in-broken", msg.podset(), queue="broken"))
    admission.set_workload(
        msg.workload(
            "level",
            PodSetSpec(name="w", count=1, topology=TopologyRequest(required="no/such-level")),
        )
    )
    admission.set_workload(msg.workload("neg", PodSetSpec(name="w", count=-1)))
    admission.set_workload(msg.workload("ok", msg.podset()))
    decisions = admission.cycle(now=1.0)
    messages = {
        b.workload: (b.reason, b.message)
        for b in only(decisions, Pending)
        if isinstance(b, Pending)
    }
    assert messages["ns/bad"] == ("Invalid", "volcano.sh/card.request: not JSON")
    assert messages["ns/lost"] == ("QueueNotFound", "queue nope does not exist")
    assert messages["ns/none"] == ("QueueNotFound", "the workload names no queue")
    assert messages["ns/in-broken"] == (
        "Invalid",
        "queue broken is invalid: spec.capability.cpu: 'x' is not a quantity",
    )
    assert messages["ns/level"][0] == "Invalid"
    assert "no/such-level" in messages["ns/level"][1]
    assert messages["ns/neg"] == ("Invalid", "podsets[w].count: -1 is negative")
    assert [b.workload for b in only(decisions, Admitted) if isinstance(b, Admitted)] == ["ns/ok"]


def test_a_queue_with_a_negative_quota_is_invalid() -> None:
    admission = cluster(*two_racks(), queues=[QueueConfig(name="q", quota={"cpu": -5})])
    admission.set_workload(msg.workload("a", msg.podset()))
    (decision,) = admission.cycle(now=1.0)
    assert isinstance(decision.body, Pending)
    assert (decision.body.reason, decision.body.message) == (
        "Invalid",
        "queue q is invalid: quota.cpu: -5 is negative",
    )


def test_a_default_queue_takes_workloads_that_name_none() -> None:
    admission = cluster(*two_racks(), settings=AdmissionSettings(default_queue="q"))
    admission.set_workload(msg.workload("a", msg.podset(), queue=None))
    assert isinstance(admission.cycle(now=1.0)[0].body, Admitted)


def test_pending_is_republished_only_when_the_reason_changes() -> None:
    admission = cluster(
        msg.capacity_node("n1", "b1", "r1", gpus=8),
        queues=[QueueConfig(name="q", quota={"cpu": 10**6, GPU: 8})],
    )
    admission.set_workload(msg.workload("a", msg.podset(count=1, gpus=8), created_at=1))
    admission.set_workload(msg.workload("b", msg.podset(count=1, gpus=8), created_at=2))
    first = admission.cycle(now=1.0)
    assert pending_reasons(first) == {"ns/b": "ExceedsQuota"}
    admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=8, applied=0))
    assert admission.cycle(now=2.0) == []
    admission.set_queue(QueueConfig(name="q", quota={"cpu": 10**6, GPU: 16}))
    assert pending_reasons(admission.cycle(now=3.0)) == {"ns/b": "WaitingForCapacity"}
    assert admission.cycle(now=4.0) == []


def test_a_decision_counts_the_tries_since_the_previous_one() -> None:
    """Cycles that find the reason unchanged publish nothing; the next decision counts them."""
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=0))
    admission.set_workload(msg.workload("a", msg.podset(count=1, gpus=8)))
    [waiting] = admission.cycle(now=1.0)
    assert isinstance(waiting.body, Pending)
    assert waiting.tries == 1
    for free in (2, 4, 6):  # capacity changes, still not enough: tried again, nothing said
        admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=free))
        assert admission.cycle(now=2.0) == []
    assert admission.cycle(now=3.0) == []  # nothing changed: not even tried
    admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=8))
    [admitted] = admission.cycle(now=4.0)
    assert isinstance(admitted.body, Admitted)
    assert admitted.tries == 4


def test_strict_fifo_head_blocks_its_queue_best_effort_lets_later_ones_go() -> None:
    for strategy, admitted in (("StrictFIFO", []), ("BestEffortFIFO", ["ns/small"])):
        queue = QueueConfig(name="q", strategy=strategy)  # type: ignore[arg-type]
        admission = cluster(
            msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=4), queues=[queue]
        )
        admission.set_workload(msg.workload("big", msg.podset(count=1, gpus=8), created_at=1))
        admission.set_workload(msg.workload("small", msg.podset(count=1, gpus=4), created_at=2))
        decisions = admission.cycle(now=1.0)
        assert [
            b.workload for b in only(decisions, Admitted) if isinstance(b, Admitted)
        ] == admitted
        if strategy == "StrictFIFO":
            (blocked,) = [
                b
                for b in only(decisions, Pending)
                if isinstance(b, Pending) and b.workload == "ns/small"
            ]
            assert blocked.message == "queue q is StrictFIFO and waits for ns/big"


def test_strict_fifo_is_not_blocked_by_an_invalid_head() -> None:
    admission = cluster(*two_racks(), queues=[QueueConfig(name="q", strategy="StrictFIFO")])
    admission.set_workload(
        msg.workload("bad", msg.podset(count=1, gpus=1), created_at=1, invalid_reason="broken")
    )
    admission.set_workload(msg.workload("good", msg.podset(count=1, gpus=1), created_at=2))
    assert [
        b.workload for b in only(admission.cycle(now=1.0), Admitted) if isinstance(b, Admitted)
    ] == ["ns/good"]


def test_higher_priority_queue_and_workload_go_first() -> None:
    queues = [
        QueueConfig(name="offline", priority=20000),
        QueueConfig(name="online", priority=80000),
    ]
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8), queues=queues)
    admission.set_workload(
        msg.workload("old-offline", msg.podset(count=1, gpus=8), queue="offline", created_at=0)
    )
    admission.set_workload(
        msg.workload("low", msg.podset(count=1, gpus=8), queue="online", created_at=1, priority=1)
    )
    admission.set_workload(
        msg.workload("high", msg.podset(count=1, gpus=8), queue="online", created_at=2, priority=9)
    )
    decisions = admission.cycle(now=1.0)
    assert [b.workload for b in only(decisions, Admitted) if isinstance(b, Admitted)] == ["ns/high"]


def test_inference_asks_for_preemption_once_and_again_after_the_timeout() -> None:
    admission = cluster(
        msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=0),
        settings=AdmissionSettings(preemption_timeout_seconds=10),
    )
    admission.set_workload(
        msg.workload("serve", msg.podset(count=1, gpus=8), service_type="inference")
    )
    admission.set_workload(msg.workload("train", msg.podset(count=1, gpus=8), created_at=1))
    decisions = admission.cycle(now=1.0)
    (request,) = only(decisions, PreemptRequested)
    assert isinstance(request, PreemptRequested)
    assert request.workload == "ns/serve"
    assert request.queue == "q"
    assert "workers" in request.message
    assert pending_reasons(decisions) == {
        "ns/serve": "WaitingForPreemption",
        "ns/train": "WaitingForCapacity",
    }
    assert admission.cycle(now=5.0) == []
    again = admission.cycle(now=12.0)
    assert [type(b).__name__ for b in bodies(again)] == ["PreemptRequested"]


def test_a_training_gang_never_asks_for_preemption_nor_does_a_quota_shortage() -> None:
    queue = QueueConfig(name="q", quota={"cpu": 10**6, GPU: 4})
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=0), queues=[queue])
    admission.set_workload(
        msg.workload("serve", msg.podset(count=1, gpus=8), service_type="inference")
    )
    assert only(admission.cycle(now=1.0), PreemptRequested) == []


def preempt_scene() -> tuple[Admission, WorkloadState]:
    """A victim admitted on n1 (8 GPUs), a preemptor of 8 GPUs waiting for it."""
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8))
    victim = msg.workload("victim", msg.podset(count=1, gpus=8), created_at=0)
    admission.set_workload(victim)
    (admitted,) = admission.cycle(now=1.0)
    assert isinstance(admitted.body, Admitted)
    # The cache applies the admission: n1 is full.
    admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=0, applied=1))
    serve = msg.workload(
        "serve", msg.podset(count=1, gpus=8), service_type="inference", created_at=5
    )
    admission.set_workload(serve)
    assert len(only(admission.cycle(now=2.0), PreemptRequested)) == 1
    return admission, serve


def test_preempted_victims_release_quota_and_the_room_is_held_for_the_preemptor() -> None:
    admission, _ = preempt_scene()
    event = Preempted(
        preemptor="ns/serve",
        preemptor_uid="uid-serve",
        victims=["ns/victim"],
        mode={"ns/victim": "restart"},
        nominated={"n1": {GPU: 8, "cpu": 1000, "pods": 1}},
    )
    released = admission.preempted(event, now=3.0)
    (body,) = bodies(released)
    assert isinstance(body, Released)
    assert (body.workload, body.reason) == ("ns/victim", "Evicted")
    assert admission.quota.usage("q").resources == {}
    # The victim's pods are gone: the cache reports n1 free again.
    admission.capacity.update(
        msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=8, applied=body.sequence)
    )
    # A newcomer of higher priority must not take the nominated room; the preemptor does.
    admission.set_workload(
        msg.workload("sneaky", msg.podset(count=1, gpus=8), created_at=0, priority=100)
    )
    decisions = admission.cycle(now=4.0)
    admitted = [b for b in only(decisions, Admitted) if isinstance(b, Admitted)]
    assert [(a.workload, a.nominated_by) for a in admitted] == [("ns/serve", "ns/serve")]
    assert admission.nominations() == {}
    # The restarted victim waits again, as does the newcomer.
    assert pending_reasons(decisions) == {
        "ns/sneaky": "WaitingForCapacity",
        "ns/victim": "WaitingForCapacity",
    }


def test_aborted_victims_are_not_admitted_again() -> None:
    admission, _ = preempt_scene()
    admission.preempted(
        Preempted(
            preemptor="ns/serve",
            preemptor_uid="uid-serve",
            victims=["ns/victim"],
            mode={"ns/victim": "abort"},
        ),
        now=3.0,
    )
    admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=16, applied=10))
    decisions = admission.cycle(now=4.0)
    assert "ns/victim" not in {d.key for d in decisions}


def test_a_nomination_lapses_after_its_timeout() -> None:
    admission, _ = preempt_scene()
    admission.settings = AdmissionSettings(nomination_timeout_seconds=5)
    admission.preempted(
        Preempted(
            preemptor="ns/serve", preemptor_uid="uid-serve", victims=[], nominated={"n1": {GPU: 8}}
        ),
        now=3.0,
    )
    assert list(admission.nominations()) == ["ns/serve"]
    admission.cycle(now=9.0)
    assert admission.nominations() == {}


def test_overlay_keeps_room_taken_until_the_view_reports_the_decision() -> None:
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8))
    admission.set_workload(msg.workload("a", msg.podset(count=1, gpus=8)))
    (decision,) = admission.cycle(now=1.0)
    assert isinstance(decision.body, Admitted)
    sequence = decision.body.sequence
    # A report made before the decision was applied still shows n1 empty: the overlay holds.
    admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, applied=sequence - 1))
    admission.set_workload(msg.workload("b", msg.podset(count=1, gpus=8)))
    assert pending_reasons(admission.cycle(now=2.0)) == {"ns/b": "WaitingForCapacity"}
    # The report that applied it shows n1 full; the overlay entry is dropped, nothing doubles.
    admission.capacity.update(
        msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=0, applied=sequence)
    )
    assert len(admission.capacity.overlay) == 0
    view = admission.capacity.view("default")
    assert view is not None
    assert view.free("n1")[GPU] == 0


def test_deletion_releases_quota_and_lets_the_next_one_in() -> None:
    queue = QueueConfig(name="q", quota={"cpu": 10**6, GPU: 8})
    admission = cluster(*two_racks(), queues=[queue])
    admission.set_workload(msg.workload("a", msg.podset(count=1, gpus=8), created_at=1))
    admission.set_workload(msg.workload("b", msg.podset(count=1, gpus=8), created_at=2))
    admission.cycle(now=1.0)
    (released,) = admission.remove_workload(WorkloadKey("ns/a"))
    assert isinstance(released.body, Released)
    assert released.body.reason == "Deleted"
    assert [
        b.workload for b in only(admission.cycle(now=2.0), Admitted) if isinstance(b, Admitted)
    ] == ["ns/b"]
    assert admission.remove_workload(WorkloadKey("ns/nothing")) == []


def test_a_successor_restored_from_the_ledger_admits_nothing_twice() -> None:
    first = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8))
    gang = msg.workload("a", msg.podset(count=1, gpus=8))
    first.set_workload(gang)
    (decision,) = first.cycle(now=1.0)
    assert isinstance(decision.body, Admitted)

    second = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8))
    second.restore(decision.body, decision.node_usage, now=2.0)
    second.set_workload(gang)
    second.set_workload(msg.workload("b", msg.podset(count=1, gpus=8)))
    decisions = second.cycle(now=3.0)
    assert only(decisions, Admitted) == []
    assert pending_reasons(decisions) == {"ns/b": "WaitingForCapacity"}
    assert second.sequence > decision.body.sequence
    assert second.quota.usage("q").resources == {"cpu": 1000, GPU: 8}


def test_a_new_object_under_an_admitted_name_releases_the_old_one() -> None:
    admission = cluster(*two_racks())
    admission.set_workload(msg.workload("a", msg.podset()))
    admission.cycle(now=1.0)
    recreated = WorkloadState(
        namespace="ns",
        name="a",
        uid="other",
        owner_kind="Job",
        queue="q",
        podsets=[msg.podset(count=1, gpus=1)],
    )
    (released,) = admission.set_workload(recreated)
    assert isinstance(released.body, Released)
    assert released.body.uid == "uid-a"
    (admitted,) = admission.cycle(now=2.0)
    assert isinstance(admitted.body, Admitted)
    assert admitted.body.uid == "other"


def test_topology_choice_queue_then_workload_then_only_or_default() -> None:
    admission = cluster(
        *two_racks(), queues=[QueueConfig(name="q", topology="default"), QueueConfig(name="free")]
    )
    admission.set_workload(msg.workload("conflict", msg.podset(), topology="other"))
    admission.set_workload(msg.workload("missing", msg.podset(), queue="free", topology="other"))
    decisions = admission.cycle(now=1.0)
    messages = {
        b.workload: (b.reason, b.message)
        for b in only(decisions, Pending)
        if isinstance(b, Pending)
    }
    assert messages["ns/conflict"] == (
        "Invalid",
        "the workload asks for topology other but queue q places on topology default",
    )
    assert messages["ns/missing"] == ("TopologyPlacementFailed", "topology other does not exist")

    admission.capacity.set_topology(TopologyConfig(name="second", levels=[BLOCK, HOST]))
    admission.capacity.set_topology(msg.topology())
    admission.set_workload(msg.workload("pick", msg.podset(), queue="free"))
    (picked,) = only(admission.cycle(now=2.0), Admitted)
    assert isinstance(picked, Admitted)
    assert picked.assignments["workers"].levels == [BLOCK, RACK, HOST]


def test_no_topology_to_choose_from() -> None:
    admission = Admission()
    admission.set_queue(QueueConfig(name="q"))
    admission.capacity.set_topology(TopologyConfig(name="a", levels=[HOST]))
    admission.capacity.set_topology(TopologyConfig(name="b", levels=[HOST]))
    admission.set_workload(msg.workload("w", msg.podset()))
    (decision,) = admission.cycle(now=1.0)
    assert isinstance(decision.body, Pending)
    assert decision.body.reason == "TopologyPlacementFailed"
    assert "(a, b)" in decision.body.message


def test_a_waiting_workload_is_retried_only_when_room_may_have_grown() -> None:
    admission = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=0))
    admission.set_workload(msg.workload("a", msg.podset(count=1, gpus=8)))
    assert pending_reasons(admission.cycle(now=1.0)) == {"ns/a": "WaitingForCapacity"}
    admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=0))
    assert admission.cycle(now=2.0) == []
    admission.capacity.update(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=8))
    assert isinstance(admission.cycle(now=3.0)[0].body, Admitted)


def test_release_by_another_service_checks_uid_and_sequence_and_finishes_completed_ones() -> None:
    admission = cluster(*two_racks())
    admission.set_workload(msg.workload("a", msg.podset()))
    (admitted,) = admission.cycle(now=1.0)
    assert isinstance(admitted.body, Admitted)
    key = WorkloadKey("ns/a")
    assert admission.release_if(key, uid="other", before=0, reason="Completed") is None
    assert admission.release_if(key, uid="uid-a", before=1, reason="Completed") is None
    released = admission.release_if(key, uid="uid-a", before=0, reason="Completed")
    assert released is not None
    assert isinstance(released.body, Released)
    assert released.body.reason == "Completed"
    assert admission.cycle(now=2.0) == []  # finished: not admitted again
    recreated = WorkloadState(
        namespace="ns",
        name="a",
        uid="new",
        owner_kind="Job",
        queue="q",
        podsets=[msg.podset(count=1, gpus=1)],
    )
    admission.set_workload(recreated)
    (again,) = admission.cycle(now=3.0)
    assert isinstance(again.body, Admitted)
    assert again.body.uid == "new"


def test_a_repeated_preempted_leaves_the_victims_later_admission_alone() -> None:
    """A redelivered ``preempted`` (after a leader change, or the double store preemption
    admits) names the admission the victim loses: one naming the victim only by key would
    release its re-admission."""
    admission, _ = preempt_scene()
    first = admission.admitted()[WorkloadKey("ns/victim")]
    event = Preempted(
        preemptor="ns/serve",
        preemptor_uid="uid-serve",
        victims=["ns/victim"],
        mode={"ns/victim": "restart"},
        lost={"ns/victim": LostAdmission(uid=first.uid, sequence=first.sequence)},
        nominated={"n1": {GPU: 8, "cpu": 1000, "pods": 1}},
    )
    (released,) = bodies(admission.preempted(event, now=3.0))
    assert isinstance(released, Released)
    # The preemptor is deleted; the victim, re-queued (restart), is admitted again.
    admission.remove_workload(WorkloadKey("ns/serve"))
    admission.capacity.update(
        msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=8, applied=released.sequence)
    )
    again = [b for b in bodies(admission.cycle(now=4.0)) if isinstance(b, Admitted)]
    assert [a.workload for a in again] == ["ns/victim"]
    # The same decision once more: it names the admission that already ended.
    assert admission.preempted(event, now=5.0) == []
    assert admission.is_admitted(WorkloadKey("ns/victim"))
    assert admission.quota.usage("q").resources != {}


def test_an_aborted_victim_is_kept_out_by_a_successor_that_restores_it() -> None:
    """The fact that a victim was aborted must outlive the leader's memory: the policy
    reports it (:meth:`Admission.stopped`) for the service to persist, and a successor
    restores it."""
    admission, _ = preempt_scene()
    admission.preempted(
        Preempted(
            preemptor="ns/serve",
            preemptor_uid="uid-serve",
            victims=["ns/victim"],
            mode={"ns/victim": "abort"},
        ),
        now=3.0,
    )
    assert admission.stopped() == {"ns/victim": "uid-victim"}
    successor = cluster(msg.capacity_node("n1", "b1", "r1", gpus=8, free_gpus=16, applied=10))
    victim = admission.workload(WorkloadKey("ns/victim"))
    assert victim is not None
    successor.set_workload(victim)
    assert successor.restore_stopped(WorkloadKey("ns/victim"), "uid-victim")
    assert not successor.restore_stopped(WorkloadKey("ns/victim-gone"), "u")
    assert "ns/victim" not in {d.key for d in successor.cycle(now=4.0)}
    # Re-created (another uid): admitted again, and no longer kept out.
    successor.set_workload(msgspec.structs.replace(victim, uid="uid-victim-2"))
    assert successor.stopped() == {}
    assert "ns/victim" in {d.key for d in successor.cycle(now=5.0) if isinstance(d.body, Admitted)}
