"""Reservations and backfill in the admission cycle (docs/reservations.md).

Two racks of two 8-GPU nodes. Gang g1 holds one node of rack r1 for an hour, g2 the whole of
rack r2 for two; a 16-GPU gang that requires a rack then fits nowhere and is reserved r1, whose
room comes back first. Workloads behind it may use r1's free node only when they declare they
are gone before the expected start.
"""

from collections.abc import Iterable, Sequence
from typing import TypeVar

import msgspec
import pytest

from tidegate.model import (
    Admitted,
    Pending,
    Preempted,
    PreemptRequested,
    QueueAging,
    QueueConfig,
    Released,
    ReservationDropped,
    Reserved,
    WorkloadKey,
    WorkloadState,
)
from tidegate.policy.admission import Admission, AdmissionSettings, Decision
from tidegate.policy.reservation import ReservationSettings

from .test_admission import RACK, cluster, msg

HOUR = 3600.0
NODES = {"n1": ("b1", "r1"), "n2": ("b1", "r1"), "n3": ("b1", "r2"), "n4": ("b1", "r2")}


T = TypeVar("T", Admitted, Pending, PreemptRequested, Reserved, ReservationDropped)


def only(decisions: Sequence[Decision], kind: type[T]) -> list[T]:
    return [d.body for d in decisions if isinstance(d.body, kind)]


def K(name: str) -> WorkloadKey:
    return WorkloadKey(f"ns/{name}")


def finish(admission: Admission, name: str, how: str = "Completed") -> list[Decision]:
    workload = admission.workload(K(name))
    assert workload is not None
    return admission.set_workload(msgspec.structs.replace(workload, finished=how))


def report(admission: Admission, used: dict[str, int]) -> None:
    """The topology-cache reports every node with ``used`` GPUs taken, having applied every
    decision so far."""
    for node, (block, rack) in NODES.items():
        admission.capacity.update(
            msg.capacity_node(
                node, block, rack, free_gpus=8 - used.get(node, 0), applied=admission.sequence
            )
        )


def job(
    name: str, pods: int, *, runtime: float | None, created: float, required: str | None = None
) -> WorkloadState:
    return msg.workload(
        name,
        msg.podset(count=pods, gpus=8, required=required),
        max_runtime_seconds=runtime,
        created_at=created,
    )


def nodes_of(admitted: Admitted) -> set[str]:
    return {d.values[-1] for a in admitted.assignments.values() for d in a.domains}


def scene(queues: Iterable[QueueConfig] = (QueueConfig(name="q"),), **settings: int) -> Admission:
    """g1 on n1 (ends at 1 h), g2 on n3 and n4 (ends at 2 h), admitted at time 0."""
    admission = cluster(
        *(msg.capacity_node(n, b, r) for n, (b, r) in NODES.items()),
        queues=queues,
        settings=AdmissionSettings(reservations=ReservationSettings(**settings)),
    )
    admission.set_workload(job("g1", 1, runtime=HOUR, created=0.0))
    admission.set_workload(job("g2", 2, runtime=2 * HOUR, created=0.0, required=RACK))
    admitted = only(admission.cycle(now=0.0), Admitted)
    assert [a.workload for a in admitted] == ["ns/g1", "ns/g2"]
    report(admission, {"n1": 8, "n3": 8, "n4": 8})
    return admission


def big() -> WorkloadState:
    return job("big", 2, runtime=None, created=100.0, required=RACK)


def test_a_big_gang_reserves_a_small_one_backfills_one_without_runtime_waits_and_the_gang_starts() -> (
    None
):
    admission = scene()
    admission.set_workload(big())
    admission.set_workload(job("long", 1, runtime=None, created=150.0))
    admission.set_workload(job("short", 1, runtime=1800.0, created=160.0))
    decisions = admission.cycle(now=200.0)

    # The big gang waits and is reserved rack r1, whose room comes back first (g1 at 1 h).
    (reserved,) = only(decisions, Reserved)
    assert isinstance(reserved, Reserved)
    assert (reserved.workload, reserved.level, reserved.domain) == ("ns/big", RACK, ["b1", "r1"])
    assert reserved.nodes == ["n1", "n2"]
    assert reserved.expected_start == HOUR
    assert [w.workload for w in reserved.waits_for] == ["ns/g1"]
    assert reserved.message.startswith("rack r1 reserved; expected start 01:00 UTC")
    assert admission.reservations() == {"ns/big": reserved}
    pending = {p.workload: p for p in only(decisions, Pending)}
    assert pending["ns/big"].reason == "WaitingForCapacity"

    # One declaring no runtime is kept off r1 (n2 is free) and says why; the short one
    # backfills onto n2: it ends at 200 + 1800 s, before the expected start.
    assert pending["ns/long"].reason == "WaitingForCapacity"
    assert "reserved for ns/big" in pending["ns/long"].message
    assert "declares no runtime" in pending["ns/long"].message
    (short,) = only(decisions, Admitted)
    assert isinstance(short, Admitted)
    assert (short.workload, nodes_of(short)) == ("ns/short", {"n2"})

    # Nothing moved: nothing is published again.
    report(admission, {"n1": 8, "n2": 8, "n3": 8, "n4": 8})
    admission.cycle(now=300.0)  # the gang is tried again (capacity moved)
    held = admission.reservations()[K("big")]
    assert admission.cycle(now=400.0) == []
    assert admission.reservations()[K("big")] == held

    # The short job and g1 end; the big gang starts on r1 and its reservation is dropped.
    finish(admission, "short")
    finish(admission, "g1")
    report(admission, {"n3": 8, "n4": 8})
    decisions = admission.cycle(now=HOUR)
    (started,) = [a for a in only(decisions, Admitted) if a.workload == "ns/big"]
    assert nodes_of(started) == {"n1", "n2"}
    (dropped,) = only(decisions, ReservationDropped)
    assert isinstance(dropped, ReservationDropped)
    assert (dropped.workload, dropped.reason, dropped.reserved_sequence) == (
        "ns/big",
        "Started",
        held.sequence,
    )
    assert admission.reservations() == {}
    # The one without a runtime was never admitted onto the reserved rack meanwhile.
    assert not admission.is_admitted(K("long"))


def test_a_job_ending_exactly_at_the_expected_start_does_not_backfill() -> None:
    admission = scene()
    admission.set_workload(big())
    admission.set_workload(job("edge", 1, runtime=HOUR - 200.0, created=160.0))
    decisions = admission.cycle(now=200.0)
    assert only(decisions, Admitted) == []
    (pending,) = [p for p in only(decisions, Pending) if p.workload == "ns/edge"]
    assert "would end at 01:00 UTC" in pending.message


def test_the_queue_default_runtime_lets_a_job_backfill() -> None:
    admission = scene(queues=[QueueConfig(name="q", default_max_runtime_seconds=600.0)])
    admission.set_workload(big())
    admission.set_workload(job("small", 1, runtime=None, created=160.0))
    decisions = admission.cycle(now=200.0)
    assert [a.workload for a in only(decisions, Admitted)] == ["ns/small"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("deleted", "Deleted"),
        ("finished", "Deleted"),
        ("recreated", "Deleted"),
        ("queue-off", "QueueDisallows"),
        ("queue-gone", "QueueDisallows"),
        ("not-head", "QueueDisallows"),
    ],
)
def test_a_reservation_is_dropped_when_its_gang_or_queue_no_longer_allows_it(
    change: str, reason: str
) -> None:
    admission = scene()
    admission.set_workload(big())
    (reserved,) = only(admission.cycle(now=200.0), Reserved)
    assert isinstance(reserved, Reserved)
    out: list[Decision] = []
    gang = admission.workload(K("big"))
    assert gang is not None
    if change == "deleted":
        out += admission.remove_workload(K("big"))
    elif change == "finished":
        out += finish(admission, "big", "Failed")
    elif change == "recreated":
        out += admission.set_workload(msgspec.structs.replace(gang, uid="other"))
    elif change == "queue-off":
        admission.set_queue(QueueConfig(name="q", max_reservations=0))
    elif change == "queue-gone":
        admission.remove_queue("q")
    else:  # a higher-priority gang is now the queue's head
        vip = job("vip", 2, runtime=None, created=300.0, required=RACK)
        admission.set_workload(msgspec.structs.replace(vip, priority=5))
    out += admission.cycle(now=300.0)
    dropped = [d for d in only(out, ReservationDropped) if d.workload == "ns/big"]
    assert [(d.reason, d.reserved_sequence) for d in dropped] == [(reason, reserved.sequence)]
    if change == "recreated":  # the new object, still the head, is reserved anew
        assert admission.reservations()[K("big")].uid == "other"
    else:
        assert "ns/big" not in admission.reservations()


@pytest.mark.parametrize(
    ("per_queue", "per_cluster", "reserved"),
    [(1, 4, ["ns/a"]), (2, 4, ["ns/a", "ns/b"]), (2, 1, ["ns/a"]), (0, 4, []), (2, 0, [])],
)
def test_limits_per_queue_and_per_cluster_hold_in_the_cycle(
    per_queue: int, per_cluster: int, reserved: list[str]
) -> None:
    admission = scene(
        queues=[QueueConfig(name="q", max_reservations=per_queue)], max_per_cluster=per_cluster
    )
    admission.set_workload(job("a", 2, runtime=None, created=100.0, required=RACK))
    admission.set_workload(job("b", 2, runtime=None, created=110.0, required=RACK))
    decisions = admission.cycle(now=200.0)
    assert [r.workload for r in only(decisions, Reserved)] == reserved
    assert sorted(admission.reservations()) == reserved


def test_two_reservations_never_share_nodes() -> None:
    admission = scene(queues=[QueueConfig(name="q", max_reservations=2)])
    admission.set_workload(job("a", 2, runtime=None, created=100.0, required=RACK))
    admission.set_workload(job("b", 2, runtime=None, created=110.0, required=RACK))
    a, b = only(admission.cycle(now=200.0), Reserved)
    assert (a.domain, b.domain) == (["b1", "r1"], ["b1", "r2"])
    assert (a.expected_start, b.expected_start) == (HOUR, 2 * HOUR)


def test_aging_orders_the_queue_so_an_old_gang_becomes_the_head_that_reserves() -> None:
    aging = QueueAging(step_seconds=60.0, max_boost=3)
    admission = scene(queues=[QueueConfig(name="q", aging=aging)])
    old = job("old", 2, runtime=None, created=0.0, required=RACK)
    admission.set_workload(old)
    admission.set_workload(
        msgspec.structs.replace(
            job("new", 2, runtime=None, created=590.0, required=RACK), priority=2
        )
    )
    # At 600 s the old gang has waited ten steps (boost 3 > 2); the new one none.
    (reserved,) = only(admission.cycle(now=600.0), Reserved)
    assert reserved.workload == "ns/old"


def test_a_successor_takes_over_a_reservation_and_drops_it_once_its_gang_started() -> None:
    admission = scene()
    admission.set_workload(big())
    (reserved,) = only(admission.cycle(now=200.0), Reserved)
    assert isinstance(reserved, Reserved)
    successor = scene()
    successor.set_workload(big())
    successor.restore_reservation(reserved)
    assert successor.sequence >= reserved.sequence
    assert successor.reservations() == {"ns/big": reserved}
    # Unchanged: the successor publishes nothing new about it.
    assert only(successor.cycle(now=300.0), Reserved) == []
    finish(successor, "g1")
    report(successor, {"n3": 8, "n4": 8})
    decisions = successor.cycle(now=HOUR)
    assert [(d.reason, d.reserved_sequence) for d in only(decisions, ReservationDropped)] == [
        ("Started", reserved.sequence)
    ]


def test_a_reservation_does_not_move_while_the_capacity_view_lags_the_end_of_its_gang() -> None:
    """g1 has ended (released) but the topology-cache still shows its node taken: the big gang
    must keep rack r1, whose room is coming free, not move to r2 (two hours away) and let a
    workload without a runtime take r1 (seen in CI: the capacity report came after the end)."""
    admission = scene()
    admission.set_workload(big())
    (reserved,) = only(admission.cycle(now=200.0), Reserved)
    assert reserved.domain == ["b1", "r1"]
    admission.set_workload(job("long", 1, runtime=None, created=150.0))
    decisions = finish(admission, "g1") + admission.cycle(now=300.0)
    assert only(decisions, Reserved) == []
    assert admission.reservations()["ns/big"].domain == ["b1", "r1"]
    assert "ns/long" not in {a.workload for a in only(decisions, Admitted)}
    report(admission, {"n3": 8, "n4": 8})  # the capacity view catches up
    started = admission.cycle(now=400.0)
    assert [a.workload for a in only(started, Admitted)] == ["ns/big"]
    assert [d.reason for d in only(started, ReservationDropped)] == ["Started"]


# --------------------------------------------------------------------------- interplay


def elastic_scene(runtime: float | None) -> Admission:
    """g1 on n1 (ends at 1 h), g2 on n3 (2 h), web (a Deployment declaring ``runtime``) on n4,
    all admitted at time 0; n2 is free once ``old`` has finished. The big gang is then
    reserved rack r1 (n1 and n2), expected to start at 1 h, at 200 s."""
    admission = cluster(*(msg.capacity_node(n, b, r) for n, (b, r) in NODES.items()))
    admission.set_workload(job("g1", 1, runtime=HOUR, created=0.0))
    admission.set_workload(job("old", 1, runtime=None, created=1.0))
    admission.set_workload(job("g2", 1, runtime=2 * HOUR, created=2.0))
    web = msg.workload(
        "web",
        msg.podset(count=1, gpus=8),
        owner_kind="Deployment",
        max_runtime_seconds=runtime,
        created_at=3.0,
    )
    admission.set_workload(web)
    placed = {a.workload: nodes_of(a) for a in only(admission.cycle(now=0.0), Admitted)}
    assert placed == {"ns/g1": {"n1"}, "ns/old": {"n2"}, "ns/g2": {"n3"}, "ns/web": {"n4"}}
    finish(admission, "old")
    report(admission, {"n1": 8, "n3": 8, "n4": 8})
    admission.set_workload(big())
    (reserved,) = only(admission.cycle(now=200.0), Reserved)
    assert (reserved.domain, reserved.expected_start) == (["b1", "r1"], HOUR)
    return admission


def scaled(admission: Admission, name: str, count: int) -> None:
    workload = admission.workload(K(name))
    assert workload is not None
    podset = msgspec.structs.replace(workload.podsets[0], count=count)
    admission.set_workload(msgspec.structs.replace(workload, podsets=[podset]))


@pytest.mark.parametrize(
    ("runtime", "grows", "why"),
    [
        (None, False, "declares no runtime"),
        (1800.0, True, None),  # admitted at 0: it ends at 30 min, before the start at 1 h
        (HOUR, False, "would end at 01:00 UTC"),
        (100.0, False, "outlived its declared runtime"),  # overdue at 300 s
    ],
)
def test_an_elastic_workload_grows_onto_reserved_nodes_only_when_it_would_backfill(
    runtime: float | None, grows: bool, why: str | None
) -> None:
    """The growth of an admitted workload follows the rule of a new admission: n2, the only
    free node, is reserved for the big gang; web's extra pod goes there only when web is
    declared to end before the expected start (counted from its own admission)."""
    admission = elastic_scene(runtime)
    scaled(admission, "web", 2)
    decisions = admission.cycle(now=300.0)
    resized = only(decisions, Admitted)
    if grows:
        (body,) = resized
        assert (body.workload, body.resized, nodes_of(body)) == ("ns/web", True, {"n2", "n4"})
        return
    assert resized == []
    (pending,) = only(decisions, Pending)
    assert (pending.workload, pending.reason) == ("ns/web", "WaitingForCapacity")
    assert "rack r1 is reserved for ns/big" in pending.message
    assert why is not None
    assert why in pending.message
    assert admission.is_admitted(K("web"))


@pytest.mark.parametrize(("runtime", "replaced"), [(None, False), (1800.0, True), (100.0, False)])
def test_lost_slots_are_replaced_on_reserved_nodes_only_when_the_workload_would_backfill(
    runtime: float | None, replaced: bool
) -> None:
    """n4, web's node, fails: its slot is placed again outside the reserved rack, or on it
    only when web would backfill; with no room elsewhere web is evicted and re-queued rather
    than delay the big gang."""
    admission = elastic_scene(runtime)
    held = admission.admitted()[K("web")]
    lost = msg.replace_requested(
        "web",
        {"workers": list(held.assignments["workers"].domains)},
        admitted_sequence=held.sequence,
        nodes=["n4"],
    )
    (decision,) = admission.replace(lost, now=300.0)
    if replaced:
        assert isinstance(decision.body, Admitted)
        assert (decision.body.replaces, nodes_of(decision.body)) == (held.sequence, {"n2"})
        return
    assert isinstance(decision.body, Released)
    assert (decision.body.reason, decision.body.evict_pods) == ("Evicted", True)
    assert "rack r1 is reserved for ns/big" in decision.body.message
    assert not admission.is_admitted(K("web"))


def test_inference_reclaiming_from_a_reserved_rack_gets_the_room_and_the_reservation_moves() -> (
    None
):
    """Inference may still reclaim from a reserved domain: preemption evicts g1 (which the big
    gang's reservation of rack r1 waits for) for an inference service declaring no runtime.
    The service is admitted onto the room freed for it, though reserved, and the reservation is
    recomputed at once: r1 is no longer expected to free, so it moves to r2 (g2's end)."""
    admission = scene()
    admission.set_workload(big())
    (held,) = only(admission.cycle(now=200.0), Reserved)
    assert (held.domain, [w.workload for w in held.waits_for]) == (["b1", "r1"], ["ns/g1"])
    serve = msg.workload(
        "serve", msg.podset(count=1, gpus=8), service_type="inference", created_at=150.0
    )
    admission.set_workload(serve)
    # n2 is free but reserved, and serve declares no runtime: it asks for preemption.
    (asked,) = only(admission.cycle(now=300.0), PreemptRequested)
    assert asked.workload == "ns/serve"
    event = Preempted(
        preemptor="ns/serve",
        preemptor_uid=serve.uid,
        victims=["ns/g1"],
        mode={"ns/g1": "abort"},  # (a restarted g1 would queue again ahead of the gang)
        nominated={"n1": {"nvidia.com/gpu": 8, "cpu": 1000, "pods": 1}},
    )
    released = admission.preempted(event, now=400.0)
    assert [d.key for d in released] == ["ns/g1"]
    report(admission, {"n3": 8, "n4": 8})  # g1's pods are gone

    decisions = admission.cycle(now=500.0)
    (moved,) = only(decisions, Reserved)
    assert (moved.workload, moved.domain, moved.expected_start) == (
        "ns/big",
        ["b1", "r2"],
        2 * HOUR,
    )
    assert [w.workload for w in moved.waits_for] == ["ns/g2"]
    assert moved.sequence > held.sequence
    admitted = {a.workload: a for a in only(decisions, Admitted)}
    assert set(admitted) == {"ns/serve"}
    assert (nodes_of(admitted["ns/serve"]), admitted["ns/serve"].nominated_by) == (
        {"n1"},
        "ns/serve",
    )
    # Nothing moves afterwards: nothing is published again.
    report(admission, {"n1": 8, "n3": 8, "n4": 8})
    assert only(admission.cycle(now=600.0), Reserved) == []
    assert only(admission.cycle(now=700.0), Reserved) == []


def test_time_alone_replans_a_reservation_whose_gang_outlived_its_declared_runtime() -> None:
    """Nothing but time moves: g1, which the big gang's reservation waits for, outlives its
    declared hour. The periodic cycle plans the reservation again and republishes it with the
    estimate moved by one ``overrun_seconds`` step, then nothing until that estimate passes."""
    admission = scene(overrun_seconds=300)
    admission.set_workload(big())
    (held,) = only(admission.cycle(now=200.0), Reserved)
    assert held.expected_start == HOUR
    for tick in (201.0, 1000.0, HOUR - 1):  # ticks with nothing new: nothing published
        assert admission.cycle(now=tick) == []

    (moved,) = only(admission.cycle(now=HOUR + 1), Reserved)
    assert moved.domain == held.domain
    assert moved.expected_start == HOUR + 300
    assert [(w.workload, w.overdue) for w in moved.waits_for] == [("ns/g1", True)]
    assert "ns/g1 outlived its declared runtime, so the estimate moves" in moved.message
    assert admission.reservations()[K("big")] == moved

    for tick in (HOUR + 2, HOUR + 150, HOUR + 299):  # the moved estimate still holds
        assert admission.cycle(now=tick) == []
    # Something else moves meanwhile (the gang is tried again): the plan is the same.
    admission.set_workload(job("other", 1, runtime=None, created=HOUR))
    assert only(admission.cycle(now=HOUR + 299.5), Reserved) == []
    (again,) = only(admission.cycle(now=HOUR + 300), Reserved)
    assert again.expected_start == HOUR + 600
    assert again.sequence > moved.sequence
    assert only(admission.cycle(now=HOUR + 301), Reserved) == []


def test_a_reservation_is_not_dropped_for_no_estimate_while_the_view_lags_the_end_of_its_gang() -> (
    None
):
    """As above, but r2 is held by a gang without a declared runtime: when g1 ends and the
    topology-cache still shows n1 taken, a recomputation finds no estimate at all. The big
    gang must keep r1 rather than drop it and let a workload without a runtime take n2 (seen
    in the demo's tidal day: the 32-pod gang lost its room the moment it came free, to a gang
    that then held it for two hours of the day)."""
    admission = cluster(
        *(msg.capacity_node(n, b, r) for n, (b, r) in NODES.items()),
        queues=(QueueConfig(name="q"),),
        settings=AdmissionSettings(reservations=ReservationSettings()),
    )
    admission.set_workload(job("g1", 1, runtime=HOUR, created=0.0))
    admission.set_workload(job("g2", 2, runtime=None, created=0.0, required=RACK))
    assert len(only(admission.cycle(now=0.0), Admitted)) == 2
    report(admission, {"n1": 8, "n3": 8, "n4": 8})
    admission.set_workload(big())
    (reserved,) = only(admission.cycle(now=200.0), Reserved)
    assert (reserved.domain, [w.workload for w in reserved.waits_for]) == (["b1", "r1"], ["ns/g1"])
    admission.set_workload(job("long", 1, runtime=None, created=150.0))
    decisions = finish(admission, "g1") + admission.cycle(now=300.0)
    assert only(decisions, ReservationDropped) == []
    assert admission.reservations()["ns/big"].domain == ["b1", "r1"]
    assert "ns/long" not in {a.workload for a in only(decisions, Admitted)}
    report(admission, {"n3": 8, "n4": 8})  # the capacity view catches up
    started = admission.cycle(now=400.0)
    assert [a.workload for a in only(started, Admitted)] == ["ns/big"]
    assert [d.reason for d in only(started, ReservationDropped)] == ["Started"]


def test_a_reservation_without_estimate_is_dropped_once_its_gang_has_not_come_free_in_time() -> (
    None
):
    """The same lag, but the room never shows up free (say n1 stays taken by something
    tidegate does not count): once the overrun has passed since the expected start, the
    reservation is dropped for NoEstimate and n2 is open to all again."""
    admission = cluster(
        *(msg.capacity_node(n, b, r) for n, (b, r) in NODES.items()),
        queues=(QueueConfig(name="q"),),
        settings=AdmissionSettings(reservations=ReservationSettings()),
    )
    admission.set_workload(job("g1", 1, runtime=HOUR, created=0.0))
    admission.set_workload(job("g2", 2, runtime=None, created=0.0, required=RACK))
    admission.cycle(now=0.0)
    report(admission, {"n1": 8, "n3": 8, "n4": 8})
    admission.set_workload(big())
    admission.cycle(now=200.0)
    finish(admission, "g1")
    admission.cycle(now=300.0)
    assert "ns/big" in admission.reservations()
    overrun = ReservationSettings().overrun_seconds
    # Capacity moves (a pod tidegate does not admit comes and goes on n2): tried again.
    report(admission, {"n1": 8, "n2": 1, "n3": 8, "n4": 8})
    assert only(admission.cycle(now=HOUR), ReservationDropped) == []  # not yet
    report(admission, {"n1": 8, "n3": 8, "n4": 8})
    decisions = admission.cycle(now=HOUR + overrun + 1)
    assert [d.reason for d in only(decisions, ReservationDropped)] == ["NoEstimate"]
    assert admission.reservations() == {}


def test_a_reservation_is_kept_while_the_view_lags_the_end_of_one_of_the_gangs_it_waits_for() -> (
    None
):
    """Rack r1 frees when g1 (n1, 1 h) and g3 (n2, 1.5 h) end; r2 is held without a declared
    runtime. g1 ends and the view still shows n1 taken: replaying g3's end alone finds no
    room, so no estimate. The reservation stays (seen in the demo: the 32-pod gang, waiting
    for two gangs, lost its block when the first of them ended, to two gangs that took it);
    once the view catches up it is re-planned on g3's end."""
    admission = cluster(
        *(msg.capacity_node(n, b, r) for n, (b, r) in NODES.items()),
        queues=(QueueConfig(name="q"),),
        settings=AdmissionSettings(reservations=ReservationSettings()),
    )
    admission.set_workload(job("g1", 1, runtime=HOUR, created=0.0))
    admission.set_workload(job("g3", 1, runtime=1.5 * HOUR, created=0.0))
    admission.set_workload(job("g2", 2, runtime=None, created=0.0, required=RACK))
    assert len(only(admission.cycle(now=0.0), Admitted)) == 3
    report(admission, {"n1": 8, "n2": 8, "n3": 8, "n4": 8})
    admission.set_workload(big())
    (reserved,) = only(admission.cycle(now=200.0), Reserved)
    assert [w.workload for w in reserved.waits_for] == ["ns/g1", "ns/g3"]
    decisions = finish(admission, "g1") + admission.cycle(now=300.0)
    assert only(decisions, ReservationDropped) == []
    assert admission.reservations()["ns/big"].domain == ["b1", "r1"]
    report(admission, {"n2": 8, "n3": 8, "n4": 8})  # the capacity view catches up
    (again,) = only(admission.cycle(now=400.0), Reserved)
    assert (again.domain, [w.workload for w in again.waits_for]) == (["b1", "r1"], ["ns/g3"])
