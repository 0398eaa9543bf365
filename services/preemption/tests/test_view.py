"""The preemption view: running gangs from admissions and pods, capacity with the overlay and
preemptions in flight, and the victim search run on it. Pure: no NATS, no Kubernetes."""

from collections.abc import Mapping

import msgspec

from tidegate.model import (
    Admitted,
    CapacityNode,
    DomainCount,
    LostAdmission,
    PodState,
    Preempted,
    QueueConfig,
    Released,
    Tombstone,
    TopologyAssignment,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model.ledger import (
    PREEMPTION_PREFIX,
    PodRef,
    PreemptionRecord,
    VictimRecord,
    decode_preemption,
    encode_record,
    preemption_key,
    preemptor_of,
)
from tidegate.model.names import ADMISSION_GATE
from tidegate.policy.candidates import evictable_pods, in_flight_view, victim_record
from tidegate.policy.victims import preempted_decision
from tidegate.preemption.view import PreemptionView, Unanswerable

LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
GPU = "nvidia.com/gpu"
NOW = 10_000.0


def cluster(nodes: int = 4, *, racks: int = 2) -> PreemptionView:
    """A view of ``nodes`` 8-GPU nodes in ``racks`` racks, everything free."""
    view = PreemptionView()
    view.set_topology(TopologyConfig(name="default", levels=LEVELS))
    per_rack = nodes // racks
    for i in range(nodes):
        capacity(view, f"n{i}", rack=f"r{i // per_rack}", free_gpus=8)
    view.set_queue(QueueConfig(name="online", priority=100))
    view.set_queue(QueueConfig(name="offline", priority=10))
    return view


def capacity(view: PreemptionView, node: str, *, rack: str, free_gpus: int, seq: int = 0) -> None:
    """Report a node's free capacity as the topology-cache would."""
    allocatable = {"cpu": 64_000, GPU: 8, "pods": 110}
    used_pods = 8 - free_gpus
    view.update_capacity(
        CapacityNode(
            topology="default",
            node=node,
            domain=["b0", rack, node],
            allocatable=allocatable,
            free={"cpu": 64_000, GPU: free_gpus, "pods": 110 - used_pods},
            applied_sequence=seq,
        )
    )


def workload(
    name: str,
    *,
    service_type: str,
    priority: int,
    pods: int,
    gpus: int = 1,
    queue: str = "offline",
    required: str | None = None,
    on_preemption: str = "restart",
    uid: str | None = None,
) -> WorkloadState:
    """A one-podset workload of ``pods`` pods with ``gpus`` GPUs each."""
    return msgspec.convert(
        {
            "kind": "workload",
            "namespace": "team",
            "name": name,
            "uid": uid or f"uid-{name}",
            "owner_kind": "Job" if service_type == "training" else "Deployment",
            "queue": queue,
            "priority": priority,
            "service_type": service_type,
            "on_preemption": on_preemption,
            "podsets": [
                {
                    "name": "main",
                    "count": pods,
                    "requests": {GPU: gpus},
                    "topology": {"required": required} if required else {},
                }
            ],
        },
        WorkloadState,
    )


def run(
    view: PreemptionView,
    gang: WorkloadState,
    nodes: list[str],
    *,
    seq: int,
    queue: str | None = None,
) -> None:
    """Admit ``gang`` (into ``queue``, default its own) and bind one pod per entry of ``nodes``."""
    view.replica.apply(gang)
    gpus = gang.podsets[0].requests[GPU]
    view.admitted(
        Admitted(
            workload=f"team/{gang.name}",
            uid=gang.uid,
            queue=queue or gang.queue or "",
            sequence=seq,
            epoch=1,
            assignments={},
            charged={GPU: gpus * len(nodes)},
        ),
        at=NOW - 600,
    )
    for i, node in enumerate(nodes):
        view.replica.apply(pod(gang, i, node=node, gpus=gpus))


def pod(
    gang: WorkloadState,
    index: int,
    *,
    node: str | None,
    gpus: int = 1,
    gated: bool = False,
    terminating: bool = False,
    phase: str = "Running",
    created_at: float = NOW - 600,
) -> PodState:
    """A pod of ``gang``."""
    return PodState(
        namespace="team",
        name=f"{gang.name}-{index}",
        uid=f"{gang.uid}-pod-{index}",
        node_name=node,
        phase=phase,
        requests={GPU: gpus},
        scheduling_gates=[ADMISSION_GATE] if gated else [],
        workload=f"team/{gang.name}",
        podset="main",
        terminating=terminating,
        created_at=created_at,
    )


def fill(view: PreemptionView, node: str, rack: str) -> None:
    capacity(view, node, rack=rack, free_gpus=0)


# --------------------------------------------------------------------------- running gangs


def test_only_admitted_gangs_with_bound_pods_are_running() -> None:
    view = cluster()
    train = workload("train", service_type="training", priority=10, pods=2)
    run(view, train, ["n0", "n1"], seq=1)
    waiting = workload("waiting", service_type="training", priority=10, pods=2)
    view.replica.apply(waiting)
    view.replica.apply(pod(waiting, 0, node="n2"))  # bound, but never admitted
    admitted_unbound = workload("unbound", service_type="training", priority=10, pods=1)
    run(view, admitted_unbound, [], seq=2)
    view.replica.apply(pod(admitted_unbound, 0, node=None, gated=True))

    running = view.running(now=NOW)
    assert [gang.key for gang in running] == ["team/train"]
    assert running[0].running_seconds == 600
    assert sorted(p.node for p in running[0].pods) == ["n0", "n1"]


def test_terminating_and_finished_pods_hold_nothing() -> None:
    view = cluster()
    train = workload("train", service_type="training", priority=10, pods=3)
    run(view, train, [], seq=1)
    view.replica.apply(pod(train, 0, node="n0"))
    view.replica.apply(pod(train, 1, node="n1", terminating=True))
    view.replica.apply(pod(train, 2, node="n2", phase="Succeeded"))
    (gang,) = view.running(now=NOW)
    assert [p.node for p in gang.pods] == ["n0"]


def test_a_release_ends_the_admission_and_an_older_admission_does_not_revive_it() -> None:
    view = cluster()
    train = workload("train", service_type="training", priority=10, pods=1)
    run(view, train, ["n0"], seq=5)
    view.replica.apply(
        Released(
            workload="team/train", uid=train.uid, queue="offline", reason="Evicted", sequence=7
        )
    )
    assert not view.is_admitted(train_key("train"), train.uid)
    stale = Admitted(
        workload="team/train", uid=train.uid, queue="offline", sequence=5, epoch=1, assignments={}
    )
    view.admitted(stale, at=None)  # e.g. read from admission's ledger at takeover
    assert view.running(now=NOW) == []
    newer = msgspec.structs.replace(stale, sequence=9)
    view.admitted(newer, at=None)
    assert view.is_admitted(train_key("train"), train.uid)


def test_a_release_of_another_uid_or_an_older_sequence_changes_nothing() -> None:
    view = cluster()
    train = workload("train", service_type="training", priority=10, pods=1)
    run(view, train, ["n0"], seq=5)
    view.replica.apply(
        Released(workload="team/train", uid="other", queue=None, reason="Deleted", sequence=9)
    )
    view.replica.apply(
        Released(workload="team/train", uid=train.uid, queue=None, reason="Deleted", sequence=4)
    )
    assert [g.key for g in view.running(now=NOW)] == ["team/train"]
    view.replica.apply(Released(workload="team/train", uid=train.uid, queue=None, reason="Deleted"))
    assert view.running(now=NOW) == []


def test_a_recreated_workload_is_not_admitted_under_its_predecessors_admission() -> None:
    view = cluster()
    train = workload("train", service_type="training", priority=10, pods=1)
    run(view, train, ["n0"], seq=5)
    view.replica.apply(msgspec.structs.replace(train, uid="uid-new"))
    assert view.running(now=NOW) == []


def test_queue_usage_is_what_admission_charged() -> None:
    view = cluster()
    run(
        view,
        workload("a", service_type="training", priority=10, pods=2, gpus=2),
        ["n0", "n1"],
        seq=1,
    )
    run(view, workload("b", service_type="training", priority=10, pods=1, gpus=3), ["n2"], seq=2)
    assert view.replica.usage("offline")[0] == {GPU: 7}
    assert view.replica.usage("online")[0] == {}


# --------------------------------------------------------------------------- evictable pods


def test_evictable_pods_skip_gated_terminating_finished_and_later_pods() -> None:
    view = cluster()
    train = workload("train", service_type="training", priority=10, pods=6)
    view.replica.apply(train)
    view.replica.apply(pod(train, 0, node="n0"))
    view.replica.apply(pod(train, 1, node=None))  # released by the gate, not bound yet
    view.replica.apply(pod(train, 2, node=None, gated=True))
    view.replica.apply(pod(train, 3, node="n1", terminating=True))
    view.replica.apply(pod(train, 4, node="n1", phase="Failed"))
    view.replica.apply(pod(train, 5, node="n2", created_at=NOW + 5))
    names = [p.name for p in evictable_pods(view.replica, train_key("train"))]
    assert names == ["train-0", "train-1", "train-5"]
    earlier = [p.name for p in evictable_pods(view.replica, train_key("train"), created_before=NOW)]
    assert earlier == ["train-0", "train-1"]


def train_key(name: str) -> WorkloadKey:
    """The key of workload ``name`` in namespace team."""
    return workload_key("team", name)


def test_pods_follow_their_workload_and_leave_on_deletion() -> None:
    view = cluster()
    train = workload("train", service_type="training", priority=10, pods=1)
    view.replica.apply(train)
    view.replica.apply(pod(train, 0, node="n0"))
    view.replica.apply(Tombstone(object_kind="pod", namespace="team", name="train-0"))
    assert view.replica.members(train_key("train")) == []
    view.replica.apply(pod(train, 0, node="n0"))
    view.replica.apply(msgspec.structs.replace(pod(train, 0, node="n0"), workload=None))
    assert view.replica.members(train_key("train")) == []


# --------------------------------------------------------------------------- the search


def full_cluster() -> tuple[PreemptionView, WorkloadState]:
    """Four full nodes: a priority-10 gang on n0-n1 and a priority-20 gang on n2-n3 (8 GPUs
    per pod), and an inference workload of priority 50 needing two whole nodes."""
    view = cluster()
    for node, rack in (("n0", "r0"), ("n1", "r0"), ("n2", "r1"), ("n3", "r1")):
        fill(view, node, rack)
    run(
        view,
        workload("low", service_type="training", priority=10, pods=2, gpus=8),
        ["n0", "n1"],
        seq=1,
    )
    run(
        view,
        workload("mid", service_type="training", priority=20, pods=2, gpus=8),
        ["n2", "n3"],
        seq=2,
    )
    serve = workload("serve", service_type="inference", priority=50, pods=2, gpus=8, queue="online")
    view.replica.apply(serve)
    return view, serve


def test_the_search_takes_the_lowest_priority_gang_whole() -> None:
    view, serve = full_cluster()
    choice = view.choose(serve, in_flight=[], now=NOW)
    assert not isinstance(choice, Unanswerable)
    assert choice.outcome == "preempts"
    assert choice.victims == ("team/low",)
    assert choice.modes == {"team/low": "restart"}
    assert sorted(choice.nominated) == ["n0", "n1"]
    # The decision names the admission the victim loses.
    decision = preempted_decision(serve, choice)
    assert decision.lost == {"team/low": LostAdmission(uid="uid-low", sequence=1, origin=1)}


def test_victims_in_flight_are_not_candidates_and_count_as_gone() -> None:
    view, serve = full_cluster()
    other = workload("other", service_type="inference", priority=50, pods=2, gpus=8, queue="online")
    view.replica.apply(other)
    first = view.choose(other, in_flight=[], now=NOW)
    assert not isinstance(first, Unanswerable)
    assert first.victims == ("team/low",)
    record = make_record(
        view, other, first.victims, nominated={str(n): a for n, a in first.nominated.items()}
    )

    # "other" holds the room of "low"'s nodes: "serve" must take "mid", never "low" again.
    second = view.choose(serve, in_flight=[record], now=NOW)
    assert not isinstance(second, Unanswerable)
    assert second.victims == ("team/mid",)

    # Its own record: its victims count as gone and its nomination is not held against it.
    again = view.choose(other, in_flight=[record], now=NOW)
    assert not isinstance(again, Unanswerable)
    assert again.outcome == "fits"


def test_a_nomination_stops_counting_once_its_preemptor_is_admitted() -> None:
    view, _serve = full_cluster()
    other = workload("other", service_type="inference", priority=50, pods=2, gpus=8, queue="online")
    view.replica.apply(other)
    record = make_record(
        view, other, ("team/low",), nominated={"n0": {GPU: 8, "pods": 1}, "n1": {GPU: 8, "pods": 1}}
    )
    base = view.capacity.view("default")
    assert base is not None
    held = in_flight_view(base, [record], view.replica, preemptor="team/serve")
    assert held.free("n0")[GPU] == 0  # low's pod gone, other's nomination taken
    view.admitted(
        Admitted(
            workload="team/other",
            uid=other.uid,
            queue="online",
            sequence=9,
            epoch=1,
            assignments={},
        ),
        at=NOW,
    )
    released = in_flight_view(base, [record], view.replica, preemptor="team/serve")
    assert released.free("n0")[GPU] == 8  # admitted: its pods are reserved by the cache


def test_training_never_preempts_and_inference_is_never_a_victim() -> None:
    view = cluster(nodes=2, racks=1)
    fill(view, "n0", "r0")
    fill(view, "n1", "r0")
    run(
        view,
        workload("serve", service_type="inference", priority=10, pods=2, gpus=8, queue="online"),
        ["n0", "n1"],
        seq=1,
    )
    train = workload("train", service_type="training", priority=90, pods=1, gpus=8)
    view.replica.apply(train)
    answer = view.choose(train, in_flight=[], now=NOW)
    assert not isinstance(answer, Unanswerable)
    assert answer.outcome == "not-a-reclaimer"
    assert answer.victims == ()

    urgent = workload(
        "urgent", service_type="inference", priority=90, pods=1, gpus=8, queue="online"
    )
    view.replica.apply(urgent)
    answer = view.choose(urgent, in_flight=[], now=NOW)
    assert not isinstance(answer, Unanswerable)
    assert answer.outcome == "no-victims"
    assert "inference workloads are never preempted" in answer.ineligible[train_key("serve")]


def test_an_admission_the_cache_has_not_applied_is_counted_on_its_node() -> None:
    view = cluster()
    gang = workload("new", service_type="training", priority=10, pods=2, gpus=4)
    view.replica.apply(gang)
    view.admitted(
        Admitted(
            workload="team/new",
            uid=gang.uid,
            queue="offline",
            sequence=3,
            epoch=1,
            assignments={
                "main": TopologyAssignment(
                    levels=LEVELS, domains=[DomainCount(values=["b0", "r0", "n0"], count=2)]
                )
            },
            requests={"main": {GPU: 4}},
        ),
        at=NOW,
    )

    def free_gpus() -> int:
        base = view.capacity.view("default")
        assert base is not None
        return base.free("n0")[GPU]

    assert free_gpus() == 0
    capacity(view, "n0", rack="r0", free_gpus=0, seq=3)  # the cache applied it
    assert free_gpus() == 0  # now counted once, by the cache
    capacity(view, "n0", rack="r0", free_gpus=8, seq=3)
    assert free_gpus() == 8


def test_topology_choice_follows_admission() -> None:
    view = cluster()
    serve = workload("serve", service_type="inference", priority=50, pods=1, queue="online")
    assert view.topology_for(serve) == "default"
    view.set_queue(QueueConfig(name="online", topology="gpu"))
    assert isinstance(view.topology_for(serve), Unanswerable)
    view.set_topology(TopologyConfig(name="gpu", levels=LEVELS))
    assert view.topology_for(serve) == "gpu"
    mismatch = msgspec.structs.replace(serve, topology="default")
    assert "places on topology gpu" in str(view.topology_for(mismatch))


def test_a_required_rack_needs_room_inside_one_rack() -> None:
    view = cluster()
    for node, rack in (("n0", "r0"), ("n1", "r0"), ("n2", "r1"), ("n3", "r1")):
        fill(view, node, rack)
    low = workload("low", service_type="training", priority=10, pods=2, gpus=8)
    run(view, low, ["n0", "n2"], seq=1)
    run(
        view, workload("mid-a", service_type="training", priority=20, pods=1, gpus=8), ["n1"], seq=2
    )
    run(
        view, workload("mid-b", service_type="training", priority=20, pods=1, gpus=8), ["n3"], seq=3
    )
    anywhere = workload(
        "serve", service_type="inference", priority=50, pods=2, gpus=8, queue="online"
    )
    view.replica.apply(anywhere)
    choice = view.choose(anywhere, in_flight=[], now=NOW)
    assert not isinstance(choice, Unanswerable)
    assert choice.victims == ("team/low",)

    one_rack = workload(
        "serve",
        service_type="inference",
        priority=50,
        pods=2,
        gpus=8,
        queue="online",
        required="example.com/rack",
    )
    view.replica.apply(one_rack)
    choice = view.choose(one_rack, in_flight=[], now=NOW)
    assert not isinstance(choice, Unanswerable)
    assert choice.victims == ("team/low", "team/mid-a")
    assert sorted(choice.nominated) == ["n0", "n1"]


# --------------------------------------------------------------------------- the record


def make_record(
    view: PreemptionView,
    preemptor: WorkloadState,
    victims: tuple[str, ...],
    *,
    nominated: Mapping[str, Mapping[str, int]],
) -> PreemptionRecord:
    records = []
    for victim in victims:
        made = victim_record(view.replica, train_key(victim.split("/")[1]), mode="restart")
        assert made is not None
        records.append(made)
    return PreemptionRecord(
        preemptor=f"team/{preemptor.name}",
        preemptor_uid=preemptor.uid,
        request_sequence=1,
        decision=Preempted(
            preemptor=f"team/{preemptor.name}",
            preemptor_uid=preemptor.uid,
            victims=list(victims),
            nominated={node: dict(amount) for node, amount in nominated.items()},
        ),
        victims=records,
        recorded_at=NOW,
        event_id="e",
    )


def test_records_round_trip_and_keys_never_collide_with_workload_keys() -> None:
    record = PreemptionRecord(
        preemptor="team/serve",
        preemptor_uid="u",
        request_sequence=4,
        decision=Preempted(preemptor="team/serve", preemptor_uid="u", victims=["team/low"]),
        victims=[
            VictimRecord(
                key="team/low",
                uid="v",
                mode="abort",
                owner_kind="Job",
                pods=[PodRef(namespace="team", name="low-0", uid="p", node="n0")],
            )
        ],
        recorded_at=NOW,
        event_id="preemption-u-4",
    )
    assert decode_preemption(encode_record(record)) == record
    assert not record.published
    assert preemption_key("team/serve") == PREEMPTION_PREFIX + "team/serve"
    assert preemptor_of(preemption_key("team/serve")) == "team/serve"
    assert preemptor_of("team/serve") is None
    # admission's keys are "<namespace>/<name>"; a namespace is a DNS label, without dots
    assert "." in preemption_key("team/serve").partition("/")[0]


def test_queue_less_inference_reclaims_from_queue_less_training_in_the_default_queue() -> None:
    """Preemption takes the queues from admission's decisions, so queue-less workloads are
    in admission's default queue for it too: otherwise the request would answer
    queue-not-found and the training gang would be no victim ("queue None does not exist")."""
    view = cluster()
    for node, rack in (("n0", "r0"), ("n1", "r0"), ("n2", "r1"), ("n3", "r1")):
        fill(view, node, rack)
    train = msgspec.structs.replace(
        workload("low", service_type="training", priority=10, pods=4, gpus=8), queue=None
    )
    run(view, train, ["n0", "n1", "n2", "n3"], seq=1, queue="offline")  # the default queue
    serve = msgspec.structs.replace(
        workload("serve", service_type="inference", priority=50, pods=2, gpus=8), queue=None
    )
    view.replica.apply(serve)
    choice = view.choose(serve, in_flight=[], now=NOW, queue="offline", topology="default")
    assert not isinstance(choice, Unanswerable)
    assert choice.outcome == "preempts", choice.reason
    assert choice.victims == ("team/low",)
